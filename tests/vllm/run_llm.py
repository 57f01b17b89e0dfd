# SPDX-License-Identifier: MIT
"""One vLLM instance (a process of its own): generate greedily from prompt
token ids, optionally with the kvtier connector, and write what happened as
JSON: the generated token ids and vLLM's own prefix-cache counters.

usage: run_llm.py MODEL_DIR REQUEST_JSON OUT_JSON
REQUEST_JSON: {"prompt": [ids], "max_tokens": N, "connector": bool,
               "cache_salt": str|null, "block_size": N}
"""
import json
import sys
import time


def counter(metrics, name):
    return sum(getattr(m, "value", 0) for m in metrics if m.name == name)


def main():
    model, req_path, out_path = sys.argv[1:4]
    req = json.load(open(req_path))
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kw = {}
    if req["connector"]:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector="KvtierConnector",
            kv_connector_module_path="kvtier.vllm_connector",
            kv_role="kv_both")
    t0 = time.monotonic()
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32",
              block_size=req["block_size"], max_model_len=2048, max_num_seqs=4,
              enforce_eager=True, enable_prefix_caching=True,
              prefix_caching_hash_algo="sha256_cbor", disable_log_stats=False, seed=0,
              **kw)
    t1 = time.monotonic()
    prompt = {"prompt_token_ids": req["prompt"]}
    if req.get("cache_salt"):
        prompt["cache_salt"] = req["cache_salt"]
    sp = SamplingParams(temperature=0.0, max_tokens=req["max_tokens"], ignore_eos=True,
                        detokenize=False)
    outs = llm.generate([prompt], sp)
    t2 = time.monotonic()
    m = llm.get_metrics()
    res = {
        "tokens": list(outs[0].outputs[0].token_ids),
        "num_cached_tokens": outs[0].num_cached_tokens,
        "external_prefix_cache_queries": counter(m, "vllm:external_prefix_cache_queries"),
        "external_prefix_cache_hits": counter(m, "vllm:external_prefix_cache_hits"),
        "prefix_cache_hits": counter(m, "vllm:prefix_cache_hits"),
        "startup_s": round(t1 - t0, 1),
        "generate_s": round(t2 - t1, 2),
    }
    json.dump(res, open(out_path, "w"))


if __name__ == "__main__":
    main()

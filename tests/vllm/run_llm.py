# SPDX-License-Identifier: MIT
"""One vLLM instance (a process of its own): generate greedily from prompt
token ids, optionally with the kvtier connector, and write what happened as
JSON: the generated token ids and vLLM's own prefix-cache counters.

usage: run_llm.py MODEL_DIR REQUEST_JSON OUT_JSON
REQUEST_JSON: {"prompt": [ids], "max_tokens": N, "connector": bool,
               "cache_salt": str|null, "block_size": N}, and optionally
  "dtype": the model's dtype (float32 unless given); "block_size" null: the
      one vLLM picks (a state model's is aligned to its state's page);
  "connector_class", "connector_module": another connector (a test's
      subclass of KvtierConnector), "extra_config": its
      kv_connector_extra_config;
  "tensor_parallel_size": N: N ranks, each a worker process of its own
      (vLLM's multiprocessing executor; the caller sets
      VLLM_CPU_OMP_THREADS_BIND);
  "steps": [[ids], ...] and "pause_dir": several prompts in turn instead of
      "prompt", with a pause after each: step I's results (as for one
      prompt, counters counted over the step) go to PAUSE_DIR/stepI.json,
      then the run waits for PAUSE_DIR/goI (the test acts on tierd
      meanwhile) and empties vLLM's own prefix cache, so that only kvtier
      can supply the next prompt's prefix. OUT_JSON then has "steps".
"""
import json
import os
import sys
import time

PAUSE_MAX_S = 600


def counter(metrics, name):
    return sum(getattr(m, "value", 0) for m in metrics if m.name == name)


COUNTERS = ("external_prefix_cache_queries", "external_prefix_cache_hits",
            "prefix_cache_hits")


def counters(llm):
    m = llm.get_metrics()
    return {c: counter(m, "vllm:" + c) for c in COUNTERS}


def generate(llm, sp, tokens, salt):
    prompt = {"prompt_token_ids": tokens}
    if salt:
        prompt["cache_salt"] = salt
    before = counters(llm)
    t0 = time.monotonic()
    outs = llm.generate([prompt], sp)
    res = {c: v - before[c] for c, v in counters(llm).items()}
    out = outs[0].outputs[0]
    # each generated token's log-probability: it moves with any change in
    # the KV it was computed from, even where the greedy token does not
    res.update(tokens=list(out.token_ids),
               logprobs=[lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs or ())],
               num_cached_tokens=outs[0].num_cached_tokens,
               generate_s=round(time.monotonic() - t0, 2))
    return res


def pause(pause_dir, i, res):
    path = os.path.join(pause_dir, "step%d.json" % i)
    with open(path + ".tmp", "w") as f:
        json.dump(res, f)
    os.rename(path + ".tmp", path)         # whole, when the test sees it
    go = os.path.join(pause_dir, "go%d" % i)
    deadline = time.monotonic() + PAUSE_MAX_S
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("run_llm: no %s within %d s" % (go, PAUSE_MAX_S))
        time.sleep(0.05)


def main():
    model, req_path, out_path = sys.argv[1:4]
    req = json.load(open(req_path))
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kw = {}
    if req["connector"]:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector=req.get("connector_class", "KvtierConnector"),
            kv_connector_module_path=req.get("connector_module", "kvtier.vllm_connector"),
            kv_role="kv_both", kv_connector_extra_config=req.get("extra_config", {}))
    tp = req.get("tensor_parallel_size", 1)
    if tp > 1:
        kw.update(tensor_parallel_size=tp, distributed_executor_backend="mp")
    t0 = time.monotonic()
    if req["block_size"] is not None:
        kw["block_size"] = req["block_size"]
    llm = LLM(model=model, skip_tokenizer_init=True, dtype=req.get("dtype", "float32"),
              max_model_len=2048, max_num_seqs=4,
              enforce_eager=True, enable_prefix_caching=True,
              prefix_caching_hash_algo="sha256_cbor", disable_log_stats=False, seed=0,
              **kw)
    startup = round(time.monotonic() - t0, 1)
    block_size = llm.llm_engine.vllm_config.cache_config.block_size
    sp = SamplingParams(temperature=0.0, max_tokens=req["max_tokens"], ignore_eos=True,
                        detokenize=False, logprobs=0)
    if "steps" not in req:
        res = generate(llm, sp, req["prompt"], req.get("cache_salt"))
        res.update(startup_s=startup, block_size=block_size)
        json.dump(res, open(out_path, "w"))
        return
    steps = []
    for i, tokens in enumerate(req["steps"]):
        steps.append(generate(llm, sp, tokens, req.get("cache_salt")))
        pause(req["pause_dir"], i, steps[-1])
        llm.reset_prefix_cache()
    json.dump({"steps": steps, "startup_s": startup, "block_size": block_size},
              open(out_path, "w"))


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: MIT
"""`make bench-vllm`: the kvtier connector measured in vLLM (its CPU build),
with a model of a realistic shape and random weights made here (nothing is
downloaded), against a private tierd. Prints one line per figure:

    bench: NAME VALUE UNIT target OP NUMBER     (a figure with a target)
    bench: NAME VALUE UNIT target none          (a figure reported as is)

and a summary of the targets met and missed. Figures (issue 16):
  - TTFT of a 4K- and a 16K-token prompt four ways: recompute (kvtier
    connected, nothing to hit: the miss with its save); a kvtier warm hit
    in a fresh instance; a kvtier cold hit in a fresh instance after a
    tierd restart (warm empty: the blocks come from the cold file, read
    with O_DIRECT); vLLM's in-engine prefix hit (the same prompt again in
    the first instance). Targets: warm <= 1.25x in-engine; cold <= 2x
    in-engine + the disk's time for those bytes (both parts printed; the
    disk time measured here by an O_DIRECT read of as many bytes of the
    cold file); the warm hit supplies every block but the last.
  - the same for a hybrid model (Gemma 2's sliding-window and full
    attention layers, 4K prompt), with kvtier's stored bytes per token
    against the naive figure (every layer keeping every token).
  - under load, three workloads, each submitted at once to one vLLM
    instance whose KV cache (KV_BLOCKS blocks) is too small for its
    working set, run without kvtier, with it in "async": false (sync) and
    "async": true mode, each run with a fresh tierd, the modes taking turns
    ROUNDS times (the fastest run of each counts):
      trace: the first REQUESTS requests of
        data/traces/conversation_trace.jsonl, each hash id a block of
        TOKENS_PER_HASH tokens (the same id, the same tokens), a prompt at
        most MAX_HASH_IDS blocks and TAIL_TOKENS of its own, at most
        MAX_OUT tokens out. These requests share little but the trace's
        first block, which vLLM's own cache keeps: kvtier must not cost
        (target >= 1.0), and the bound says what any cache could gain;
      chains: the trace's own multi-turn chains, in trace order: the
        first CHAINS requests of its first 5,000 that are continued later,
        with every request continuing them, made as above with at most
        CHAIN_HASH_IDS blocks (target >= 1.5);
      conversations: CONVERSATIONS generated conversations of TURNS turns,
        interleaved, each turn its previous prompt and 72 tokens more, the
        case an offload tier is for (target >= 1.5).
    Requests/s, mean and p99 TTFT (from arrival: queueing included), the
    tokens kvtier supplied and those vLLM's own cache did; async / sync
    >= 1.0.

usage: bench_vllm.py [--model NAME] [--part all|ttft|hybrid|replay|trace|chains|conversations]
                     [--quick] [--rounds N] ...
       bench_vllm.py --instance JOB.json   (one vLLM instance; internal)

Each vLLM instance runs in a process of its own (this file, --instance), as
vLLM does not give its memory back within one process.
"""
import argparse
import json
import math
import mmap
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")
TRACE = os.environ.get("KVT_BENCH_TRACE",
                       "/work/shared/data/traces/conversation_trace.jsonl")
BLOCK = 32                # vLLM's CPU attention takes multiples of 32
MAX_MODEL_LEN = 16 * 1024 + 64
INSTANCE_TIMEOUT = 1200

sys.path.insert(0, os.path.join(SRC, "tests", "python"))
from tierd_proc import Tierd  # noqa: E402 (the tests' private tierd)

# The models measured: a plain model for every figure, and a hybrid one
# (several KV cache groups) for the TTFT figures and its stored bytes per
# token. "kv_bytes_per_token" gives the naive figure (every layer keeping
# every token) that kvtier's stored bytes are compared against.
MODELS = {
    # Qwen2-0.5B's shape as a Llama: 24 layers, GQA 14 query / 2 KV heads of
    # 64. float32: without AVX-512 (this machine's AVX2 EPYC) vLLM's CPU build
    # runs bfloat16 emulated, several times slower
    "llama-24L-gqa": {
        "arch": "llama", "layers": 24, "hidden": 896, "heads": 14, "kv_heads": 2,
        "head_dim": 64, "intermediate": 4864, "vocab": 32000, "dtype": "float32",
    },
    # the same shape as Gemma 2: sliding-window (1,024 tokens) and full
    # attention layers alternating, as Gemma 2 and gpt-oss do; vLLM's hybrid
    # allocator gives it a sliding and a full KV cache group
    "gemma2-24L-swa": {
        "arch": "gemma2", "layers": 24, "hidden": 896, "heads": 14, "kv_heads": 2,
        "head_dim": 64, "intermediate": 4864, "vocab": 32000, "dtype": "float32",
        "window": 1024,
    },
}
HYBRID_MODEL = "gemma2-24L-swa"
REPLAY = ("replay", "trace", "chains", "conversations")
CHAIN_WINDOW = 5000       # the trace's requests searched for chains


def bench(name, value, unit, op=None, target=None):
    """One figure's line; returns whether it meets its target (None: none)."""
    if op is None:
        print("bench: %s %s %s target none" % (name, fmt(value), unit), flush=True)
        return None
    print("bench: %s %s %s target %s %s" % (name, fmt(value), unit, op, fmt(target)),
          flush=True)
    return value <= target if op == "<=" else value >= target


def fmt(v):
    if isinstance(v, int):
        return str(v)
    return "%.4g" % v


# ---- the model --------------------------------------------------------------

def make_model(spec, path):
    """Write spec's model with random weights (fixed seed) into path."""
    import torch
    import transformers as tf
    torch.manual_seed(1234)
    common = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"],
                  intermediate_size=spec["intermediate"], num_hidden_layers=spec["layers"],
                  num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
                  head_dim=spec["head_dim"], max_position_embeddings=MAX_MODEL_LEN,
                  torch_dtype=spec["dtype"], bos_token_id=1, eos_token_id=2,
                  initializer_range=0.05)
    if spec["arch"] == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(tie_word_embeddings=False, **common))
    elif spec["arch"] == "gemma2":
        cfg = tf.Gemma2Config(pad_token_id=0, sliding_window=spec["window"],
                              # vLLM's Gemma 2 has no lm_head of its own
                              tie_word_embeddings=True,
                              layer_types=["sliding_attention", "full_attention"]
                              * (spec["layers"] // 2), **common)
        model = tf.Gemma2ForCausalLM(cfg)
    else:
        raise SystemExit("bench_vllm: no maker for %s models" % spec["arch"])
    model.to(getattr(torch, spec["dtype"])).save_pretrained(path, safe_serialization=True)


def kv_bytes_per_token(spec):
    esize = {"float32": 4, "bfloat16": 2, "float16": 2}[spec["dtype"]]
    return spec["layers"] * 2 * spec["kv_heads"] * spec["head_dim"] * esize


# ---- one vLLM instance (a process of its own) -------------------------------

def counters(llm):
    out = {}
    for m in llm.get_metrics():
        for c in ("external_prefix_cache_queries", "external_prefix_cache_hits",
                  "prefix_cache_queries", "prefix_cache_hits"):
            if m.name == "vllm:" + c:
                out[c] = out.get(c, 0) + getattr(m, "value", 0)
    return out


def instance(job_path):
    """Run the job: {"model", "connector": null | extra_config, "kv_blocks":
    null | N, "phases": [...], "out"}; a phase is {"ttft": name, "prompt":
    ids} (one prompt alone, max_tokens 1, timed) or {"replay": [[ids,
    max_tokens], ...]} (all at once)."""
    job = json.load(open(job_path))
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    kw = {}
    if job["connector"] is not None:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector="KvtierConnector", kv_connector_module_path="kvtier.vllm_connector",
            kv_role="kv_both", kv_connector_extra_config=job["connector"])
    if job.get("kv_blocks"):
        kw["num_gpu_blocks_override"] = job["kv_blocks"]
    t0 = time.monotonic()
    llm = LLM(model=job["model"], skip_tokenizer_init=True, dtype=job["dtype"],
              block_size=BLOCK, max_model_len=job.get("max_model_len") or MAX_MODEL_LEN,
              max_num_seqs=job.get("max_num_seqs", 8), enforce_eager=True,
              enable_prefix_caching=True, prefix_caching_hash_algo="sha256_cbor",
              disable_log_stats=False, seed=0, **kw)
    res = {"startup_s": time.monotonic() - t0, "phases": []}
    # a first request of its own, untimed: a process's first forward passes
    # pay one-time costs (allocations, kernel setup) a serving instance
    # has long paid
    g = random.Random(job["model"] + "warmup")
    llm.generate([{"prompt_token_ids": [g.randrange(3, 30000) for _ in range(2 * BLOCK + 5)]}],
                 SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True,
                                detokenize=False), use_tqdm=False)
    for ph in job["phases"]:
        before = counters(llm)
        if "ttft" in ph:
            sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True,
                                detokenize=False)
            t = time.monotonic()
            o = llm.generate([{"prompt_token_ids": ph["prompt"]}], sp, use_tqdm=False)
            r = {"ttft": ph["ttft"], "s": time.monotonic() - t,
                 "tokens": list(o[0].outputs[0].token_ids)}
        else:
            prompts = [{"prompt_token_ids": p} for p, _ in ph["replay"]]
            sps = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True,
                                  detokenize=False) for _, n in ph["replay"]]
            t = time.monotonic()
            outs = llm.generate(prompts, sps, use_tqdm=False)
            r = {"replay": True, "s": time.monotonic() - t,
                 "ttfts": [o.metrics.first_token_latency if o.metrics else None
                           for o in outs],
                 "tokens": [list(o.outputs[0].token_ids) for o in outs]}
        after = counters(llm)
        r.update({k: after.get(k, 0) - before.get(k, 0) for k in after})
        res["phases"].append(r)
        print("bench-instance: %s" % {k: v for k, v in r.items()
                                      if k not in ("tokens", "ttfts")}, flush=True)
    json.dump(res, open(job["out"], "w"))


# ---- the driver -------------------------------------------------------------

def tierd(work, size):
    """A private tierd in work, warm and cold tiers of size each."""
    return Tierd("--warm-bytes", size, "--cold-bytes", size, "--no-mlock", parent=work,
                 start_s=20)


# vLLM's CPU build reserves a core for its scheduler's process, and one more
# whenever a KV connector is configured; on 2 cores that leaves the OpenMP
# threads 1 core without a connector and (reserving all, so none) 2 with one.
# Instances compared with and without kvtier all get vLLM's own
# no-connector split, so the connector's runs get no core the others lack
REPLAY_RESERVED_CPUS = "1"


def run_instance(work, name, model, dtype, phases, tierd=None, connector=None,
                 kv_blocks=None, max_model_len=None, reserved_cpus=None):
    job = {"model": model, "dtype": dtype, "connector": connector, "kv_blocks": kv_blocks,
           "max_model_len": max_model_len,
           "phases": phases, "out": os.path.join(work, name + ".out.json")}
    jp = os.path.join(work, name + ".job.json")
    json.dump(job, open(jp, "w"))
    env = dict(os.environ)
    env.update({"PYTHONHASHSEED": "0", "VLLM_TARGET_DEVICE": "cpu",
                # one step of a 16K prefill outlasts vLLM's default 300 s here
                "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3000",
                "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "2"),
                "PYTHONPATH": os.pathsep.join([os.path.join(SRC, "client", "python"),
                                               env.get("PYTHONPATH", "")])})
    if tierd is not None:
        env["KVTIER_SOCKET"] = tierd.sock
    if reserved_cpus is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = reserved_cpus
    logf = os.path.join(work, name + ".log")
    t = time.monotonic()
    with open(logf, "w") as lf:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--instance", jp],
                           env=env, stdout=lf, stderr=subprocess.STDOUT,
                           timeout=INSTANCE_TIMEOUT)
    if p.returncode != 0:
        sys.stdout.write(open(logf).read()[-4000:])
        raise SystemExit("bench_vllm: instance %s exited %d (log %s)"
                         % (name, p.returncode, logf))
    res = json.load(open(job["out"]))
    print("  instance %s: started in %.0f s, ran %.0f s in all"
          % (name, res["startup_s"], time.monotonic() - t), flush=True)
    return res["phases"]


def disk_read_s(path, nbytes):
    """Seconds an O_DIRECT read of nbytes of path takes (4 MiB reads): the
    disk's time for that many bytes, past the page cache."""
    chunk = 4 << 20
    buf = mmap.mmap(-1, chunk)            # page-aligned, as O_DIRECT wants
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    try:
        size = os.fstat(fd).st_size
        nbytes = min(nbytes, size - size % 4096)
        done, t = 0, time.monotonic()
        while done < nbytes:
            got = os.preadv(fd, [buf], done)
            if got <= 0:
                break
            done += got
        return (time.monotonic() - t) * nbytes / max(done, 1)
    finally:
        os.close(fd)
        buf.close()


def ttft_figures(work, model, spec, lengths, tag=""):
    """The TTFT figures of spec's model, each name prefixed by tag; returns
    the targets' outcomes."""
    rng = random.Random(4)
    prompts = {n: [rng.randrange(3, spec["vocab"]) for _ in range(n)] for n in lengths}
    names = {n: tag + ("%dk" % (n // 1024) if n % 1024 == 0 else str(n)) for n in lengths}
    naive = kv_bytes_per_token(spec)
    need = sum(n // BLOCK + 1 for n in lengths) * BLOCK * naive
    size = "%dM" % (2 * need // (1 << 20) + 64)
    d = tierd(work, size)
    ext = {"socket": d.sock}
    run = tag + "ttft-"
    try:
        # instance A: each prompt recomputed (its blocks saved), then again
        # (vLLM's own prefix cache)
        ph = []
        for n in lengths:
            ph += [{"ttft": "recompute", "prompt": prompts[n]},
                   {"ttft": "in_engine", "prompt": prompts[n]}]
        a = run_instance(work, run + "a", model, spec["dtype"], ph, d, ext)
        # what kvtier keeps per token of the prompts' full blocks: a hybrid
        # model's sliding layers keep their window, not every token
        stored = d.stats()["tier"]["warm"]["bytes_in"] / sum(n // BLOCK * BLOCK for n in lengths)
        # instance B: a fresh one, the blocks in kvtier's warm tier
        b = run_instance(work, run + "warm", model, spec["dtype"],
                         [{"ttft": "warm", "prompt": prompts[n]} for n in lengths], d, ext)
        # tierd stopped (its warm blocks written to cold) and started again:
        # warm empty, every block on disk
        with __import__("kvtier").Client(d.sock) as c:
            c.flush()
        d.kill()
        d.start()
        warm_after = d.stats()["tier"]["warm"]
        cold_file = os.path.join(d.dir, "data", "cold.data")
        c_ = run_instance(work, run + "cold", model, spec["dtype"],
                          [{"ttft": "cold", "prompt": prompts[n]} for n in lengths], d, ext)
        cold_hits = d.stats()["tier"]["cold"]["hits"]
        d.kill()
        disk_s = {n: disk_read_s(cold_file, int((n - 1) // BLOCK * BLOCK * stored))
                  for n in lengths}
    finally:
        d.stop()
    print("  tierd after its restart: warm tier %s; cold hits in the cold instance: %d"
          % ({k: warm_after[k] for k in list(warm_after)[:4]}, cold_hits))
    bench("%sstored_bytes_per_token" % tag, stored, "B")
    bench("%snaive_bytes_per_token" % tag, naive, "B")
    bench("%sstored_vs_naive" % tag, stored / naive, "ratio")
    ok = []
    for i, n in enumerate(lengths):
        rec, inb = a[2 * i], a[2 * i + 1]
        warm, cold = b[i], c_[i]
        k = names[n]
        disk = disk_s[n]
        bench("ttft_%s_recompute" % k, rec["s"], "s")
        bench("ttft_%s_in_engine_hit" % k, inb["s"], "s")
        ok.append(bench("ttft_%s_warm_hit" % k, warm["s"], "s", "<=", 1.25 * inb["s"]))
        bench("ttft_%s_warm_vs_in_engine" % k, warm["s"] / inb["s"], "x", "<=", 1.25)
        bench("ttft_%s_cold_disk_time" % k, disk, "s")
        bench("ttft_%s_cold_2x_in_engine" % k, 2 * inb["s"], "s")
        ok.append(bench("ttft_%s_cold_hit" % k, cold["s"], "s", "<=", 2 * inb["s"] + disk))
        bench("ttft_%s_kvtier_tokens_warm" % k, warm["external_prefix_cache_hits"], "tokens")
        bench("ttft_%s_kvtier_tokens_cold" % k, cold["external_prefix_cache_hits"], "tokens")
        # a restore that served nothing would be a fast miss, not a hit
        ok.append(bench("ttft_%s_kvtier_tokens_warm_share" % k,
                        warm["external_prefix_cache_hits"] / ((n - 1) // BLOCK * BLOCK),
                        "ratio", ">=", 1.0))
        same = rec["tokens"] == inb["tokens"] == warm["tokens"] == cold["tokens"]
        print("  %s: first token %s four ways (%s)" % (k, "identical" if same else "DIFFERS",
              [x["tokens"] for x in (rec, inb, warm, cold)]))
        ok.append(same)
    return ok


def prompt_tokens(seed, n):
    g = random.Random(seed)
    return [g.randrange(3, 30000) for _ in range(n)]


def trace_requests(n, tokens_per_hash, max_hash_ids, max_out, tail):
    """The first n requests of the bundled trace: a prompt of token ids
    (hash id h is a block of tokens drawn from seed h; input_length scaled
    as the block; at most max_hash_ids blocks, the leading ones, where
    prefixes are shared) followed by tail tokens of the request's own (its
    new question: without it a prompt would end on a block boundary, and
    vLLM computes a prompt's last token itself, so its last block could
    never be a hit), and a number of tokens out."""
    out = []
    with open(TRACE) as f:
        for i, line in enumerate(f):
            if len(out) == n:
                break
            out.append(trace_request(json.loads(line), i, tokens_per_hash, max_hash_ids,
                                     max_out, tail))
    return out


def trace_request(r, i, tokens_per_hash, max_hash_ids, max_out, tail):
    """Trace request r (line i) as (prompt tokens, tokens out), as
    trace_requests describes."""
    want = max(1, math.ceil(r["input_length"] * tokens_per_hash / 512))
    toks = []
    for h in r["hash_ids"][:max_hash_ids]:
        toks += prompt_tokens(h, tokens_per_hash)
    return toks[:want] + prompt_tokens("tail-%d" % i, tail), max(1, min(r["output_length"],
                                                                         max_out))


def trace_chain_requests(chains, tokens_per_hash, max_hash_ids, max_out, tail,
                         window=CHAIN_WINDOW):
    """The trace's own multi-turn chains, in trace order: of its first
    `window` requests, the first `chains` that are continued later (a
    request continues an earlier one, as its next turn, when it begins with
    all of that one's full blocks, at least two) with every request that
    continues them, each made by trace_request. The head of the trace
    holds few continuations (a next turn comes a median 384 requests
    later); these are the requests an offload tier is for, with the
    trace's own lengths and reuse. An error when the trace holds no such
    chain."""
    rs = []
    with open(TRACE) as f:
        for i, line in enumerate(f):
            if i == window:
                break
            rs.append(json.loads(line))
    first_of, parent = {}, {}
    for j, r in enumerate(rs):
        h = tuple(r["hash_ids"])
        for k in range(len(h), 1, -1):
            p = first_of.get(h[:k])
            if p is not None:
                # a next turn holds all of the earlier one's full blocks
                # (its last may be partial); two shared blocks of a long
                # prompt are a shared system prompt, not a conversation
                if k >= len(rs[p]["hash_ids"]) - 1:
                    parent[j] = p
                break
        for k in range(2, len(h) + 1):
            first_of.setdefault(h[:k], j)
    root = {}
    for j in range(len(rs)):          # a parent comes first: its root is known
        root[j] = root[parent[j]] if j in parent else j
    continued = {root[j] for j in parent}
    roots = [j for j in range(len(rs)) if j not in parent and j in continued][:chains]
    picked, keep = [], set(roots)
    for j, r in enumerate(rs):
        if root[j] in keep:
            picked.append(trace_request(r, j, tokens_per_hash, max_hash_ids, max_out, tail))
    if not picked:
        raise SystemExit("bench_vllm: no chain of turns among the first %d requests of %s"
                         % (window, TRACE))
    return picked


def conversation_requests(convs, turns, system, grow, max_out):
    """A generated multi-turn workload, the case an offload tier is for:
    convs conversations sharing a system prompt of `system` tokens, each
    turn's prompt the previous one plus `grow` tokens (the answer and the
    next question), the turns interleaved round-robin, so that between two
    turns of a conversation come all the others: more KV than vLLM's cache
    holds, which then evicts a conversation before its next turn."""
    sys_toks = prompt_tokens("system", system)
    hist = [sys_toks + prompt_tokens("conv-%d" % c, grow * turns) for c in range(convs)]
    return [(hist[c][:system + grow * (t + 1)], max_out)
            for t in range(turns) for c in range(convs)]


def cacheable_tokens(reqs):
    """The prompt tokens an unbounded prefix cache could serve (the full
    blocks, bar the one holding a prompt's last token, whose prefix an
    earlier request had), and the distinct full-block prefixes."""
    seen, hit = set(), 0
    for toks, _ in reqs:
        run = True
        for b in range((len(toks) - 1) // BLOCK):
            key = tuple(toks[:(b + 1) * BLOCK])
            run = run and key in seen
            hit += BLOCK if run else 0
        for b in range(len(toks) // BLOCK):
            seen.add(tuple(toks[:(b + 1) * BLOCK]))
    return hit, len(seen)


def replay_figures(work, model, spec, name, what, reqs, kv_blocks, target, rounds):
    """Replay reqs (all submitted at once) without kvtier, with it in sync
    and in async mode; the figures named replay_<name>_..., requests/s
    with kvtier (async) / without against target (None: reported only)."""
    block_bytes = kv_bytes_per_token(spec) * BLOCK
    total = sum(len(p) for p, _ in reqs)
    cacheable, uniq = cacheable_tokens(reqs)
    print("  replay %s: %s; %d requests, %d prompt tokens, %d distinct blocks (%.0f MiB of "
          "KV), at most %d tokens out, all submitted at once; vLLM's KV cache %d blocks of %d "
          "tokens (%.0f MiB)" % (name, what, len(reqs), total, uniq, uniq * block_bytes / 2**20,
                                 max(n for _, n in reqs), kv_blocks, BLOCK,
                                 kv_blocks * block_bytes / 2**20), flush=True)
    bench("replay_%s_cacheable_share" % name, cacheable / total, "ratio")
    size = "%dM" % (2 * uniq * block_bytes // (1 << 20) + 64)
    # vLLM refuses a max_model_len its KV cache cannot hold
    max_len = (max(len(p) + n for p, n in reqs) // BLOCK + 1) * BLOCK
    if max_len > kv_blocks * BLOCK:
        raise SystemExit("bench_vllm: %d KV blocks cannot hold a %d-token request"
                         % (kv_blocks, max_len))
    # the modes take turns, rounds times, each run with a fresh tierd, and
    # each mode's fastest run counts: this machine's load moves by several
    # times within minutes, and the fastest run is the one it disturbed least
    runs = {}
    for rnd in range(rounds):
        for mode, ext in (("without", None), ("sync", {"async": False}),
                          ("async", {"async": True})):
            d = None if ext is None else tierd(work, size)
            try:
                if d is not None:
                    ext = dict(ext, socket=d.sock)
                r = run_instance(work, "replay-%s-%s-%d" % (name, mode, rnd), model,
                                 spec["dtype"], [{"replay": reqs}], d, ext, kv_blocks,
                                 max_len, reserved_cpus=REPLAY_RESERVED_CPUS)[0]
            finally:
                if d is not None:
                    d.stop()
            print("  replay %s %s, round %d: %.1f s" % (name, mode, rnd + 1, r["s"]),
                  flush=True)
            if mode not in runs or r["s"] < runs[mode]["s"]:
                runs[mode] = r
    for mode, r in runs.items():
        t = sorted(x for x in r["ttfts"] if x is not None)
        label = "replay_%s_%s" % (name, "without_kvtier" if mode == "without"
                                  else "kvtier_" + mode)
        r["rps"] = len(reqs) / r["s"]
        bench(label + "_requests_per_s", r["rps"], "req/s")
        bench(label + "_ttft_mean", sum(t) / len(t), "s")
        bench(label + "_ttft_p99", t[min(len(t) - 1, int(math.ceil(0.99 * len(t))) - 1)], "s")
        bench(label + "_kvtier_tokens", r.get("external_prefix_cache_hits", 0), "tokens")
        bench(label + "_in_engine_tokens", r.get("prefix_cache_hits", 0), "tokens")
        if mode != "without":
            diff = sum(a != b for a, b in zip(r["tokens"], runs["without"]["tokens"]))
            print("  %s: %d of %d requests generated other tokens than without kvtier"
                  % (label, diff, len(reqs)))
    # what any cache could gain here, were the run bound by prefill: the
    # tokens vLLM computed without kvtier over those left with every
    # cacheable block served
    own = runs["without"].get("prefix_cache_hits", 0)
    bench("replay_%s_bound_vs_without" % name, (total - own) / max(total - cacheable, 1), "x")
    ok = [bench("replay_%s_requests_per_s_kvtier_vs_without" % name,
                runs["async"]["rps"] / runs["without"]["rps"], "x",
                *((">=", target) if target else ())),
          bench("replay_%s_requests_per_s_async_vs_sync" % name,
                runs["async"]["rps"] / runs["sync"]["rps"], "x", ">=", 1.0)]
    return [x for x in ok if x is not None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instance")
    ap.add_argument("--model", default="llama-24L-gqa",
                    choices=sorted(k for k in MODELS if k != HYBRID_MODEL))
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--tokens-per-hash", type=int, default=BLOCK)
    # sized for 2 shared AVX2 cores (about 40 prompt tokens/s for this model)
    ap.add_argument("--max-hash-ids", type=int, default=2)
    ap.add_argument("--tail-tokens", type=int, default=8)
    ap.add_argument("--max-out", type=int, default=2)
    ap.add_argument("--kv-blocks", type=int, default=32)
    ap.add_argument("--chains", type=int, default=8,
                    help="chains: the trace's first CHAINS continued requests, with their turns")
    ap.add_argument("--chain-hash-ids", type=int, default=16,
                    help="chains: at most this many hash ids (blocks) per prompt")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of each replay mode, taking turns; the fastest counts")
    ap.add_argument("--quick", action="store_true",
                    help="short prompts and few requests: checks the bench runs")
    ap.add_argument("--lengths", type=lambda v: [int(x) for x in v.split(",")],
                    default=[4096, 16384], help="the TTFT prompts' lengths (tokens)")
    ap.add_argument("--hybrid-lengths", type=lambda v: [int(x) for x in v.split(",")],
                    default=[4096], help="the hybrid model's TTFT prompts (tokens)")
    ap.add_argument("--part", choices=("all", "ttft", "hybrid") + REPLAY, default="all",
                    help="replay: the three workloads; trace, chains or conversations: one")
    ap.add_argument("--work", default=os.path.join(SRC, "build", "bench-vllm"))
    a = ap.parse_args()
    if a.instance:
        return instance(a.instance)
    sys.path.insert(0, os.path.join(SRC, "client", "python"))
    os.environ.setdefault("KVTIER_LIB", os.path.join(BIN, "libkvtier.so"))
    if a.quick:
        a.lengths, a.hybrid_lengths = [512, 1024], [1536]
        a.requests, a.chains, a.conversations, a.turns, a.rounds = 20, 3, 6, 3, 1
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    t0 = time.monotonic()
    ok = []
    for name in (a.model, HYBRID_MODEL):
        part = "hybrid" if name == HYBRID_MODEL else "ttft"
        if a.part not in ("all", part) and not (part == "ttft" and a.part in REPLAY):
            continue
        spec = MODELS[name]
        model = os.path.join(a.work, name)
        make_model(spec, model)
        print("bench-vllm: model %s (%s), random weights; %d bytes of KV per token (every "
              "layer, every token); vLLM block size %d; nproc %d; load average %.1f"
              % (name, ", ".join("%s=%s" % kv for kv in spec.items()), kv_bytes_per_token(spec),
                 BLOCK, os.cpu_count(), os.getloadavg()[0]), flush=True)
        if part == "hybrid":
            ok += ttft_figures(a.work, model, spec, a.hybrid_lengths, "hybrid_")
            continue
        if a.part in ("all", "ttft"):
            ok += ttft_figures(a.work, model, spec, a.lengths)
        if a.part in ("all", "replay", "trace"):
            reqs = trace_requests(a.requests, a.tokens_per_hash, a.max_hash_ids, a.max_out,
                                  a.tail_tokens)
            # the first requests of the bundled trace reuse little but its
            # shared first block (a conversation's next turn comes a median
            # 384 requests later): kvtier must not cost there, and its
            # bound says what any cache could gain
            ok += replay_figures(a.work, model, spec, "trace", "the first %d requests of %s "
                                 "(%d tokens per hash id, at most %d hash ids, %d tokens of "
                                 "its own)" % (a.requests, os.path.basename(TRACE),
                                               a.tokens_per_hash, a.max_hash_ids,
                                               a.tail_tokens),
                                 reqs, a.kv_blocks, 1.0, a.rounds)
        if a.part in ("all", "replay", "chains"):
            reqs = trace_chain_requests(a.chains, a.tokens_per_hash, a.chain_hash_ids,
                                        a.max_out, a.tail_tokens)
            ok += replay_figures(a.work, model, spec, "chains",
                                 "the first %d chains of turns among the first %d requests "
                                 "of %s, in trace order (%d tokens per hash id, at most %d "
                                 "hash ids, %d tokens of its own)"
                                 % (a.chains, CHAIN_WINDOW, os.path.basename(TRACE),
                                    a.tokens_per_hash, a.chain_hash_ids, a.tail_tokens),
                                 reqs, a.kv_blocks, 1.5, a.rounds)
        if a.part in ("all", "replay", "conversations"):
            system, grow = 2 * BLOCK, 2 * BLOCK + 8
            reqs = conversation_requests(a.conversations, a.turns, system, grow, a.max_out)
            ok += replay_figures(a.work, model, spec, "conversations",
                                 "%d conversations of %d turns, interleaved; a %d-token "
                                 "system prompt, %d tokens more each turn"
                                 % (a.conversations, a.turns, system, grow),
                                 reqs, a.kv_blocks, 1.5, a.rounds)
    met = sum(1 for x in ok if x)
    print("bench-vllm: %d of %d targets met; %.0f s in all; load average at the end %.1f "
          "(this machine's CPUs are shared: figures move with the others' load)"
          % (met, len(ok), time.monotonic() - t0, os.getloadavg()[1]))


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: MIT
"""End to end with real vLLM (its CPU build), a tiny random Llama and a
private tierd. Each run is a new vLLM instance in a process of its own
(tests/vllm/run_llm.py):

  baseline  no connector, prompt P + suffix S      -> tokens T
  run 1     connector, P (512 tokens)              -> P's 16 blocks land in tierd
  run 2     connector, P + S                       -> vLLM counts 512 external
                                                      prefix-cache hits, loaded
                                                      asynchronously; tokens == T
  run 2s    as run 2, "async": false               -> the same, loaded in the step
  run 3     connector, P + S, another cache_salt   -> no hits; tokens == T

then the same at tensor_parallel_size=2 (test_tensor_parallel_2), and one
instance through tierd's failures (test_tierd_failures).
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import kvtier

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
BS = 32
MAX_TOKENS = 16
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), str(d)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return str(d)


def vllm_env(tierd, **env_set):
    """The environment of a vLLM run: PYTHONHASHSEED=0 unless env_set says
    otherwise (None: unset)."""
    env = dict(os.environ)
    env.update({
        "PYTHONHASHSEED": "0",
        "KVTIER_SOCKET": tierd.sock,
        "PYTHONPATH": os.pathsep.join([os.path.join(SRC, "client", "python"), HERE,
                                       env.get("PYTHONPATH", "")]),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        # vLLM's CPU build keeps a core more off the model's threads when a
        # KV connector is set, and bf16 results vary with the thread count:
        # the same threads with and without kvtier
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
    })
    for k, v in env_set.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def start_vllm(tmp, name, model, req, env):
    """run_llm.py on req, in the background: (process, out path, log path)."""
    rq, out, logf = (os.path.join(tmp, name + ext) for ext in (".req.json", ".out.json", ".log"))
    json.dump(req, open(rq, "w"))
    with open(logf, "w") as lf:
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "run_llm.py"), model, rq, out],
                             env=env, stdout=lf, stderr=subprocess.STDOUT)
    return p, out, logf


def vllm_failed(name, p, logf):
    tail = open(logf).read()[-6000:]
    pytest.fail("vLLM run %s exited %s; log %s ends:\n%s" % (name, p.returncode, logf, tail))


def tp_env(tp):
    """vLLM's CPU build binds each rank's OpenMP threads to NUMA nodes of
    their own and refuses more ranks than nodes: one CPU per rank instead
    (all of them shared where there are fewer CPUs than ranks)."""
    if tp == 1:
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(str(c) for c in cpus[:tp])
            if len(cpus) >= tp else "nobind"}


def run_vllm(tmp, name, model, tierd, tokens, connector, salt=None, extra=None, tp=1,
             **req_set):
    """One run_llm.py instance on tokens; req_set overrides fields of its
    request (dtype, block_size)."""
    req = {"prompt": tokens, "max_tokens": MAX_TOKENS, "connector": connector,
           "cache_salt": salt, "block_size": BS, "extra_config": extra or {},
           "tensor_parallel_size": tp, **req_set}
    p, out, logf = start_vllm(tmp, name, model, req, vllm_env(tierd, **tp_env(tp)))
    try:
        p.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if p.returncode != 0:
        vllm_failed(name, p, logf)
    res = json.load(open(out))
    res["log"] = open(logf).read()
    print("  %-9s connector=%-5s salt=%-8s prompt=%d tokens: external hits %d of %d queried, "
          "local hits %d, startup %.0f s; generated %s"
          % (name, connector, salt, len(tokens), res["external_prefix_cache_hits"],
             res["external_prefix_cache_queries"], res["prefix_cache_hits"], res["startup_s"],
             res["tokens"]))
    return res


@pytest.fixture(scope="module")
def baseline(tierd, model, tmp_path_factory):
    """Prompt P (512 tokens), suffix S (10) and the tokens vLLM generates for
    P + S without kvtier."""
    rng = random.Random(7)
    prompt = [rng.randrange(3, 1024) for _ in range(512)]
    suffix = [rng.randrange(3, 1024) for _ in range(10)]
    print()
    base = run_vllm(str(tmp_path_factory.mktemp("baseline")), "baseline", model, tierd,
                    prompt + suffix, connector=False)
    assert len(base["tokens"]) == MAX_TOKENS
    return prompt, suffix, base["tokens"]


def ns_info(tierd, model, tp_size=1):
    with kvtier.Client(tierd.sock) as c:
        mine = [n for n in c.namespaces() if n["model_id"] == model and n["tp_size"] == tp_size]
    assert len(mine) == 1, "expected one namespace for %s, got %r" % (model, mine)
    return mine[0]


def test_prefix_blocks_shared_across_vllm_instances(tierd, model, baseline, tmp_path):
    prompt, suffix, base_tokens = baseline
    tmp = str(tmp_path)

    r1 = run_vllm(tmp, "run1", model, tierd, prompt, connector=True)
    assert r1["external_prefix_cache_hits"] == 0
    ns = ns_info(tierd, model)
    print("  tierd namespace after run 1: %s %s %s, %d-byte blocks, %d blocks put"
          % (ns["model_id"], ns["dtype"], ns["layout"], ns["block_bytes"], ns["put_blocks"]))
    assert ns["put_blocks"] == 512 // BS
    assert (ns["dtype"], ns["block_tokens"], ns["layout"]) == ("fp32", BS, "vllm:2Lx2Hx32D")
    # vLLM's hashes (PYTHONHASHSEED=0, sha256_cbor) are the keys libkvtier computes
    keys = kvtier.hash_prompt(prompt, BS, seed="0")
    with kvtier.Client(tierd.sock) as c:
        ns_h = c.ns_open(model, "fp32", "vllm:2Lx2Hx32D", BS, ns["block_bytes"])
        assert ns_h.lookup(keys) == 512 // BS

    r2 = run_vllm(tmp, "run2", model, tierd, prompt + suffix, connector=True)
    assert r2["external_prefix_cache_hits"] == 512, "vLLM counted %d external hits" \
        % r2["external_prefix_cache_hits"]
    assert r2["tokens"] == base_tokens, "tokens differ from the run without kvtier"
    ns2 = ns_info(tierd, model)
    assert ns2["get_blocks"] - ns["get_blocks"] == 512 // BS    # restored through kvtier
    assert "asynchronous loads and saves" in r2["log"]

    r2s = run_vllm(tmp, "run2s", model, tierd, prompt + suffix, connector=True,
                   extra={"async": False})
    assert "; synchronous loads and saves" in r2s["log"]
    assert r2s["external_prefix_cache_hits"] == 512
    assert r2s["tokens"] == base_tokens, "synchronous: tokens differ from the run without kvtier"
    assert ns_info(tierd, model)["get_blocks"] - ns2["get_blocks"] == 512 // BS

    r3 = run_vllm(tmp, "run3", model, tierd, prompt + suffix, connector=True, salt="other")
    assert r3["external_prefix_cache_queries"] > 0
    assert r3["external_prefix_cache_hits"] == 0
    assert r3["tokens"] == base_tokens
    print("  PASS: run 2 restored %d tokens from kvtier and generated the baseline's tokens; "
          "run 3 (other salt) had no hits" % r2["external_prefix_cache_hits"])


def test_tensor_parallel_2(tierd, model, baseline, tmp_path):
    """tensor_parallel_size=2 in vLLM's CPU build (it runs here: two worker
    processes, one CPU each, talking over gloo; about a minute to start).
    Each rank saves its own KV heads to a namespace shard of its own, and
    the scheduler's hit is the shortest run over the ranks:
      baseline2  TP=2, no connector, P + S          -> tokens T2
      tp-run1    TP=2, connector, P                 -> 16 blocks in each rank's
                                                       namespace, head r's KV in rank r's
      the test removes blocks 8..15 from rank 1's namespace (kvt_remove takes
      a chain's tail only: a block with children stays)
      tp-run2    a new TP=2 instance, P + S         -> 256 external hits (rank 1
                                                       holds 8 blocks), tokens == T2;
                 then, its own cache emptied, P + S -> 512 hits (the recomputed
                                                       blocks were saved again), == T2
    """
    prompt, suffix, base_tokens = baseline
    tmp = str(tmp_path)
    n = len(prompt) // BS
    keys = kvtier.hash_prompt(prompt, BS, seed="0")
    print()
    base2 = run_vllm(tmp, "baseline2", model, tierd, prompt + suffix, connector=False, tp=2)
    print("  TP=2 tokens %s TP=1's" % ("==" if base2["tokens"] == base_tokens else "!="))
    t2 = base2["tokens"]

    r1 = run_vllm(tmp, "tp-run1", model, tierd, prompt, connector=True, tp=2)
    assert r1["external_prefix_cache_hits"] == 0
    with kvtier.Client(tierd.sock) as c:
        shards = sorted((d for d in c.namespaces() if d["model_id"] == model
                         and d["tp_size"] == 2), key=lambda d: d["tp_rank"])
        assert [d["tp_rank"] for d in shards] == [0, 1], shards
        # 2 KV heads over 2 ranks: one head per rank, half of TP=1's block
        for d in shards:
            assert (d["layout"], d["block_bytes"], d["put_blocks"]) == \
                ("vllm:2Lx1Hx32D", 2 * 2 * BS * 1 * 32 * 4, n), d
        ns = [c.ns_open(model, "fp32", "vllm:2Lx1Hx32D", BS, shards[0]["block_bytes"],
                        tp_rank=r, tp_size=2) for r in (0, 1)]
        assert [h.lookup(keys) for h in ns] == [n, n]
        # rank r's blocks are head r of the TP=1 instance's blocks (same prompt,
        # same weights; only the tensor-parallel sums round differently)
        one = c.ns_open(model, "fp32", "vllm:2Lx2Hx32D", BS, 2 * 2 * BS * 2 * 32 * 4)
        if one.lookup(keys) < n:
            run_vllm(tmp, "tp1-ref", model, tierd, prompt, connector=True)
        full = torch.frombuffer(bytearray(b"".join(one.get(keys))), dtype=torch.float32)
        full = full.view(n, 2, 2, BS, 2, 32)       # block, layer, K/V, token, head, dim
        for r, h in enumerate(ns):
            mine = torch.frombuffer(bytearray(b"".join(h.get(keys))), dtype=torch.float32)
            mine = mine.view(n, 2, 2, BS, 32)
            assert torch.allclose(mine, full[:, :, :, :, r, :], rtol=1e-3, atol=1e-4), \
                "rank %d's namespace does not hold KV head %d" % (r, r)
        assert ns[1].remove(keys[8:]) == n - 8
        assert [h.lookup(keys) for h in ns] == [n, 8]
        put1 = shards[1]["put_blocks"]

    req = {"steps": [prompt + suffix] * 2, "pause_dir": tmp, "max_tokens": MAX_TOKENS,
           "connector": True, "block_size": BS, "tensor_parallel_size": 2}
    run = Steps(tmp, "tp-run2", model, req, vllm_env(tierd, **tp_env(2)))
    try:
        r = run.next()
        print("  tp-run2 step 0 (blocks 8.. missing in rank 1): external hits %d of %d queried; "
              "tokens %s" % (r["external_prefix_cache_hits"], r["external_prefix_cache_queries"],
                             "== baseline2" if r["tokens"] == t2 else r["tokens"]))
        assert r["external_prefix_cache_hits"] == 8 * BS, "the hit is not the min over ranks"
        assert r["tokens"] == t2, "tokens differ from the TP=2 run without kvtier"
        with kvtier.Client(tierd.sock) as c:
            now = {d["tp_rank"]: d for d in c.namespaces()
                   if d["model_id"] == model and d["tp_size"] == 2}
            assert now[1]["put_blocks"] - put1 == n - 8, "rank 1 did not save the rest again"
        run.go()
        r = run.next()
        print("  tp-run2 step 1 (own cache emptied): external hits %d; tokens %s"
              % (r["external_prefix_cache_hits"],
                 "== baseline2" if r["tokens"] == t2 else r["tokens"]))
        assert r["external_prefix_cache_hits"] == n * BS
        assert r["tokens"] == t2
        run.go()
        run.finish()
    finally:
        run.stop()
    print("  PASS: TP=2 ranks keep their own shards; the hit is the shortest over the ranks")


class Steps:
    """A vLLM instance going through prompts one at a time (run_llm.py's
    "steps"), the test acting on tierd between them."""

    def __init__(self, tmp, name, model, req, env):
        self.tmp, self.name, self.i, self._seen = tmp, name, 0, 0
        self.p, self.out, self.logf = start_vllm(tmp, name, model, req, env)

    def next(self):
        """The results of the step now pausing."""
        path = os.path.join(self.tmp, "step%d.json" % self.i)
        deadline = time.monotonic() + RUN_TIMEOUT
        while not os.path.exists(path):
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                vllm_failed(self.name, self.p, self.logf)
            time.sleep(0.1)
        return json.load(open(path))

    def log(self):
        """vLLM's log since the last call."""
        with open(self.logf) as f:
            f.seek(self._seen)
            text = f.read()
        self._seen += len(text.encode())
        return text

    def go(self):
        open(os.path.join(self.tmp, "go%d" % self.i), "w").close()
        self.i += 1

    def finish(self):
        try:
            self.p.wait(timeout=RUN_TIMEOUT)
        finally:
            self.stop()
        if self.p.returncode != 0:
            vllm_failed(self.name, self.p, self.logf)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def flip_cold_byte(tierd, at):
    """Flip one byte of tierd's cold.data (stopped), as tests/tierd_cold.c does."""
    with open(os.path.join(tierd.dir, "data", "cold.data"), "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 0x80]))


def test_tierd_failures(model, baseline, tmp_path):
    """One vLLM instance through tierd's failures (issue 16), run as vLLM
    runs by default, without PYTHONHASHSEED; every step generates the
    baseline's tokens for P + S:
      step 0  P                        -> 16 blocks, keyed under vLLM's default seed
      step 1  P + S; tierd killed between the lookup and the load (a test
              subclass of the connector kills it)
                                       -> the load fails; vLLM recomputes
      step 2  P + S; tierd away        -> queried, no hit
      step 3  P + S; tierd started again on its data folder
                                       -> 512 hits, from disk
      step 4  P + S; a byte flipped in cold.data after a clean stop
                                       -> that block is a checksum miss, counted;
                                          vLLM recomputes it, and it is saved again
    """
    from conftest import Tierd
    prompt, suffix, base_tokens = baseline
    tmp = str(tmp_path)
    n = len(prompt) // BS
    keys = kvtier.hash_prompt(prompt, BS, seed="vllm-none-hash")
    arm = os.path.join(tmp, "kill-before-load")
    d = Tierd("--warm-bytes", "256M")
    req = {"steps": [prompt] + [prompt + suffix] * 4, "pause_dir": tmp,
           "max_tokens": MAX_TOKENS, "connector": True, "block_size": BS,
           "connector_class": "FaultyKvtierConnector", "connector_module": "kvt_fault_connector",
           "extra_config": {"reconnect_ms": 100}}
    run = Steps(tmp, "failures", model, req,
                vllm_env(d, PYTHONHASHSEED=None, KVT_TEST_FAULT_DIR=tmp))

    def step(what, want=base_tokens):
        r = run.next()
        print("  step %d (%s): external hits %d of %d queried, %.1f s; tokens %s"
              % (run.i, what, r["external_prefix_cache_hits"],
                 r["external_prefix_cache_queries"], r["generate_s"],
                 "== baseline" if r["tokens"] == base_tokens else r["tokens"]))
        assert want is None or r["tokens"] == want, \
            "step %d: tokens differ from the run without kvtier" % run.i
        return r, run.log()

    print()
    try:
        r, log = step("P, PYTHONHASHSEED unset", want=None)
        assert "seeded with 'vllm-none-hash' (vLLM's default)" in log
        ns = ns_info(d, model)
        with kvtier.Client(d.sock) as c:
            h = c.ns_open(model, ns["dtype"], ns["layout"], BS, ns["block_bytes"])
            assert h.lookup(keys) == n, "vLLM's keys are kvt_hash_prompt's, seed vllm-none-hash"
            c.flush()                          # on disk, for step 3
        with open(arm, "w") as f:
            f.write(str(d.proc.pid))
        run.go()

        r, log = step("tierd killed before the load")
        killed_log = log
        assert not os.path.exists(arm), "the fault did not fire"
        assert r["external_prefix_cache_hits"] == n * BS     # counted at the lookup
        assert "0 of %d blocks restored" % n in log
        assert "Recovered from KV load failure" in log, "vLLM did not recompute"
        assert d.kill(signal.SIGKILL) == -signal.SIGKILL     # reaps it
        run.go()

        r, log = step("tierd away")
        assert r["external_prefix_cache_queries"] > 0 and r["external_prefix_cache_hits"] == 0
        # the scheduler's lookup found out: here, or already in step 1, where
        # vLLM looks a request whose asynchronous load failed up again
        assert re.search(r"EngineCore.*tierd on %s is away" % re.escape(d.sock),
                         killed_log + log)
        d.start()
        time.sleep(0.3)                        # past reconnect_ms
        run.go()

        r, log = step("tierd started again")
        assert r["external_prefix_cache_hits"] == n * BS
        assert "connected to tierd on %s again" % d.sock in log
        with kvtier.Client(d.sock) as c:
            cold_hits = c.stats()["tier"]["cold"]["hits"]
        assert cold_hits >= n, "%d cold hits: the blocks should come from disk" % cold_hits
        assert d.kill(signal.SIGTERM) == 0
        flip_cold_byte(d, 4321 + (n // 2) * ns["block_bytes"])
        d.start()
        time.sleep(0.3)
        run.go()

        r, log = step("a block corrupted on disk")
        with kvtier.Client(d.sock) as c:
            st = c.stats()
            h = c.ns_open(model, ns["dtype"], ns["layout"], BS, ns["block_bytes"])
            again = h.lookup(keys)
        print("  tierd after step 4: %d checksum error(s); %d of %d blocks held again"
              % (st["checksum_errors"], again, n))
        assert st["checksum_errors"] >= 1
        restored = re.search(r"(\d+) of %d blocks restored" % n, log)
        assert restored and int(restored.group(1)) < n, "the corrupt block was loaded"
        assert "Recovered from KV load failure" in log, "vLLM did not recompute"
        assert again == n, "the recomputed blocks should be saved again"
        run.go()
        run.finish()
    finally:
        run.stop()
        d.stop()
    print("  PASS: tierd killed, away, restarted and corrupted: the tokens never changed")

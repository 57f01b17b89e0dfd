# SPDX-License-Identifier: MIT
"""End to end with real vLLM (its CPU build), a tiny random Llama and a
private tierd. Each run is a new vLLM instance in a process of its own
(tests/vllm/run_llm.py):

  baseline  no connector, prompt P + suffix S      -> tokens T
  run 1     connector, P (512 tokens)              -> P's 16 blocks land in tierd
  run 2     connector, P + S                       -> vLLM counts 512 external
                                                      prefix-cache hits; tokens == T
  run 3     connector, P + S, another cache_salt   -> no hits; tokens == T
"""
import json
import os
import random
import subprocess
import sys

import pytest

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


def run_vllm(tmp, name, model, tierd, tokens, connector, salt=None):
    req = {"prompt": tokens, "max_tokens": MAX_TOKENS, "connector": connector,
           "cache_salt": salt, "block_size": BS}
    rq, out, logf = (os.path.join(tmp, name + ext) for ext in (".req.json", ".out.json", ".log"))
    json.dump(req, open(rq, "w"))
    env = dict(os.environ)
    env.update({
        "PYTHONHASHSEED": "0",
        "KVTIER_SOCKET": tierd.sock,
        "PYTHONPATH": os.path.join(SRC, "client", "python") + os.pathsep +
        env.get("PYTHONPATH", ""),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    })
    with open(logf, "w") as lf:
        p = subprocess.run([sys.executable, os.path.join(HERE, "run_llm.py"), model, rq, out],
                           env=env, stdout=lf, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT)
    if p.returncode != 0:
        tail = open(logf).read()[-6000:]
        pytest.fail("vLLM run %s exited %d; log %s ends:\n%s" % (name, p.returncode, logf, tail))
    res = json.load(open(out))
    print("  %-9s connector=%-5s salt=%-8s prompt=%d tokens: external hits %d of %d queried, "
          "local hits %d, startup %.0f s; generated %s"
          % (name, connector, salt, len(tokens), res["external_prefix_cache_hits"],
             res["external_prefix_cache_queries"], res["prefix_cache_hits"], res["startup_s"],
             res["tokens"]))
    return res


def ns_info(tierd, model):
    with kvtier.Client(tierd.sock) as c:
        mine = [n for n in c.namespaces() if n["model_id"] == model]
    assert len(mine) == 1, "expected one namespace for %s, got %r" % (model, mine)
    return mine[0]


def test_prefix_blocks_shared_across_vllm_instances(tierd, model, tmp_path):
    rng = random.Random(7)
    prompt = [rng.randrange(3, 1024) for _ in range(512)]
    suffix = [rng.randrange(3, 1024) for _ in range(10)]
    tmp = str(tmp_path)
    print()

    base = run_vllm(tmp, "baseline", model, tierd, prompt + suffix, connector=False)
    assert len(base["tokens"]) == MAX_TOKENS

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
    assert r2["tokens"] == base["tokens"], "tokens differ from the run without kvtier"
    ns2 = ns_info(tierd, model)
    assert ns2["get_blocks"] - ns["get_blocks"] == 512 // BS    # restored through kvtier

    r3 = run_vllm(tmp, "run3", model, tierd, prompt + suffix, connector=True, salt="other")
    assert r3["external_prefix_cache_queries"] > 0
    assert r3["external_prefix_cache_hits"] == 0
    assert r3["tokens"] == base["tokens"]
    print("  PASS: run 2 restored %d tokens from kvtier and generated the baseline's tokens; "
          "run 3 (other salt) had no hits" % r2["external_prefix_cache_hits"])

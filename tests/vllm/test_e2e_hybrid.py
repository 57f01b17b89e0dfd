# SPDX-License-Identifier: MIT
"""End to end with hybrid models in real vLLM (its CPU build). First a tiny
Gemma 2 with random weights (tests/vllm/make_model.py gemma2: sliding-window
and full-attention layers, alternating), which vLLM's hybrid allocator
splits into a sliding and a full KV cache group, and a private tierd:

  baseline  no connector, prompt P + suffix S    -> tokens T, log-probs L
  run 1     connector, P (512 tokens)            -> the full group's 16 blocks
                                                    and the sliding group's
                                                    window (2 blocks) in tierd
  run 2     connector, P + S, a new instance     -> 512 external hits; T and L

The random model's greedy tokens barely move, so the log-probability of
every generated token is compared too: it changes with any wrong byte of
the KV it was computed from. Prints the bytes kvtier stores per token of P
against the naive figure (every layer stored as full attention).

Then the same with a recurrent-state model, a tiny Qwen3-Next
(make_model.py qwen3_next: Gated DeltaNet linear attention and full
attention): its state group through kvtier, and a failed load of it.
"""
import json
import math
import os
import random
import subprocess
import sys

import pytest

import kvtier
from test_e2e import BS, HERE, run_vllm

WINDOW = 64


def make_model(tmp_path_factory, kind):
    """make_model.py's model of that kind in a temp folder: its path."""
    d = tmp_path_factory.mktemp("tiny-" + kind)
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), str(d), kind],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    return str(d)


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    return make_model(tmp_path_factory, "gemma2")


def same_logprobs(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-4)
                                    for x, y in zip(a, b))


def test_hybrid_model_shares_prefixes_through_kvtier(tierd, gemma2, tmp_path):
    rng = random.Random(17)
    prompt = [rng.randrange(3, 1024) for _ in range(512)]
    suffix = [rng.randrange(3, 1024) for _ in range(10)]
    tmp = str(tmp_path)
    print()
    base = run_vllm(tmp, "h-base", gemma2, tierd, prompt + suffix, connector=False)
    assert base["logprobs"] and len(base["logprobs"]) == len(base["tokens"])

    r1 = run_vllm(tmp, "h-run1", gemma2, tierd, prompt, connector=True)
    assert r1["external_prefix_cache_hits"] == 0
    assert "groups sliding, full" in r1["log"], "vLLM did not keep its hybrid allocator"
    with kvtier.Client(tierd.sock) as c:
        # a group's listed layout: "vllm:hybrid:2G|<kind>", shortened with a
        # hash of its identity where it does not fit
        mine = {n["layout"].split("|")[1][:3]: n for n in c.namespaces()
                if n["model_id"] == gemma2}
    assert sorted(mine) == ["ful", "sli"], sorted(mine)
    full, slide = mine["ful"], mine["sli"]
    n = len(prompt) // BS
    assert full["put_blocks"] == n
    # the windows of the prompt's last two blocks: the same prompt again is
    # asked one block short (vLLM computes the last token itself)
    assert slide["put_blocks"] == -(-WINDOW // BS) + 1, \
        "the sliding group keeps the windows of the prompt's last two blocks"
    stored = full["put_blocks"] * full["block_bytes"] + slide["put_blocks"] * slide["block_bytes"]
    naive = n * (full["block_bytes"] + slide["block_bytes"])
    print("  stored %.0f bytes per token of the prompt, naive (every layer as full "
          "attention) %.0f: %.2fx less" % (stored / len(prompt), naive / len(prompt),
                                           naive / stored))

    r2 = run_vllm(tmp, "h-run2", gemma2, tierd, prompt + suffix, connector=True)
    assert r2["external_prefix_cache_hits"] == len(prompt), r2["external_prefix_cache_hits"]
    assert r2["tokens"] == base["tokens"], "tokens differ from the run without kvtier"
    assert same_logprobs(r2["logprobs"], base["logprobs"]), \
        "log-probs differ from the run without kvtier: %r vs %r" % (r2["logprobs"],
                                                                   base["logprobs"])
    print("  PASS: a new instance loaded 512 tokens of both groups from kvtier; tokens and "
          "log-probs equal the run without kvtier")


def test_hybrid_failed_load_is_recomputed(gemma2, tmp_path):
    """tierd killed between the lookup and the load (the test subclass of
    the connector kills it): the hybrid load fails whole, vLLM takes the
    request back (failed_recving) and recomputes it once, without asking
    kvtier again in a loop; tokens and log-probs equal the run without
    kvtier."""
    rng = random.Random(18)
    prompt = [rng.randrange(3, 1024) for _ in range(512)]
    suffix = [rng.randrange(3, 1024) for _ in range(10)]
    failed_load_recomputed(str(tmp_path), "h", gemma2, prompt, suffix, block_size=BS)
    print("  PASS: the failed hybrid load was recomputed once; tokens and log-probs "
          "equal the run without kvtier")


def failed_load_recomputed(tmp, tag, model, prompt, suffix, **run):
    """One instance prefills prompt (saved to a private tierd), then is given
    prompt + suffix with tierd killed between the lookup and the load:
    checks the load failed whole and was recomputed once, with the tokens
    and log-probs of a run without kvtier. run: run_llm.py's request fields
    (block_size, dtype)."""
    from conftest import Tierd
    from test_e2e import MAX_TOKENS, Steps, vllm_env
    d = Tierd("--warm-bytes", "256M")
    print()
    try:
        base = run_vllm(tmp, tag + "f-base", model, d, prompt + suffix, connector=False, **run)
        arm = os.path.join(tmp, "kill-before-load")
        req = {"steps": [prompt, prompt + suffix], "pause_dir": tmp, "max_tokens": MAX_TOKENS,
               "connector": True, "connector_class": "FaultyKvtierConnector",
               "connector_module": "kvt_fault_connector", "extra_config": {"reconnect_ms": 100},
               **run}
        steps = Steps(tmp, tag + "fail", model, req, vllm_env(d, KVT_TEST_FAULT_DIR=tmp))
        try:
            steps.next()
            with open(arm, "w") as f:
                f.write(str(d.proc.pid))
            steps.go()
            r = steps.next()
            log = steps.log()
            assert not os.path.exists(arm), "the fault did not fire"
            # vLLM logs nothing of a failed_recving: the tokens show it recomputed
            n = len(prompt) // base["block_size"]
            assert "the load of %d blocks failed" % n in log
            assert r["tokens"] == base["tokens"]
            assert same_logprobs(r["logprobs"], base["logprobs"])
            # looked up once more after the failure, then answered with no hit
            assert r["external_prefix_cache_queries"] <= 2 * len(prompt + suffix)
            d.kill(9)
            steps.go()
            steps.finish()
        finally:
            steps.stop()
    finally:
        d.stop()


# ---- a state model: Qwen3-Next's linear attention beside full attention ----

STATE_PROMPT = 560     # a block vLLM picks (384 tokens in vLLM 0.32; 256 before) and some


@pytest.fixture(scope="module")
def qwen3_next(tmp_path_factory):
    return make_model(tmp_path_factory, "qwen3_next")


def state_prompt(seed):
    rng = random.Random(seed)
    return ([rng.randrange(3, 1024) for _ in range(STATE_PROMPT)],
            [rng.randrange(3, 1024) for _ in range(10)])


# bfloat16 (vLLM's CPU kernels for Gated DeltaNet), in the block size vLLM
# aligns to the state's page
STATE_RUN = {"dtype": "bfloat16", "block_size": None}


def test_state_model_shares_prefixes_through_kvtier(tierd, qwen3_next, tmp_path):
    """  baseline  no connector, P + S          -> tokens T, log-probs L
         run 1     connector, P (560 tokens)    -> the full group's blocks and
                                                   the state after the last
                                                   block boundary vLLM's prefill
                                                   stopped at, in tierd
         run 2     connector, P + S, new        -> P's whole blocks hit; T and L
    vLLM's "align" mode ends a prefill chunk on the prompt's last block
    boundary, so that the state there exists: the one run 2 resumes from."""
    prompt, suffix = state_prompt(19)
    tmp = str(tmp_path)
    print()
    base = run_vllm(tmp, "s-base", qwen3_next, tierd, prompt + suffix, connector=False,
                    **STATE_RUN)
    assert base["logprobs"] and len(base["logprobs"]) == len(base["tokens"])
    bs = base["block_size"]
    n = len(prompt) // bs
    assert n >= 1, "vLLM's block (%d tokens) is longer than the prompt" % bs

    r1 = run_vllm(tmp, "s-run1", qwen3_next, tierd, prompt, connector=True, **STATE_RUN)
    assert r1["external_prefix_cache_hits"] == 0
    assert "groups state, full" in r1["log"] or "groups full, state" in r1["log"], \
        "vLLM did not keep its hybrid allocator"
    with kvtier.Client(tierd.sock) as c:
        mine = {n["layout"].split("|")[1][:3]: n for n in c.namespaces()
                if n["model_id"] == qwen3_next}
    assert sorted(mine) == ["ful", "sta"], sorted(mine)
    full, state = mine["ful"], mine["sta"]
    assert full["put_blocks"] == n, full
    assert state["put_blocks"] == 1, "one state: the one at the prompt's last block boundary"
    stored = full["put_blocks"] * full["block_bytes"] + state["put_blocks"] * state["block_bytes"]
    # naive: the linear-attention layers stored as full attention too
    kinds = json.load(open(os.path.join(qwen3_next, "config.json")))["layer_types"]
    naive = n * full["block_bytes"] * len(kinds) // kinds.count("full_attention")
    print("  stored %.0f bytes per token of the prompt (a %d-byte state and %d blocks of "
          "%d), naive (every layer as full attention) %.0f: %.2fx %s"
          % (stored / len(prompt), state["block_bytes"], n, full["block_bytes"],
             naive / len(prompt), max(naive, stored) / min(naive, stored),
             "less" if stored < naive else "more"))

    r2 = run_vllm(tmp, "s-run2", qwen3_next, tierd, prompt + suffix, connector=True,
                  **STATE_RUN)
    assert r2["external_prefix_cache_hits"] == n * bs, r2["external_prefix_cache_hits"]
    assert r2["tokens"] == base["tokens"], "tokens differ from the run without kvtier"
    assert same_logprobs(r2["logprobs"], base["logprobs"]), \
        "log-probs differ from the run without kvtier: %r vs %r" % (r2["logprobs"],
                                                                   base["logprobs"])
    print("  PASS: a new instance loaded %d tokens (their attention blocks and the state "
          "after them) from kvtier; tokens and log-probs equal the run without kvtier"
          % (n * bs))


def test_state_model_failed_load_is_recomputed(qwen3_next, tmp_path):
    """As test_hybrid_failed_load_is_recomputed, with a state group: vLLM
    recomputes the request, state included, once."""
    prompt, suffix = state_prompt(20)
    failed_load_recomputed(str(tmp_path), "s", qwen3_next, prompt, suffix, **STATE_RUN)
    print("  PASS: the failed load of a state model was recomputed once; tokens and "
          "log-probs equal the run without kvtier")

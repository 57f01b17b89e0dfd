#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""gen_traces.py - request traces with other reuse patterns than the bundled one.

Writes Mooncake-format JSONL, as kvreplay reads (timestamp ms, input_length,
output_length, hash_ids; 512-token blocks unless --block-tokens, prefix
semantics: a block's id names its whole prefix) for the eviction policy's
and NVMe admission's figures, to OUT or, without it (or with -), stdout.
Kinds:
  sysprompt  long system prompts shared by many requests (Zipf popularity)
  oneshot    mostly one-shot prompts, a few documents asked again
  multiturn  interleaved conversations of varied length and think time
  agent      agent loops: a shared tool prefix, then many quick extensions
Debian python3 only; a seed makes each trace the same every time.
Usage: gen_traces.py KIND [OUT.jsonl|-] [--requests N] [--seed S] [--block-tokens T]
"""
import argparse
import json
import random
import sys

BLOCK = 512  # tokens per block; --block-tokens sets it


class Ids:
    """Fresh block ids; a chain's last block is partial (a new id each time)."""

    def __init__(self):
        self.n = 0

    def take(self, k):
        out = list(range(self.n, self.n + k))
        self.n += k
        return out


def zipf_pick(rng, n, s):
    # inverse-CDF over precomputed weights would be faster; n <= 5000 here
    w = [1.0 / (i + 1) ** s for i in range(n)]
    return rng.choices(range(n), weights=w)[0]


def request(ts, full, out_len, ids, rng):
    """A request over the full blocks `full` plus one partial block of its own."""
    part = rng.randint(1, BLOCK - 1)
    return {"timestamp": int(ts), "input_length": len(full) * BLOCK + part,
            "output_length": out_len, "hash_ids": full + ids.take(1)}


def arrivals(rng, n, gap_ms):
    """n Poisson arrival times, gap_ms apart on average."""
    ts = 0.0
    for _ in range(n):
        ts += rng.expovariate(1 / gap_ms)
        yield ts


def sysprompt(rng, n):
    ids = Ids()
    prompts = [ids.take(rng.randint(4, 40)) for _ in range(40)]
    for ts in arrivals(rng, n, 300.0):
        p = prompts[zipf_pick(rng, len(prompts), 1.1)]
        yield request(ts, p + ids.take(rng.randint(0, 8)), rng.randint(50, 800), ids, rng)


def oneshot(rng, n):
    ids = Ids()
    docs = [ids.take(rng.randint(2, 30)) for _ in range(2000)]
    for ts in arrivals(rng, n, 200.0):
        if rng.random() < 0.15:
            full = docs[zipf_pick(rng, len(docs), 0.8)] + ids.take(rng.randint(0, 2))
        else:
            full = ids.take(rng.randint(1, 40))
        yield request(ts, full, rng.randint(10, 600), ids, rng)


def conversations(rng, n, turns_mean, think_ms, grow, first, agent=False):
    """Poisson-arriving sessions; each turn extends the last turn's full blocks."""
    ids = Ids()
    tools = [ids.take(rng.randint(8, 24)) for _ in range(6)] if agent else None
    events = []  # (time, seq, session state)
    ts = 0.0
    made = 0
    seq = 0
    while made < n:
        ts += rng.expovariate(1 / 400.0)
        base = list(tools[zipf_pick(rng, len(tools), 1.0)]) if agent else []
        state = {"ctx": base + ids.take(rng.randint(*first)),
                 "left": max(1, int(rng.expovariate(1 / turns_mean)) + 1)}
        events.append((ts, seq, state))
        seq += 1
        made += state["left"]
    out = []
    while events:
        events.sort(key=lambda e: (e[0], e[1]))
        t, s, st = events.pop(0)
        out.append(request(t, list(st["ctx"]), rng.randint(20, 900), ids, rng))
        st["left"] -= 1
        if st["left"] > 0:
            st["ctx"] += ids.take(rng.randint(*grow))
            events.append((t + rng.expovariate(1 / think_ms), s, st))
        if len(out) >= n:
            break
    out.sort(key=lambda r: r["timestamp"])
    return out


KINDS = {
    "sysprompt": lambda rng, n: sysprompt(rng, n),
    "oneshot": lambda rng, n: oneshot(rng, n),
    "multiturn": lambda rng, n: conversations(rng, n, 5, 90_000, (1, 6), (1, 20)),
    "agent": lambda rng, n: conversations(rng, n, 12, 8_000, (1, 2), (0, 4), agent=True),
}


def main():
    global BLOCK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("out", nargs="?", default="-")
    ap.add_argument("--requests", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block-tokens", type=int, default=BLOCK)
    a = ap.parse_args()
    if a.requests < 1 or a.block_tokens < 2:
        ap.error("--requests must be positive and --block-tokens at least 2 "
                 "(a request's last block is partial)")
    BLOCK = a.block_tokens
    rng = random.Random(a.seed)
    f = sys.stdout if a.out == "-" else open(a.out, "w")
    with f:
        for r in KINDS[a.kind](rng, a.requests):
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

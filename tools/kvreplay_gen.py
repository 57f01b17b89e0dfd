#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvreplay_gen.py - write a synthetic request trace (Mooncake JSONL, as
kvreplay reads) with a reuse pattern of its own, seeded: the same arguments
give the same trace. Patterns:

  agent     agent loops: a few long shared system prompts; each session runs
            1..40 steps, every step re-sending its whole context (the prompt,
            then every earlier step's blocks) plus one to three new blocks;
            sessions overlap in time.
  oneshot   many one-shot prompts: one of a few long shared system prompts,
            then a user part of 1..24 blocks seen once (a few repeat soon).

usage: kvreplay_gen.py PATTERN [--requests N] [--seed S] [--block-tokens T]
"""
import argparse
import json
import random
import sys


def agent(rng, n, emit):
    prompts = [list(range(p * 100, p * 100 + rng.randint(8, 24))) for p in range(4)]
    next_id = [10_000]
    live = []  # [context blocks, steps left]

    def fresh(k):
        ids = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return ids

    while n > 0:
        if not live or (len(live) < 32 and rng.random() < 0.3):
            ctx = list(rng.choice(prompts)) + fresh(rng.randint(1, 4))
            live.append([ctx, rng.choice([1, 1, 2, 5, 10, 20, 40])])
        s = rng.randrange(len(live))
        ctx, left = live[s]
        emit(ctx)
        n -= 1
        ctx.extend(fresh(rng.randint(1, 3)))  # the step's tool output and reply
        live[s][1] = left - 1
        if live[s][1] == 0:
            live.pop(s)


def oneshot(rng, n, emit):
    prompts = [list(range(p * 100, p * 100 + rng.randint(4, 16))) for p in range(6)]
    next_id, recent = 10_000, []
    for _ in range(n):
        if recent and rng.random() < 0.05:
            emit(rng.choice(recent))  # the same prompt again, soon (a retry)
            continue
        k = rng.randint(1, 24)
        ids = list(rng.choice(prompts)) + list(range(next_id, next_id + k))
        next_id += k
        recent = (recent + [ids])[-50:]
        emit(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pattern", choices=["agent", "oneshot"])
    ap.add_argument("--requests", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block-tokens", type=int, default=512)
    a = ap.parse_args()
    if a.requests < 1 or a.block_tokens < 1:
        ap.error("--requests and --block-tokens must be positive")
    rng = random.Random(a.seed)
    t = [0]

    def emit(ids):
        # one request every 300 ms on average: an hour for 12,000 requests;
        # the last block is partial, as a prompt's usually is
        t[0] += rng.randint(0, 600)
        tokens = len(ids) * a.block_tokens - rng.randint(1, a.block_tokens - 1 or 1)
        sys.stdout.write(json.dumps({"timestamp": t[0], "input_length": tokens,
                                     "output_length": rng.randint(16, 512),
                                     "hash_ids": ids}) + "\n")

    {"agent": agent, "oneshot": oneshot}[a.pattern](rng, a.requests, emit)


if __name__ == "__main__":
    main()

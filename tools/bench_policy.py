#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench_policy.py - make bench's eviction policy lines from a kvreplay --json
report of `--policy lru,keep,reuse,min` (block hit rates, prefix semantics).

For each store policy and capacity it prints, grep-able:
  bench: policy_<trace>_<blocks>_<pol>_vs_lru  R x target >= 1.0 (not lru)
  bench: policy_<trace>_<blocks>_<pol>_vs_min  R x target <= 1.0 (the bound)
and, where the issue sets it (the bundled trace, 5,000 to 10,000 blocks;
lru too, the baseline, which closes none of it),
  bench: policy_<trace>_<blocks>_<pol>_gap_closed P % target >= 25
Usage: bench_policy.py NAME REPORT.json [--gap-at N,N]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("report")
    ap.add_argument("--gap-at", default="", help="capacities (blocks) with the gap target")
    a = ap.parse_args()
    gap_at = {int(x) for x in a.gap_at.split(",") if x}
    with open(a.report) as f:
        runs = json.load(f)["runs"]
    rate = {}  # (policy, asked blocks) -> block hit rate
    for r in runs:
        rate[(r["policy"], r["asked_blocks"])] = r["block_hit_rate"]
    caps = sorted({c for _, c in rate})
    pols = [p for p in dict.fromkeys(r["policy"] for r in runs) if p != "min"]
    if "lru" not in pols or not any(p == "min" for p, _ in rate):
        sys.exit("bench_policy.py: the report needs --policy lru,...,min")
    for p in pols:
        for c in caps:
            hit, lru, mn = rate[(p, c)], rate[("lru", c)], rate[("min", c)]
            tag = "bench: policy_%s_%d_%s" % (a.name, c, p)
            print("# %s at %d blocks: %s %.4f%s, min %.4f"
                  % (a.name, c, p, hit, "" if p == "lru" else ", lru %.4f" % lru, mn))
            if p != "lru":  # lru against itself is 1 by definition
                print("%s_vs_lru %.3f x target >= 1.0" % (tag, hit / lru if lru else 1.0))
            print("%s_vs_min %.3f x target <= 1.0" % (tag, hit / mn if mn else 1.0))
            if c in gap_at:  # lru, the baseline, closes none of it: printed all the same
                gap = mn - lru
                closed = 100.0 * (hit - lru) / gap if gap > 0 else 100.0
                print("%s_gap_closed %.1f %% target >= 25" % (tag, closed))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""polsim.py - eviction policies on a trace, fast: leaf-first LRU, keep, MIN.

A model of one warm tier with prefix semantics (a request hits its leading
run of cached blocks, then puts the rest), leaf-first like the store (only a
block with no cached child leaves), and the keep policy of
store/tier_policy.c (a learnt share of new chains kept, the rest leave
first). MIN is Belady's with prefix semantics (the block asked for furthest
in the future leaves, deeper first). The figures of the README's "Eviction
policies" come from it; the store itself is what kvreplay measures.
Debian python3 only. Usage: polsim.py TRACE.jsonl [--caps 1000,5000,...]
"""
import argparse
import collections
import heapq
import json
import math

NB = 48
BASE = 1.25
UP = [BASE ** (b + 1) - 1 for b in range(NB)]  # the largest age of bucket b


def bucket(age):
    return min(NB - 1, int(math.log(age + 1, BASE)))


class Cache:
    """Leaf-first cache: leaves on per-class heaps ordered by stamp."""

    def __init__(self, cap, pol):
        self.cap, self.pol = cap, pol
        self.par, self.kids = {}, collections.Counter()
        self.res = {}  # block -> [class, stamp, hits, listed]
        self.heaps = collections.defaultdict(list)
        self.cnt = collections.Counter()
        self.clock = 0

    def unlist(self, h):
        st = self.res[h]
        if st[3]:
            st[3] = False
            self.cnt[st[0]] -= 1

    def list(self, h):
        st = self.res[h]
        st[3] = True
        self.cnt[st[0]] += 1
        heapq.heappush(self.heaps[st[0]], (st[1], h))

    def tail(self, c):
        hp = self.heaps[c]
        while hp:  # entries are dropped lazily
            stamp, h = hp[0]
            st = self.res.get(h)
            if st and st[3] and st[0] == c and st[1] == stamp:
                return h
            heapq.heappop(hp)
        return None

    def evict(self):
        c = self.pol.pick(self)
        h = self.tail(c)
        heapq.heappop(self.heaps[c])
        st = self.res.pop(h)
        self.cnt[c] -= 1
        self.pol.left(self, h, st)
        p = self.par.get(h)
        if p is not None and p in self.res:
            self.kids[p] -= 1
            if self.kids[p] == 0:
                self.list(p)

    def request(self, c):
        hit = 0
        for h in c:
            if h not in self.res:
                break
            hit += 1
        keep = self.pol.start(self, c, hit)
        for h in c[:hit]:
            self.clock += 1
            st = self.res[h]
            self.pol.touch(self, st)
            listed = st[3]
            if listed:
                self.unlist(h)
            st[0], st[1], st[2] = 1, self.clock, st[2] + 1  # a hit block is kept
            if listed:
                self.list(h)
        for j in range(hit, len(c)):
            h = c[j]
            if h in self.res:
                continue
            self.clock += 1
            p = c[j - 1] if j else None
            self.par[h] = p
            self.res[h] = [1 if keep else 0, self.clock, 0, False]
            if p is not None and p in self.res:
                if self.kids[p] == 0:
                    self.unlist(p)
                self.kids[p] += 1
            self.list(h)
            while len(self.res) > self.cap:
                self.evict()
        return hit


class Lru:
    def start(self, cache, c, hit):
        return True

    def touch(self, cache, st):
        pass

    def pick(self, cache):
        return 1

    def left(self, cache, h, st):
        pass


class Keep(Lru):
    """store/tier_policy.c's keep: share from first-reuse ages (hits, ghosts)."""

    def __init__(self, ghosts_per_block=8, gain=1.1, share_min=0.05):
        self.share, self.hist, self.vage = 1.0, [0.0] * NB, None
        self.ghosts = collections.OrderedDict()
        self.gpb, self.gain, self.share_min = ghosts_per_block, gain, share_min
        self.ticks = 0

    def start(self, cache, c, hit):
        for h in c[hit:]:
            g = self.ghosts.pop(h, None)
            if g is not None:
                self.hist[bucket(cache.clock - g)] += 1
        if hit >= len(c):
            return True
        u = ((c[hit] * 2654435761) & 0xFFFFFFFF) / 2 ** 32  # the key's hash
        return u < self.share

    def touch(self, cache, st):
        if st[2] == 0:
            self.hist[bucket(cache.clock - st[1])] += 1

    def left(self, cache, h, st):
        if st[2] == 0:
            self.ghosts[h] = st[1]
            if len(self.ghosts) > self.gpb * cache.cap:
                self.ghosts.popitem(last=False)
        if st[0] == 1:
            a = cache.clock - st[1]
            self.vage = a if self.vage is None else 0.999 * self.vage + 0.001 * a

    def adapt(self):
        if self.vage is None:
            return
        tl = self.share * self.vage  # how long warm would hold every chain
        cum, best, base = 0.0, None, None
        for b in range(NB):
            cum += self.hist[b]
            if UP[b] < tl:
                base = cum / max(UP[b], 1)
                continue
            e = cum / UP[b]
            base = e if base is None else base
            if best is None or e > best[0]:
                best = (e, UP[b])
        if best and best[0] > base * self.gain:
            self.share = max(self.share_min, min(1.0, tl / best[1]))
        else:
            self.share = min(1.0, self.share * 1.1)
        self.hist = [x * 0.7 for x in self.hist]

    def pick(self, cache):
        self.ticks += 1
        if self.ticks % max(1000, cache.cap // 2) == 0:
            self.adapt()
        return 0 if cache.cnt[0] > 0 else 1


def hit_rate(chains, cap, pol):
    cache, hits, tot = Cache(cap, pol), 0, 0
    for c in chains:
        tot += len(c)
        hits += cache.request(c)
    return hits / tot


def min_rate(chains, cap):
    nxt, uses = {}, []
    for c in reversed(chains):
        uses.append([nxt.get(h, 1 << 40) for h in c])
        for h in c:
            nxt[h] = len(chains) - len(uses)
    uses.reverse()
    res, heap, hits, tot = {}, [], 0, 0
    for i, c in enumerate(chains):
        tot += len(c)
        for h in c:
            if h not in res:
                break
            hits += 1
        for j, h in enumerate(c):
            res[h] = uses[i][j]
            heapq.heappush(heap, (-uses[i][j], -j, h))
        while len(res) > cap:
            nu, _, h = heapq.heappop(heap)
            if res.get(h) == -nu:
                del res[h]
    return hits / tot


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--caps", default="1000,5000,10000,30000,100000")
    a = ap.parse_args()
    with open(a.trace) as f:
        chains = [json.loads(line)["hash_ids"] for line in f if line.strip()]
    print("blocks      lru     keep      MIN")
    for cap in (int(x) for x in a.caps.split(",")):
        print(f"{cap:7} {hit_rate(chains, cap, Lru()):8.4f} {hit_rate(chains, cap, Keep()):8.4f}"
              f" {min_rate(chains, cap):8.4f}", flush=True)


if __name__ == "__main__":
    main()

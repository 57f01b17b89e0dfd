#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""polsim.py - eviction policies on a trace, fast: leaf-first LRU, keep, reuse, MIN.

A model of one warm tier with prefix semantics (a request hits its leading
run of cached blocks, then puts the rest), leaf-first like the store (only a
block with no cached child leaves), and the keep policy of
store/tier_policy.c (a learnt share of new chains kept, the rest leave
first), and `reuse`, store/tier_reuse.c's model (a learnt
reuse index per block class; see Reuse). MIN is Belady's with prefix semantics (the block asked for furthest
in the future leaves, deeper first). The figures of the README's "Eviction
policies" come from it; the store itself is what kvreplay measures.
Debian python3 only. Usage: polsim.py TRACE.jsonl [--caps 1000,5000,...] [--policies lru,keep,reuse,min] [--limit N]

`label` is reuse told, for each request, whether the chain will be continued
(its last full block asked for by a later request: what MIN knows and the
store does not), each answer flipped with probability --label-flip, or
(--label-flip -1) the answer of the best classifier of what the store could
see, fitted on the whole trace: a bound on what a predictor of continuation
must know to close a given share of the LRU-to-MIN gap.
"""
import argparse
import collections
import heapq
import json
import math
import random

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

    def victim(self):
        c = self.pol.pick(self)
        h = self.tail(c)
        heapq.heappop(self.heaps[c])
        return c, h

    def evict(self):
        c, h = self.victim()
        st = self.res.pop(h)  # other heap entries of it go lazily
        self.cnt[c] -= 1
        self.pol.left(self, h, st)
        p = self.par.get(h)
        if p is not None and p in self.res:
            self.kids[p] -= 1
            if self.kids[p] == 0:
                self.list(p)

    def hit_stamp(self, st):
        st[0], st[1], st[2] = 1, self.clock, st[2] + 1  # a hit block is kept

    def hit_prefix(self, c):
        """Count c's leading cached blocks, tell the policy, touch them."""
        hit = 0
        for h in c:
            if h not in self.res:
                break
            hit += 1
        ret = self.pol.start(self, c, hit)
        for h in c[:hit]:
            self.clock += 1
            st = self.res[h]
            listed = st[3]
            if listed:
                self.unlist(h)
            self.pol.touch(self, st)
            self.hit_stamp(st)
            if listed:
                self.list(h)
        return hit, ret

    def new_state(self, keep, p, first):
        return [1 if keep else 0, self.clock, 0, False]

    def shrink(self):
        while len(self.res) > self.cap:
            self.evict()

    put_one = shrink  # after each block put

    def put_done(self, c, hit):
        pass

    def request(self, c):
        hit, keep = self.hit_prefix(c)
        for j in range(hit, len(c)):
            h = c[j]
            if h in self.res:
                continue
            self.clock += 1
            p = c[j - 1] if j else None
            self.par[h] = p
            self.res[h] = self.new_state(keep, p, j == hit)
            if p is not None and p in self.res:
                if self.kids[p] == 0:
                    self.unlist(p)
                self.kids[p] += 1
            self.list(h)
            self.put_one()
        self.put_done(c, hit)
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


# ---- reuse: a learnt reuse index per block class (store/tier_reuse.c's model) ----
#
# Why: on KV traces a block's chance of being asked for again depends on what
# kind of block it is far more than on its age alone. A chain's last block
# (the partial one) is almost never reused; a chain that came back once comes
# back again more often (bundled trace: 31 % of conversations have a second
# turn, 42 % of those a third, 51 % a fourth); and reuse comes late (50 to
# 2,000 requests), so the youngest block of a class may be worth less than
# its oldest. So: each leaf is in a class, each class learns the ages at
# which its blocks are reused (hits, and misses on dropped blocks it
# remembers as ghosts), turns that into an index (the most reuses per slot
# and tick a block of that age can still earn, Gittins-like), and the leaf
# with the lowest index leaves. Each class's leaves are ordered by stamp; only
# the oldest and the youngest of each class are candidates, so a victim costs
# O(classes), as the store's lists allow.

RB = 64  # age buckets: four per power of two, as store/tier_policy.c's


def rbucket(age):
    x = age + 1
    m = x.bit_length() - 1
    if m < 2:
        return x - 1
    return min(RB - 1, 4 * m + ((x >> (m - 2)) & 3) - 5)


def rtop(b):
    """The largest age of bucket b."""
    if b < 3:
        return b
    m, q = (b + 5) // 4, (b + 5) % 4
    return ((5 + q) << (m - 2)) - 2


class ClassCache(Cache):
    """Leaf-first like Cache, with the policy's classes, evicting after a
    request's put (the store reserves a put's slots before its commit, so it
    never drops the put's own blocks while it goes in), and a leaf from
    either end of a class's stamp order."""

    def __init__(self, cap, pol):
        super().__init__(cap, pol)
        self.youngest = collections.defaultdict(list)  # max-heaps of stamps

    def list(self, h):
        super().list(h)
        st = self.res[h]
        heapq.heappush(self.youngest[st[0]], (-st[1], h))

    def head(self, c):
        hp = self.youngest[c]
        while hp:
            stamp, h = hp[0]
            st = self.res.get(h)
            if st and st[3] and st[0] == c and st[1] == -stamp:
                return h
            heapq.heappop(hp)
        return None

    def victim(self):
        return self.pol.pick(self)  # (class, block): either end of a class

    def hit_stamp(self, st):
        st[1] = self.clock  # the policy's touch set its class and hits

    def new_state(self, keep, p, first):
        st = [0, self.clock, 0, False, 1, True]  # class, stamp, hits, listed, turn, had a child
        self.pol.new(self, st, p, self.res.get(p) if p is not None else None, first)
        return st

    def put_one(self):
        pass  # room is made after the whole put

    def put_done(self, c, hit):
        if hit < len(c) and c[-1] in self.res and self.kids[c[-1]] == 0:
            self.pol.tip(self, c[-1])  # the put's last block, no child: a tip
        self.shrink()


class Reuse(Lru):
    """Classes: 0 a tip (never had a child, never hit); then by turn t (1: a
    new chain, under no prefix or a shared one; a chain extended under its
    own hit prefix, or a dropped chain asked for again, t + 1; up to K) and
    whether the block was hit: 1 + hit * K + t - 1."""

    def __init__(self, K=3, private=3, ghosts_per_block=8, decay=0.9, every=2, margin=0.9):
        self.K, self.private, self.gpb = K, private, ghosts_per_block
        self.decay, self.every, self.margin = decay, every, margin
        self.ncls = 2 * K + 1
        self.R = [[0.0] * RB for _ in range(self.ncls)]  # reuses by age, decayed
        self.N = [0.0] * self.ncls  # blocks that entered each class, decayed
        self.G = None
        self.ghosts = collections.OrderedDict()  # dropped block -> (class, stamp, turn)
        self.ticks, self.gturn = 0, None

    def cls(self, st):
        if not st[5] and st[2] == 0:
            return 0
        return 1 + (1 if st[2] else 0) * self.K + min(st[4], self.K) - 1

    def enter(self, st):
        st[0] = self.cls(st)
        self.N[st[0]] += 1

    def start(self, cache, c, hit):
        self.gturn = None
        for j, h in enumerate(c[hit:]):
            g = self.ghosts.pop(h, None)
            if g is not None:
                self.R[g[0]][rbucket(cache.clock - g[1])] += 1
                if j == 0:
                    self.gturn = g[2]  # a dropped chain came back

    def touch(self, cache, st):
        self.R[st[0]][rbucket(cache.clock - st[1])] += 1
        st[4] = min(st[4] + 1, self.K)
        st[2] += 1
        self.enter(st)

    def new(self, cache, st, p, pst, first):
        if pst is None:
            st[4] = 1
        elif first:  # below a hit prefix: the same conversation if it is private
            st[4] = pst[4] if cache.kids[p] < self.private else 1
            if self.gturn is not None:
                st[4] = max(st[4], min(self.gturn + 1, self.K))
        else:
            st[4] = pst[4]
        self.enter(st)

    def tip(self, cache, h):
        st = cache.res[h]
        if st[2] == 0:
            cache.unlist(h)
            self.N[st[0]] -= 1
            st[5] = False
            self.enter(st)
            cache.list(h)

    def left(self, cache, h, st):
        self.ghosts[h] = (st[0], st[1], st[4])
        if len(self.ghosts) > self.gpb * cache.cap:
            self.ghosts.popitem(last=False)

    def adapt(self):
        """G[c][b]: max over horizons of reuses per slot-tick from age b on."""
        self.G = []
        for c in range(self.ncls):
            n = self.N[c]
            if n < 8:
                self.G.append([math.inf] * RB)  # nothing known yet: kept
                continue
            F, cum = [], 0.0
            for b in range(RB):
                cum += self.R[c][b]
                F.append(min(cum / n, 1.0))
            g = [0.0] * RB
            for b in range(RB):
                f0 = F[b - 1] if b else 0.0
                best, space = 0.0, 0.0
                for b2 in range(b, RB):
                    width = rtop(b2) - (rtop(b2 - 1) if b2 else -1)
                    space += width * (1 - (F[b2 - 1] if b2 else 0.0))
                    if space > 0:
                        best = max(best, (F[b2] - f0) / space)
                g[b] = best
            self.G.append(g)
        for c in range(self.ncls):
            self.R[c] = [x * self.decay for x in self.R[c]]
            self.N[c] *= self.decay

    def pick(self, cache):
        self.ticks += 1
        if self.G is None or self.ticks % max(1000, cache.cap // self.every) == 0:
            self.adapt()
        best = None
        for c in range(self.ncls):
            if cache.cnt[c] <= 0:
                continue
            for i, h in enumerate((cache.tail(c), cache.head(c))):
                v = self.G[c][rbucket(cache.clock - cache.res[h][1])]
                if i:
                    v /= self.margin  # the youngest leaves only when clearly worth less
                if best is None or v < best[0]:
                    best = (v, c, h)
        return best[1], best[2]


class LabelCache(ClassCache):
    """ClassCache whose requests come with the policy's label, one each."""

    def request(self, c):
        self.lab = self.pol.labels[self.at]
        self.at += 1
        return super().request(c)


class Label(Reuse):
    """Reuse with one more bit per class: the request's label."""

    def __init__(self, labels, **kw):
        super().__init__(**kw)
        self.labels = labels
        self.ncls = 1 + 2 * self.K * 2
        self.R = [[0.0] * RB for _ in range(self.ncls)]
        self.N = [0.0] * self.ncls

    def cls(self, st):
        if not st[5] and st[2] == 0:
            return 0
        return super().cls(st) + (2 * self.K if st[6] else 0)

    def new(self, cache, st, p, pst, first):
        st.append(cache.lab)
        super().new(cache, st, p, pst, first)


def continued(chains):
    """Per request: is its last full block asked for by a later one."""
    later, out = set(), [False] * len(chains)
    for i in range(len(chains) - 1, -1, -1):
        c = chains[i]
        out[i] = len(c) >= 2 and c[-2] in later
        later.update(c)
    return out


def bin_of(x, edges):
    return next((k for k, v in enumerate(edges) if x < v), len(edges))


def labels_of(chains, flip, seed=1):
    """The true labels, each flipped with probability flip; or (flip < 0)
    the majority answer of each class of what the store sees when the
    request comes: the conversation's turn (1 to 4 or more), the blocks it
    puts past its hit prefix and its length (six bins each), fitted on the
    whole trace (an optimistic classifier: it has seen the answers)."""
    truth = continued(chains)
    if flip >= 0:
        rnd = random.Random(seed)
        return [t != (rnd.random() < flip) for t in truth]
    seen, turns, feats = set(), collections.Counter(), []
    for c in chains:
        hit = 0
        while hit < len(c) and c[hit] in seen:
            hit += 1
        turns[c[1] if len(c) > 1 else None] += 1
        feats.append((min(turns[c[1] if len(c) > 1 else None], 4),
                      bin_of(len(c) - hit, [2, 5, 10, 20, 40]), bin_of(len(c), [4, 8, 16, 32, 64])))
        seen.update(c)
    tab = collections.defaultdict(lambda: [0, 0])
    for f, t in zip(feats, truth):
        tab[f][0] += 1
        tab[f][1] += t
    acc = sum(max(n - k, k) for n, k in tab.values()) / len(chains)
    print(f"# classifier: {len(tab)} classes, {acc:.3f} of requests told right "
          f"(always 'no': {1 - sum(truth) / len(truth):.3f})", flush=True)
    return [tab[f][1] * 2 > tab[f][0] for f in feats]


def hit_rate(chains, cap, pol):
    kind = LabelCache if isinstance(pol, Label) else ClassCache if isinstance(pol, Reuse) else Cache
    cache, hits, tot = kind(cap, pol), 0, 0
    cache.at = 0
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
    ap.add_argument("--policies", default="lru,keep,reuse,min")
    ap.add_argument("--limit", type=int, default=0, help="the first N requests only")
    ap.add_argument("--label-flip", type=float, default=0.0,
                    help="label: the share of labels flipped; -1: a classifier's labels")
    a = ap.parse_args()
    with open(a.trace) as f:
        chains = [json.loads(line)["hash_ids"] for line in f if line.strip()]
    if a.limit > 0:
        chains = chains[:a.limit]
    pols = a.policies.split(",")
    labels = labels_of(chains, a.label_flip) if "label" in pols else None
    make = {"lru": Lru, "keep": Keep, "reuse": Reuse, "label": lambda: Label(labels)}
    print("blocks " + "".join(f"{p:>9}" for p in pols))
    for cap in (int(x) for x in a.caps.split(",")):
        row = [min_rate(chains, cap) if p == "min" else hit_rate(chains, cap, make[p]()) for p in pols]
        print(f"{cap:7}" + "".join(f" {r:8.4f}" for r in row), flush=True)


if __name__ == "__main__":
    main()

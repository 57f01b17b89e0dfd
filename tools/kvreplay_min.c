/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_min.c - the replay policies --policy names (kvr_policies), and
 * the offline bound among them: Belady's MIN with prefix semantics, which
 * knows every request to come. It runs on the trace alone (no store, no
 * payload): a cache of block ids and a max-heap of when each is used next.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"
#include "kvt_common.h"

const struct kvr_policy kvr_policies[] = {
    { "lru", "the store's leaf-first LRU (tierd's default)", kvr_run_store, true, TIER_EVICT_LRU },
    { "keep", "the store's adaptive selective retention (tierd --evict-policy keep)",
      kvr_run_store, true, TIER_EVICT_KEEP },
    { "reuse", "the store's learnt reuse index per class of block (tierd --evict-policy reuse)",
      kvr_run_store, true, TIER_EVICT_REUSE },
    { "min", "Belady's MIN with prefix semantics: the offline bound", kvr_run_min, false,
      TIER_EVICT_LRU },
    { NULL, NULL, NULL, false, TIER_EVICT_LRU },
};

const struct kvr_policy *kvr_policy_find(const char *name)
{
    for (const struct kvr_policy *p = kvr_policies; p->name; p++)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

#define NEVER UINT32_MAX /* used by no later request */

/* The simulator's state: per distinct block, its depth in its chain, when
 * it is used next, and its place in the heap (-1: not cached). */
struct mins {
    uint32_t *kid;    /* per key of the trace: its distinct block */
    uint32_t *next;   /* per key of the trace: the next request using it (NEVER) */
    uint32_t *depth;  /* per block */
    uint32_t *due;    /* per block: the next request using it, as of now */
    int64_t *pos;     /* per block: index in heap, -1 when not cached */
    uint32_t *heap;   /* cached blocks, the one used furthest ahead on top */
    size_t n;         /* blocks cached */
};

/* Whether block a goes before block b: used later, or as late and deeper. */
static bool after(const struct mins *m, uint32_t a, uint32_t b)
{
    return m->due[a] != m->due[b] ? m->due[a] > m->due[b] : m->depth[a] > m->depth[b];
}

static void put_at(struct mins *m, size_t i, uint32_t b)
{
    m->heap[i] = b;
    m->pos[b] = (int64_t)i;
}

static void sift_up(struct mins *m, size_t i)
{
    uint32_t b = m->heap[i];

    for (; i > 0 && after(m, b, m->heap[(i - 1) / 2]); i = (i - 1) / 2)
        put_at(m, i, m->heap[(i - 1) / 2]);
    put_at(m, i, b);
}

static void sift_down(struct mins *m, size_t i)
{
    uint32_t b = m->heap[i];

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= m->n)
            break;
        if (c + 1 < m->n && after(m, m->heap[c + 1], m->heap[c]))
            c++;
        if (!after(m, m->heap[c], b))
            break;
        put_at(m, i, m->heap[c]);
        i = c;
    }
    put_at(m, i, b);
}

/* Distinct block ids of every key (an open-addressing table of key
 * indices: SHA-256 keys are their own hash) and the depth of each. Returns
 * the count, or -ENOMEM. */
static int64_t number_blocks(const struct kvr_trace *tr, struct mins *m)
{
    size_t cap = 16, n = 0;
    size_t *slot;

    while (cap < 2 * tr->nkeys)
        cap *= 2;
    slot = malloc(cap * sizeof(*slot));
    if (!slot)
        return -ENOMEM;
    memset(slot, 0xff, cap * sizeof(*slot));
    for (size_t q = 0; q < tr->nreq; q++) {
        const struct kvr_req *r = &tr->req[q];

        for (uint32_t d = 0; d < r->nblk; d++) {
            size_t j = r->first + d, i;
            uint64_t h;

            memcpy(&h, tr->keys[j].b, sizeof(h));
            for (i = (size_t)h & (cap - 1); slot[i] != SIZE_MAX; i = (i + 1) & (cap - 1))
                if (memcmp(tr->keys[slot[i]].b, tr->keys[j].b, TIER_KEY_BYTES) == 0)
                    break;
            if (slot[i] == SIZE_MAX) {
                slot[i] = j;
                m->depth[n] = d;
                m->kid[j] = (uint32_t)n++;
            } else {
                m->kid[j] = m->kid[slot[i]];
            }
        }
    }
    free(slot);
    return (int64_t)n;
}

/* next[j]: the first request after key j's own that uses its block. */
static void number_uses(const struct kvr_trace *tr, struct mins *m, size_t nb)
{
    uint32_t *last = m->due; /* scratch: per block, the latest request seen (backwards) */

    for (size_t b = 0; b < nb; b++)
        last[b] = NEVER;
    for (size_t q = tr->nreq; q-- > 0;) {
        const struct kvr_req *r = &tr->req[q];

        for (uint32_t d = 0; d < r->nblk; d++) {
            size_t j = r->first + d;

            m->next[j] = last[m->kid[j]];
            last[m->kid[j]] = (uint32_t)q;
        }
    }
}

/* One request: the leading cached run is the hit; every block of the
 * request is due at its next use now; the missing ones are put; then the
 * blocks due furthest ahead leave until the cache fits. */
static void min_request(const struct kvr_req *r, struct mins *m,
                        uint64_t cap, uint32_t block_tokens, struct kvr_result *res)
{
    uint64_t hit = 0;

    while (hit < r->nblk && m->pos[m->kid[r->first + hit]] >= 0)
        hit++;
    kvr_count_hits(res, r, hit, NULL, block_tokens);
    for (uint32_t d = 0; d < r->nblk; d++) {
        size_t j = r->first + d;
        uint32_t b = m->kid[j];

        m->due[b] = m->next[j];
        if (m->pos[b] >= 0) {
            sift_up(m, (size_t)m->pos[b]);
            sift_down(m, (size_t)m->pos[b]);
        } else {
            put_at(m, m->n++, b);
            sift_up(m, m->n - 1);
            res->stored++;
        }
    }
    while (m->n > cap) {
        uint32_t top = m->heap[0];

        m->pos[top] = -1;
        if (--m->n > 0) {
            put_at(m, 0, m->heap[m->n]);
            sift_down(m, 0);
        }
        res->evicted++;
    }
}

int kvr_run_min(const struct kvr_trace *tr, const struct kvr_run_opts *o, uint64_t capacity,
                struct kvr_result *res, char *err, size_t errcap)
{
    uint64_t slot = tier_slot_bytes(o->block_bytes), cold = kvr_cold_bytes(o, capacity), cap;
    size_t nk = tr->nkeys ? tr->nkeys : 1;
    struct mins m = {
        .kid = malloc(nk * sizeof(uint32_t)), .next = malloc(nk * sizeof(uint32_t)),
        .depth = malloc(nk * sizeof(uint32_t)), .due = malloc(nk * sizeof(uint32_t)),
        .pos = malloc(nk * sizeof(int64_t)), .heap = malloc((nk + 1) * sizeof(uint32_t)),
    };
    double t0 = cmn_now_s();
    int64_t nb;
    int rc = -ENOMEM;

    memset(res, 0, sizeof(*res));
    res->capacity = capacity;
    res->cold_capacity = cold;
    cap = capacity / slot + cold / slot;
    res->asked_blocks = cap;
    res->slots = cap;
    res->ram_bytes = capacity;
    if (!m.kid || !m.next || !m.depth || !m.due || !m.pos || !m.heap)
        goto out;
    nb = number_blocks(tr, &m);
    if (nb < 0)
        goto out;
    number_uses(tr, &m, (size_t)nb);
    for (int64_t b = 0; b < nb; b++)
        m.pos[b] = -1;
    for (size_t q = 0; q < tr->nreq; q++) {
        min_request(&tr->req[q], &m, cap, o->block_tokens, res);
        if (m.n > res->held_max)
            res->held_max = m.n;
    }
    res->seconds = cmn_now_s() - t0;
    rc = 0;
out:
    if (rc < 0)
        snprintf(err, errcap, "out of memory");
    free(m.kid);
    free(m.next);
    free(m.depth);
    free(m.due);
    free(m.pos);
    free(m.heap);
    return rc;
}

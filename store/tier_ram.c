/* SPDX-License-Identifier: MIT */
/*
 * tier_ram.c - warm pool segments, size classes and slots.
 *
 * Design note. The pool is a memfd of nseg segments of seg_bytes each. A
 * segment is free, or belongs to one class and is cut into seg_bytes /
 * slot_bytes slots. Each owned segment keeps a stack of its free slot
 * numbers, so alloc and free are O(1); a class keeps a doubly linked list of
 * its segments that have a free slot. When a segment's last slot is freed it
 * returns to the pool's free list, so a class that shrinks gives memory back
 * to the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvt_common.h"
#include "tier_ram.h"

#define NONE UINT32_MAX

struct seg {
    int cls;              /* owning class, -1 when free */
    uint32_t nslots;      /* slots in this segment */
    uint32_t nfree;       /* entries on the free stack */
    uint32_t *stack;      /* free slot numbers (nslots capacity) */
    uint32_t *tag;        /* per slot: the allocator's tag, TIER_RAM_NOTAG when free */
    uint32_t prev, next;  /* class list of segments with a free slot / pool free list */
};

struct cls {
    uint64_t slot_bytes;  /* 0: class unused */
    uint32_t avail;       /* head of this class's segments with free slots */
    uint32_t nseg;        /* segments owned; 0: the class may be recycled */
};

struct tier_ram {
    int fd;               /* the memfd clients map */
    uint8_t *base;        /* our mapping of it */
    uint64_t bytes;       /* nseg * seg_bytes */
    uint64_t seg_bytes;
    uint32_t nseg;
    uint32_t free_seg;    /* pool's free segments (linked through next) */
    uint64_t used;        /* bytes of slots handed out */
    bool locked, huge;
    struct seg *seg;
    struct cls cls[TIER_RAM_CLASSES];
};

/* A line to the caller's log (NULL: none), as every store module reports. */
#define say(cfg, ...) cmn_logf((cfg)->log, (cfg)->log_ctx, __VA_ARGS__)

/* Segments: 1/16 of the pool, between 2 MiB (a huge page) and 64 MiB, so
 * small test pools still have several segments for several classes. */
static uint64_t pick_seg(uint64_t bytes)
{
    uint64_t s = bytes / 16;

    s = (s + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    if (s < (2u << 20))
        s = 2u << 20;
    if (s > TIER_RAM_SEG_MAX)
        s = TIER_RAM_SEG_MAX;
    return s;
}

int tier_ram_memfd(const char *name, bool huge, uint64_t bytes)
{
    /* clients map the pool read-write by SCM_RIGHTS: sealed against resizing,
     * a client's ftruncate cannot make our own accesses fault (SIGBUS), and
     * F_SEAL_SEAL keeps it from adding seals (FUTURE_WRITE) that would lock
     * out its tenant's next clients */
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0);
    int fd = memfd_create(name, flags), rc;

    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)bytes) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

static int map_pool(struct tier_ram *r, const struct tier_ram_cfg *cfg)
{
    /* hugetlb pages first: they must be reserved by the admin
     * (vm.nr_hugepages), so failure is normal and quiet */
    if (cfg->huge) {
        r->fd = tier_ram_memfd("kvtier-warm", true, r->bytes);
        if (r->fd >= 0) {
            r->base = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
            if (r->base != MAP_FAILED) {
                r->huge = true;
                return 0;
            }
            close(r->fd);
        }
    }
    r->fd = tier_ram_memfd("kvtier-warm", false, r->bytes);
    if (r->fd < 0)
        return r->fd;
    r->base = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->base == MAP_FAILED) {
        int rc = -errno;

        close(r->fd);
        r->fd = -1;
        return rc;
    }
    /* transparent huge pages on shmem work only when the admin enabled
     * them (/sys/kernel/mm/transparent_hugepage/shmem_enabled) */
    if (cfg->huge && madvise(r->base, r->bytes, MADV_HUGEPAGE) == 0)
        r->huge = false; /* advised, not guaranteed: report only real hugetlb */
    return 0;
}

int tier_ram_open(const struct tier_ram_cfg *cfg, struct tier_ram **out)
{
    struct tier_ram *r;
    int rc;

    if (cfg->bytes == 0)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->seg_bytes = pick_seg(cfg->bytes);
    r->nseg = (uint32_t)((cfg->bytes + r->seg_bytes - 1) / r->seg_bytes);
    r->bytes = (uint64_t)r->nseg * r->seg_bytes;
    r->seg = calloc(r->nseg, sizeof(*r->seg));
    if (!r->seg) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (uint32_t i = 0; i < r->nseg; i++) {
        r->seg[i].cls = -1;
        r->seg[i].next = i + 1 < r->nseg ? i + 1 : NONE;
    }
    r->free_seg = 0;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        r->cls[c].avail = NONE;
    r->fd = -1;
    rc = cfg->no_memory ? 0 : map_pool(r, cfg);
    if (rc < 0)
        goto out_free;
    if (cfg->lock && !cfg->no_memory) {
        /* pinned memory is what makes GPU DMA to and from warm possible;
         * unpinned still works, only slower and swappable */
        if (mlock(r->base, r->bytes) == 0)
            r->locked = true;
        else
            say(cfg, "warm pool not pinned (mlock: %s); raise RLIMIT_MEMLOCK "
                     "(ulimit -l) or run with CAP_IPC_LOCK; going on unpinned",
                strerror(errno));
    }
    *out = r;
    return 0;
out_free:
    free(r->seg);
    free(r);
    return rc;
}

void tier_ram_close(struct tier_ram *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->nseg; i++) {
        free(r->seg[i].stack);
        free(r->seg[i].tag);
    }
    free(r->seg);
    if (r->base) {
        munmap(r->base, r->bytes);
        close(r->fd);
    }
    free(r);
}

int tier_ram_fd(const struct tier_ram *r) { return r->fd; }
void *tier_ram_base(const struct tier_ram *r) { return r->base; }
uint64_t tier_ram_bytes(const struct tier_ram *r) { return r->bytes; }
uint64_t tier_ram_seg_bytes(const struct tier_ram *r) { return r->seg_bytes; }
uint64_t tier_ram_used(const struct tier_ram *r) { return r->used; }
bool tier_ram_locked(const struct tier_ram *r) { return r->locked; }
bool tier_ram_huge(const struct tier_ram *r) { return r->huge; }

int tier_ram_class(struct tier_ram *r, uint64_t slot_bytes)
{
    int spare = -1;

    if (slot_bytes == 0 || slot_bytes % TIER_RAM_PAGE || slot_bytes > r->seg_bytes)
        return -EINVAL;
    /* linear over <= 32 classes: fine, and called once per request */
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        if (r->cls[c].slot_bytes == slot_bytes)
            return c;
    /* a never-used class first, else a size nobody stores any more */
    for (int c = 0; c < TIER_RAM_CLASSES && spare < 0; c++)
        if (r->cls[c].slot_bytes == 0)
            spare = c;
    for (int c = 0; c < TIER_RAM_CLASSES && spare < 0; c++)
        if (r->cls[c].nseg == 0)
            spare = c;
    if (spare < 0)
        return -ENOSPC;
    r->cls[spare].slot_bytes = slot_bytes;
    r->cls[spare].avail = NONE;
    return spare;
}

uint64_t tier_ram_class_slot(const struct tier_ram *r, int cls)
{
    return r->cls[cls].slot_bytes;
}

static void avail_unlink(struct tier_ram *r, uint32_t s)
{
    struct seg *g = &r->seg[s];

    if (g->prev != NONE)
        r->seg[g->prev].next = g->next;
    else
        r->cls[g->cls].avail = g->next;
    if (g->next != NONE)
        r->seg[g->next].prev = g->prev;
}

static void avail_push(struct tier_ram *r, uint32_t s)
{
    struct seg *g = &r->seg[s];
    struct cls *c = &r->cls[g->cls];

    g->prev = NONE;
    g->next = c->avail;
    if (c->avail != NONE)
        r->seg[c->avail].prev = s;
    c->avail = s;
}

/* Give a free segment to class cls and fill its free stack. */
static int seg_take(struct tier_ram *r, int cls)
{
    uint32_t s = r->free_seg;
    struct seg *g;

    if (s == NONE)
        return -ENOSPC;
    g = &r->seg[s];
    g->nslots = (uint32_t)(r->seg_bytes / r->cls[cls].slot_bytes);
    free(g->stack);
    free(g->tag);
    g->stack = malloc((size_t)g->nslots * sizeof(uint32_t));
    g->tag = malloc((size_t)g->nslots * sizeof(uint32_t));
    if (!g->stack || !g->tag)
        return -ENOMEM;
    memset(g->tag, 0xff, (size_t)g->nslots * sizeof(uint32_t)); /* TIER_RAM_NOTAG */
    r->free_seg = g->next;
    r->cls[cls].nseg++;
    /* push in reverse so slots are handed out in address order */
    for (uint32_t i = 0; i < g->nslots; i++)
        g->stack[i] = g->nslots - 1 - i;
    g->nfree = g->nslots;
    g->cls = cls;
    avail_push(r, s);
    return 0;
}

int tier_ram_alloc(struct tier_ram *r, int cls, uint32_t tag, uint64_t *off)
{
    struct cls *c = &r->cls[cls];
    struct seg *g;
    uint32_t s, slot;
    int rc;

    if (c->avail == NONE && (rc = seg_take(r, cls)) < 0)
        return rc;
    s = c->avail;
    g = &r->seg[s];
    slot = g->stack[--g->nfree];
    g->tag[slot] = tag;
    *off = (uint64_t)s * r->seg_bytes + (uint64_t)slot * c->slot_bytes;
    if (g->nfree == 0)
        avail_unlink(r, s);
    r->used += c->slot_bytes;
    return 0;
}

void tier_ram_free(struct tier_ram *r, uint64_t off)
{
    uint32_t s = (uint32_t)(off / r->seg_bytes);
    struct seg *g = &r->seg[s];
    uint64_t slot_bytes = r->cls[g->cls].slot_bytes;

    uint32_t slot = (uint32_t)((off - (uint64_t)s * r->seg_bytes) / slot_bytes);

    if (g->nfree == 0)
        avail_push(r, s);
    g->stack[g->nfree++] = slot;
    g->tag[slot] = TIER_RAM_NOTAG;
    r->used -= slot_bytes;
    if (g->nfree == g->nslots) {
        /* empty: back to the pool so any class can use it */
        avail_unlink(r, s);
        r->cls[g->cls].nseg--;
        g->cls = -1;
        g->next = r->free_seg;
        r->free_seg = s;
    }
}

uint32_t tier_ram_nseg(const struct tier_ram *r)
{
    return r->nseg;
}

int tier_ram_seg_info(const struct tier_ram *r, uint32_t s, const uint32_t **tags,
                      uint32_t *nslots)
{
    const struct seg *g = &r->seg[s];

    *tags = g->cls >= 0 ? g->tag : NULL;
    *nslots = g->cls >= 0 ? g->nslots : 0;
    return g->cls;
}

uint32_t tier_ram_tag_at(const struct tier_ram *r, uint64_t off)
{
    uint32_t s = (uint32_t)(off / r->seg_bytes);
    const struct seg *g;
    uint64_t in;

    if (off >= r->bytes || r->seg[s].cls < 0)
        return TIER_RAM_NOTAG;
    g = &r->seg[s];
    in = off - (uint64_t)s * r->seg_bytes;
    if (in % r->cls[g->cls].slot_bytes || in / r->cls[g->cls].slot_bytes >= g->nslots)
        return TIER_RAM_NOTAG;
    return g->tag[in / r->cls[g->cls].slot_bytes];
}

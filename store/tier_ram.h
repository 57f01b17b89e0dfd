/* SPDX-License-Identifier: MIT */
/*
 * tier_ram.h - the warm pool: one memfd carved into segments, segments
 * handed on demand to size classes, size classes cut into fixed slots.
 *
 * Namespaces with different block sizes share one pool this way; a segment
 * whose slots are all free goes back to the pool for any class. The memfd is
 * what tierd passes to clients (SCM_RIGHTS), so it holds only data; all
 * bookkeeping lives in this process's heap. Not thread-safe.
 */
#ifndef TIER_RAM_H
#define TIER_RAM_H

#include <stdbool.h>
#include <stdint.h>

#define TIER_RAM_PAGE 4096u          /* slot alignment */
#define TIER_RAM_SEG_MAX (64u << 20) /* segment size for large pools */
#define TIER_RAM_CLASSES 32          /* distinct slot sizes at once */

struct tier_ram;

struct tier_ram_cfg {
    uint64_t bytes;   /* pool size (rounded up to whole segments) */
    bool lock;        /* mlock the pool */
    bool huge;        /* try hugetlb, then transparent huge pages */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

int tier_ram_open(const struct tier_ram_cfg *cfg, struct tier_ram **out);
void tier_ram_close(struct tier_ram *r); /* NULL ok */

int tier_ram_fd(const struct tier_ram *r);
void *tier_ram_base(const struct tier_ram *r);
uint64_t tier_ram_bytes(const struct tier_ram *r);
uint64_t tier_ram_seg_bytes(const struct tier_ram *r); /* largest slot possible */
uint64_t tier_ram_used(const struct tier_ram *r);      /* bytes of slots handed out */
bool tier_ram_locked(const struct tier_ram *r);
bool tier_ram_huge(const struct tier_ram *r);

/* The class for slots of slot_bytes (a multiple of TIER_RAM_PAGE, <= the
 * segment size), created on first use. Returns the class id or -EINVAL /
 * -ENOSPC (too many classes). */
int tier_ram_class(struct tier_ram *r, uint64_t slot_bytes);
uint64_t tier_ram_class_slot(const struct tier_ram *r, int cls);

/* A free slot of class cls: its pool offset in *off. -ENOSPC when the class
 * has no free slot and no segment is free. O(1). */
int tier_ram_alloc(struct tier_ram *r, int cls, uint64_t *off);
/* Give back the slot at off (from tier_ram_alloc). O(1). */
void tier_ram_free(struct tier_ram *r, uint64_t off);

#endif /* TIER_RAM_H */

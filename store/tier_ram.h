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
    bool no_memory;   /* offsets only, no memfd (slots of a device pool) */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

int tier_ram_open(const struct tier_ram_cfg *cfg, struct tier_ram **out);

/* A memfd of bytes (hugetlb when huge) that clients may map read-write but
 * neither resize nor seal further (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL):
 * the fd, or -errno. The warm pool's, and the emulated hot pool's. */
int tier_ram_memfd(const char *name, bool huge, uint64_t bytes);
void tier_ram_close(struct tier_ram *r); /* NULL ok */

int tier_ram_fd(const struct tier_ram *r);
void *tier_ram_base(const struct tier_ram *r);
uint64_t tier_ram_bytes(const struct tier_ram *r);
uint64_t tier_ram_seg_bytes(const struct tier_ram *r); /* largest slot possible */
uint64_t tier_ram_used(const struct tier_ram *r);      /* bytes of slots handed out */
bool tier_ram_locked(const struct tier_ram *r);
bool tier_ram_huge(const struct tier_ram *r);

/* The class for slots of slot_bytes (a multiple of TIER_RAM_PAGE, <= the
 * segment size), created on first use; a class that owns no segment is
 * recycled for another size. Returns the class id or -EINVAL / -ENOSPC
 * (TIER_RAM_CLASSES sizes hold segments at once). */
int tier_ram_class(struct tier_ram *r, uint64_t slot_bytes);
uint64_t tier_ram_class_slot(const struct tier_ram *r, int cls);

/* A free slot of class cls: its pool offset in *off. tag (not TIER_RAM_NOTAG)
 * is remembered for the slot until it is freed (the store: the entry id), so a
 * segment's users can be found. -ENOSPC when the class has no free slot and
 * no segment is free. O(1). */
int tier_ram_alloc(struct tier_ram *r, int cls, uint32_t tag, uint64_t *off);

#define TIER_RAM_NOTAG UINT32_MAX

/* Segment s (0 .. tier_ram_nseg()-1): its class (-1: free) and, for an owned
 * segment, the tag of each of its *nslots slots (TIER_RAM_NOTAG where free).
 * The array stays valid until the segment changes hands. */
uint32_t tier_ram_nseg(const struct tier_ram *r);
/* The tag of the slot at off (TIER_RAM_NOTAG when free or not a slot start). */
uint32_t tier_ram_tag_at(const struct tier_ram *r, uint64_t off);
int tier_ram_seg_info(const struct tier_ram *r, uint32_t s, const uint32_t **tags,
                      uint32_t *nslots);
/* Give back the slot at off (from tier_ram_alloc). O(1). */
void tier_ram_free(struct tier_ram *r, uint64_t off);

#endif /* TIER_RAM_H */

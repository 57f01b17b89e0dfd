/* SPDX-License-Identifier: MIT */
/*
 * kvt_int.h - what libkvtier's own files share and engines never see: the
 * client and namespace handles and the request/reply calls of kvt_client.c
 * that the block, namespace and operator calls (kvt_blocks.c, kvt_ns.c,
 * kvt_admin.c, kvt_offload.c) are made of; the hybrid namespaces of
 * kvt_hybrid.c, which ride on those handles; and kvt_gpu.c, which holds
 * everything that touches the CUDA runtime.
 */
#ifndef KVT_INT_H
#define KVT_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvt_wire.h"
#include "kvtier.h"

struct kvt_hybrid;  /* a hybrid model's groups (kvt_hybrid.c) */
struct kvk_layout;  /* an engine's paged cache (kv_layout.h) */
struct kvt_gpu;     /* a client's device state (kvt_gpu.c): the pool registered, a scratch */

/* A namespace handle: the client's, on its list until kvt_close frees it. */
struct kvt_ns {
    struct kvt_hybrid *hy; /* a hybrid model's handle: its groups (kvt_hybrid.c) */
    kvt_client *c;
    uint32_t id;          /* the daemon's namespace id */
    uint64_t block_bytes;
    uint32_t deadline_ms; /* for gets; 0: wait */
    unsigned hot;         /* KVT_GET_HOT / KVT_GET_PROMOTE for offload and restore */
    struct kvt_ns *next;  /* the client's list, freed by kvt_close */
};

/* A commit started and not yet waited for (kvt_put_commit_start): its
 * reply, kept here when it comes while another call waits for its own. */
struct kvt_commit_slot {
    uint32_t req_id;      /* 0: free */
    uint32_t n;           /* keys committed: the reply's count is at most this */
    bool done;            /* the reply came: rc holds it */
    int rc;               /* the count, or the error */
};

/* A connection to tierd and the pools it maps; one thread at a time. */
struct kvt_client {
    int fd;
    bool dead;            /* sticky: the connection failed */
    int timeout_ms;       /* per reply; $KVTIER_TIMEOUT_MS, default 30 s */
    int spin_us;          /* busy-poll for a reply this long before sleeping */
    uint32_t req_id;
    uint64_t tag;         /* unique in the process: names this client in its kvt_commits */
    uint8_t *base;        /* the warm pool, mapped shared */
    uint64_t pool_bytes;
    uint8_t *hot_base;    /* the hot pool, once attached (device memory for CUDA) */
    uint64_t hot_bytes;
    uint32_t hot_kind;    /* KVT_HOT_*, 0 until attached */
    int32_t hot_device;
    struct kvt_ns *ns;
    struct kvt_gpu *gpu;  /* device state for device caches (kvt_gpu.c), made on use */
    struct kvt_commit_slot commits[KVT_WIRE_COMMITS_MAX]; /* started, not waited for */
    _Alignas(16) uint8_t rbuf[KVT_WIRE_MSG_MAX + 64]; /* last reply */
};

/* kvt_client.c: the messages. Each call below that fails on the connection
 * (or on a reply that breaks the protocol) leaves the client dead: every
 * later call returns KVT_EDISCONNECTED. */

/* Mark c dead (sticky) and return err, for `return kvt_fail(c, KVT_EPROTO)`;
 * inline, so that callers' compilers see the error come back. */
static inline int kvt_fail(kvt_client *c, int err)
{
    c->dead = true;
    return err;
}

/* Send a request of op: iov[0] is left for the header (filled here), the
 * body is iov[1..niov). 0, -EMSGSIZE, KVT_EDISCONNECTED. */
int kvt_send_req(kvt_client *c, uint16_t op, uint32_t flags, struct iovec *iov, int niov);
/* One request of op with a body of len bytes (may be 0), and its reply:
 * the reply's status (0 or negative), its body in c->rbuf (*blen bytes,
 * kvt_reply_body), a passed descriptor in *fd_out when fd_out is not NULL
 * (the caller's to close; -1 when none came). */
int kvt_rpc(kvt_client *c, uint16_t op, const void *req, size_t len, uint32_t *blen,
            int *fd_out);
/* A keys request of ns and its reply, as kvt_rpc: header, kvt_wire_keys_req,
 * optional parent, optional pin id (a pinning lookup's, held hold_ms),
 * keys[0..n). -E2BIG past KVT_BATCH_MAX; -EINVAL for a hybrid handle. */
int kvt_keys_rpc(kvt_ns *ns, uint16_t op, uint32_t flags, const kvt_key *parent,
                 const uint64_t *pin_id, uint32_t hold_ms, const kvt_key *keys, size_t n,
                 uint32_t *blen);
/* kvt_keys_rpc's request alone: sent, its reply left for a later receive
 * (kvt_commit_recv). The request's id is c->req_id afterwards. */
int kvt_keys_send(kvt_ns *ns, uint16_t op, uint32_t flags, const kvt_key *keys, size_t n);
/* Receive until the commit started in slot cs (of c->commits) has its
 * reply (replies to other started commits are kept in their slots on the
 * way). 0 (cs->done, cs->rc), or the connection's error. */
int kvt_commit_recv(kvt_client *c, struct kvt_commit_slot *cs);
/* The last reply's body (valid until the next request). */
static inline const uint8_t *kvt_reply_body(const kvt_client *c)
{
    return c->rbuf + sizeof(struct kvt_wire_hdr);
}

/* kvt_ns.c: a namespace handle with no daemon namespace of its own,
 * standing for the groups of hy (owned by it from now on, freed with the
 * client). NULL when out of memory (hy is then the caller's). */
kvt_ns *kvt_ns_new_hybrid(kvt_client *c, struct kvt_hybrid *hy);
/* The hybrid state of ns, or NULL for a plain namespace. */
struct kvt_hybrid *kvt_ns_hybrid(const kvt_ns *ns);

/* kvt_model.c and kvt_model_size.c: saturating arithmetic, so that the
 * sizes of absurd configs stay UINT64_MAX instead of wrapping (static
 * helpers, hence the plain names). */
static inline uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;

    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* v's low bytes, little-endian, at p: the bytes of a descriptor hashed into
 * a namespace's identity, the same on every host; returns p + bytes. */
static inline uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + bytes;
}

/* kvt_hash.c: SHA-256 of the concatenation of parts[0..n) (lens[i] bytes
 * each) into out. Returns 0, -ENOMEM or -EIO. */
int kvt_sha256_parts(const void *const *parts, const size_t *lens, size_t n, kvt_key *out);

/* kvt_hybrid.c */
void kvt_hybrid_free(struct kvt_hybrid *hy);
void kvt_hybrid_set_deadline(struct kvt_hybrid *hy, uint32_t ms);
int kvt_hybrid_lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                      uint8_t *tiers);

/* kvt_gpu.c: the CUDA runtime, behind one file. Without CUDA in the build,
 * kvt_gpu_built is false and the rest answers -EOPNOTSUPP. */
bool kvt_gpu_built(void);
/* Open a hot pool's CUDA IPC handle (len bytes) on device: 0 with *base,
 * -EINVAL (a handle of the wrong size), -ENODEV, -EIO. The caller's current
 * device is left as it was. */
int kvt_gpu_ipc_open(const void *handle, size_t len, int device, void **base);
void kvt_gpu_ipc_close(void *base);
/* Gather (engine -> slots) or scatter m blocks between the device cache of
 * l and pool slots on stream, and wait for it. *g is made on first use
 * (pool[0..pool_bytes) registered for DMA, a scratch buffer allocated) and
 * freed by kvt_gpu_free. tiers[i] == KVT_TIER_HOT: slot i is device memory
 * already. ids were checked on the host. 0, -E2BIG, -ENOMEM, -EIO. */
int kvt_gpu_move(struct kvt_gpu **g, void *pool, uint64_t pool_bytes, bool gather,
                 const struct kvk_layout *l, const int64_t *ids, size_t m, void *const *slots,
                 const uint8_t *tiers, void *stream);
/* Unregister the pool and free the scratch; NULL is fine. */
void kvt_gpu_free(struct kvt_gpu *g);

#endif /* KVT_INT_H */

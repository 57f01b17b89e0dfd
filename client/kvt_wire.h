/* SPDX-License-Identifier: MIT */
/*
 * kvt_wire.h - the wire protocol between libkvtier and tierd.
 *
 * One SOCK_SEQPACKET message per request and per reply: a fixed header, then
 * a body whose layout depends on the opcode. All integers are host-endian
 * (both ends run on one machine). Every length is checked by the receiver
 * against the message size; a framing error (bad magic, version, length)
 * costs the sender its connection, a semantic error gets an error reply.
 * This header is shared by tierd and the client library and by nothing else.
 */
#ifndef KVT_WIRE_H
#define KVT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define KVT_WIRE_MAGIC 0x3154564bu /* "KVT1" little-endian */
#define KVT_WIRE_VERSION 1

/* Largest message either side sends: header + batch of keys + parent. */
#define KVT_WIRE_MSG_MAX (64u * 1024u)

enum kvt_wire_op {
    KVT_OP_HELLO = 1,       /* -> hello_rep + the warm pool memfd (SCM_RIGHTS) */
    KVT_OP_NS_OPEN = 2,     /* ns_req -> ns_rep */
    KVT_OP_LOOKUP = 3,      /* keys_req -> lookup_rep (+ pin_rep) + tiers[n] */
    KVT_OP_PUT_RESERVE = 4, /* keys_req -> count_rep + offs[n] */
    KVT_OP_PUT_COMMIT = 5,  /* keys_req -> count_rep */
    KVT_OP_PUT_ABORT = 6,   /* keys_req -> count_rep */
    KVT_OP_GET = 7,         /* keys_req -> get_rep + offs[hits] */
    KVT_OP_RELEASE = 8,     /* release_req, normally with KVT_WIRE_F_NOREPLY */
    KVT_OP_REMOVE = 9,      /* keys_req -> count_rep */
    KVT_OP_STATS = 10,      /* empty -> kvt_stats */
    KVT_OP_HOT_ATTACH = 11, /* empty -> hot_rep (+ the emulated hot pool's memfd) */
    KVT_OP_NS_LIST = 12,    /* ns_list_req -> ns_list_rep + ns_info[n] */
    KVT_OP_WHY = 13,        /* a key (KVT_KEY_BYTES) -> why_rep + story[n] */
    KVT_OP_FLUSH = 14,      /* empty -> empty, once warm is durable on disk */
    KVT_OP_PURGE = 15,      /* purge_req -> count_rep */
    KVT_OP_UNPIN = 16,      /* unpin_req, normally with KVT_WIRE_F_NOREPLY */
    KVT_OP_MAX_ = 17,
};

#define KVT_WIRE_F_NOREPLY 0x1u /* header flag: the sender wants no reply */

struct kvt_wire_hdr {
    uint32_t magic;    /* KVT_WIRE_MAGIC */
    uint16_t version;  /* KVT_WIRE_VERSION */
    uint16_t op;       /* enum kvt_wire_op */
    uint32_t req_id;   /* echoed in the reply */
    int32_t status;    /* replies: 0 or a negative error; requests: 0 */
    uint32_t body_len; /* bytes after the header; must equal the rest of the message */
    uint32_t flags;    /* KVT_WIRE_F_* */
};
_Static_assert(sizeof(struct kvt_wire_hdr) == 24, "wire header is 24 bytes");

struct kvt_wire_hello_req {
    uint32_t pid;      /* informational; the daemon trusts SO_PEERCRED */
    uint32_t reserved;
};

struct kvt_wire_hello_rep {
    uint64_t pool_bytes;  /* size of the memfd to map */
    uint64_t session_id;  /* this connection's id in tierd's logs and stats */
    uint32_t max_batch;   /* KVT_BATCH_MAX of the daemon */
    uint32_t page_bytes;  /* slot alignment */
};

#define KVT_WIRE_MODEL_ID_MAX 128
#define KVT_WIRE_DTYPE_MAX 16
#define KVT_WIRE_LAYOUT_MAX 32

struct kvt_wire_ns_req {
    uint64_t block_bytes;
    uint32_t block_tokens;
    uint32_t tp_rank;
    uint32_t tp_size;
    uint32_t reserved;
    char model_id[KVT_WIRE_MODEL_ID_MAX]; /* NUL-terminated within the field */
    char dtype[KVT_WIRE_DTYPE_MAX];
    char layout[KVT_WIRE_LAYOUT_MAX];
};

struct kvt_wire_ns_rep {
    uint32_t ns_id;
    uint32_t reserved;
    uint64_t block_bytes;
    uint64_t slot_bytes; /* block_bytes rounded up to the slot alignment */
};

#define KVT_WIRE_KF_PARENT 0x1u  /* keys_req: a parent key precedes keys[] */
#define KVT_WIRE_KF_DURABLE 0x2u /* commit: reply once the blocks are durable on disk */
/* Durable commits one client may have waiting at once (more: -EBUSY);
 * replies may come in any order (each names its request id). 2 before
 * issue 19's pipelining: such a tierd answers a client's third -EBUSY. */
#define KVT_WIRE_COMMITS_MAX 4
#define KVT_WIRE_KF_HOT 0x4u     /* reserve: slots in the hot pool; get: blocks in hot are
                                    leased in place, and tiers[hits] follow offs[hits]
                                    (the session must have done HOT_ATTACH) */
#define KVT_WIRE_KF_PROMOTE 0x8u /* get, prefetching lookup: move the blocks up into hot
                                    afterwards (after HOT_ATTACH) */

#define KVT_WIRE_KF_PIN 0x10u    /* lookup: pin the leading hits for deadline_ms (0: the
                                    default); a pin id (u64) precedes keys[]: 0 starts
                                    a pin, else this client's pin to extend (a chain
                                    longer than one batch); pin_rep follows lookup_rep */

/* How long a pin holds, by default and at most. */
#define KVT_WIRE_PIN_DEFAULT_MS 10000u
#define KVT_WIRE_PIN_MAX_MS 60000u

/* Body of every request that carries keys; followed by the parent key when
 * KVT_WIRE_KF_PARENT is set, then the pin id when KVT_WIRE_KF_PIN is, then n
 * keys of KVT_KEY_BYTES. */
struct kvt_wire_keys_req {
    uint32_t ns_id;
    uint32_t n;
    uint64_t block_bytes; /* must match the namespace (catches layout drift) */
    uint32_t flags;       /* KVT_WIRE_KF_* and, for lookup, KVT_LOOKUP_* << 8 */
    uint32_t deadline_ms; /* get: answer within this long, blocks still on their
                             way from disk counting as misses (0: wait) */
};

struct kvt_wire_lookup_rep {
    uint32_t hits; /* leading present keys */
    uint32_t n;    /* tiers[n] (uint8_t) follow */
};

/* A pinning lookup's pin: the blocks held (pinned of the leading hits; fewer
 * where the client's quota ends) and for how long. pin_id 0: none held. */
struct kvt_wire_pin_rep {
    uint64_t pin_id;
    uint32_t pinned;
    uint32_t hold_ms;
};

struct kvt_wire_count_rep {
    uint32_t n;     /* offs[n] follow (reserve only) */
    uint32_t count; /* reserved / committed / aborted / removed */
};

#define KVT_WIRE_NO_SLOT UINT64_MAX /* reserve: the key needs no write */

struct kvt_wire_get_rep {
    uint64_t lease_id; /* 0 when hits == 0 */
    uint32_t hits;     /* offs[hits] (uint64_t) follow */
    uint32_t reserved;
};

/* HOT_ATTACH: how to reach the hot pool. Offsets of KF_HOT replies are
 * offsets into it. */
struct kvt_wire_hot_rep {
    uint32_t kind;    /* KVT_HOT_EMULATED (a memfd comes with the reply) or KVT_HOT_CUDA */
    int32_t device;   /* CUDA device ordinal of the pool */
    uint64_t bytes;   /* pool size */
    uint8_t ipc[64];  /* KVT_HOT_CUDA: the pool's cudaIpcMemHandle_t */
};

struct kvt_wire_ns_list_req {
    uint32_t start;   /* the first namespace id to report (ids from 1) */
    uint32_t max;     /* at most this many in the reply */
};

struct kvt_wire_ns_list_rep {
    uint32_t n;       /* kvt_ns_info[n] follow */
    uint32_t next;    /* the id to start the next request at; 0: no more */
};

struct kvt_wire_why_rep {
    uint32_t n;       /* kvt_key_story[n] follow: one per namespace that knows the key */
    uint32_t reserved;
};

struct kvt_wire_purge_req {
    uint32_t ns_id;
    uint32_t reserved;
};

struct kvt_wire_release_req {
    uint64_t lease_id;
};

/* Any client of the pin's tenant may release it (the one that loaded). */
struct kvt_wire_unpin_req {
    uint64_t pin_id;
};

/* kvt_ns_info and kvt_key_story (kvtier.h) travel as they are. */
_Static_assert(sizeof(kvt_ns_info) == 352, "kvt_ns_info layout");
_Static_assert(sizeof(kvt_key_story) == 24, "kvt_key_story layout");

#endif /* KVT_WIRE_H */

/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.h - the remote tier: blocks kept in a Redis Cluster that the
 * tierd of every node shares, behind asynchronous put / get / exists calls
 * whose completions come through an event fd, like the cold and hot tiers'.
 *
 * The network I/O runs on worker threads of this module (hiredis, one
 * blocking connection per cluster node and worker, commands pipelined per
 * node), so the caller's thread never waits on the network: a node that is
 * down or slow turns into failed operations (misses), bounded by timeouts.
 * Routing follows the cluster spec: CRC16 key slots, the slot map from
 * CLUSTER SLOTS, MOVED (update the map) and ASK (ASKING, then retry).
 *
 * Keys on the cluster are "kvt:<namespace id>:<block key>" in hex, the
 * namespace id being the first 128 bits of a SHA-256 over the namespace's
 * fields (tier_remote_ns_id; no hash tag, so a namespace's blocks spread over
 * every slot); values are a 32-byte header (magic, version, length, XXH3-64
 * of the payload, XXH3-64 of the key) and the payload, verified on every read.
 *
 * Not thread-safe: one caller thread (tierd's loop) calls everything here;
 * the worker threads only touch what a submitted job hands them.
 */
#ifndef TIER_REMOTE_H
#define TIER_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tier_key.h"

struct tier_remote;

struct tier_remote_cfg {
    const char *seeds;         /* "host:port[,host:port...]": any nodes of the cluster */
    uint32_t timeout_ms;       /* connect and per-socket-operation timeout (0: 100) */
    uint32_t workers;          /* I/O threads, each with its own connection per node (0: 2) */
    uint64_t max_queued_bytes; /* copied put payloads waiting at most (0: 256 MiB) */
    /* warnings (a node down, a slot map read); called from worker threads
     * too, so it must be thread-safe (tierd's log writes one line to stderr) */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

/* Counters since open; kept on the caller's thread (tier_remote_poll) but
 * for redirects and slot map reads, which the workers count atomically. */
struct tier_remote_stats {
    uint64_t hits;            /* blocks read back and verified */
    uint64_t misses;          /* blocks asked for and absent */
    uint64_t puts;            /* blocks written */
    uint64_t bytes_in;        /* payload bytes written to the cluster */
    uint64_t bytes_out;       /* payload bytes read back (verified) */
    uint64_t errors;          /* operations failed: node down, timeout, cluster error,
                                 queue full; each is a miss or a block not written */
    uint64_t checksum_errors; /* values read back with a wrong header or checksum: misses */
    uint64_t probes;          /* keys asked about by exists */
    uint64_t probe_hits;      /* ... and present */
    uint64_t redirects;       /* MOVED and ASK replies followed */
    uint64_t slot_maps;       /* slot maps read (CLUSTER SLOTS) */
    uint64_t queued_bytes;    /* copied put payloads waiting now */
};

/* Completion of a submitted call: rc 0 (per-key outcomes in res), or
 * -ECANCELED when the tier closed before the call ran. */
typedef void (*tier_remote_cb)(void *ctx, int rc);

/* Open: start the workers (they read the slot map from the seeds on their
 * first job, so an unreachable cluster does not stop the caller; its calls
 * fail until it answers). -EINVAL (no seed, a bad host:port), -ENOMEM, or
 * the errno of eventfd/pthread_create. */
int tier_remote_open(const struct tier_remote_cfg *cfg, struct tier_remote **out);
/* Let the workers finish what is queued (bounded by the timeouts: a node
 * that does not answer fails fast once marked down), stop them, run every
 * callback not run yet, free. NULL ok. */
void tier_remote_close(struct tier_remote *r);

/* Readable when tier_remote_poll() has completions to deliver. */
int tier_remote_event_fd(const struct tier_remote *r);
/* Run the callbacks of finished calls; with wait, block until one finished
 * first when calls are in flight. Returns callbacks run or -errno. */
int tier_remote_poll(struct tier_remote *r, bool wait);
/* Calls submitted whose callback has not run yet. */
unsigned tier_remote_inflight(const struct tier_remote *r);

/* What names a namespace on the cluster: the same on every node, and
 * collision-resistant, since a client chooses most of it. Strings are
 * borrowed for the call only. */
struct tier_remote_ns_desc {
    const char *tenant;    /* its tenant's name: the caller's own config, never a
                              client's text (what keeps tenants apart) */
    const char *model_id;  /* the model descriptor, as the client gave it */
    const char *dtype;
    const char *layout;
    uint32_t block_tokens;
    uint64_t block_bytes;
    uint32_t tp_rank, tp_size;
};

/* Namespaces: a local namespace id is stored on the cluster under its
 * namespace id (tier_remote_ns_id of desc), never under the local id. Only
 * namespaces added here use the remote tier. 0, -ENOMEM, -EINVAL (ns 0 or
 * above 2^24, a NULL string in desc). */
int tier_remote_ns_add(struct tier_remote *r, uint32_t ns, const struct tier_remote_ns_desc *desc);
bool tier_remote_ns_on(const struct tier_remote *r, uint32_t ns);

/* Write one block (len bytes of buf) under (ns, key), replacing any older
 * value. copy: buf is copied now (it may change at once after the call);
 * else buf must stay valid and unchanged until cb runs. -ENOENT (ns not
 * added), -EBUSY (copy and the queue holds max_queued_bytes), -ENOMEM.
 * The outcome is counted (puts or errors), not reported: rc of cb is 0. */
int tier_remote_put(struct tier_remote *r, uint32_t ns, const struct tier_key *key,
                    const void *buf, uint64_t len, bool copy, tier_remote_cb cb, void *ctx);

/* Read keys[0..n) of ns into bufs[i] (len bytes each, written by a worker
 * thread until cb runs, and only for keys found). res[i] gets 0 (bufs[i]
 * holds the verified block), -ENOENT (absent), -EBADMSG (wrong value:
 * checksum, length or header) or -EIO (node down, timeout, cluster error).
 * keys are copied; bufs and res stay the caller's and must stay valid
 * until cb. -ENOENT (ns not added), -ENOMEM, -EINVAL (n 0). */
int tier_remote_get(struct tier_remote *r, uint32_t ns, const struct tier_key *keys,
                    size_t n, void *const *bufs, uint64_t len, int *res, tier_remote_cb cb,
                    void *ctx);

/* Ask which of keys[0..n) of ns exist: res[i] 1 (present), 0 (absent) or
 * -EIO. Pipelined EXISTS per node. Same rules as tier_remote_get. */
int tier_remote_exists(struct tier_remote *r, uint32_t ns, const struct tier_key *keys,
                       size_t n, int *res, tier_remote_cb cb, void *ctx);

void tier_remote_stats_get(const struct tier_remote *r, struct tier_remote_stats *out);

/* ---- the formats, exposed for tests and tools ------------------------ */

#define TIER_REMOTE_SLOTS 16384
#define TIER_REMOTE_HDR_BYTES 32
#define TIER_REMOTE_NS_ID_BYTES 32  /* a namespace id: SHA-256 */
#define TIER_REMOTE_NS_KEY_BYTES 16 /* ... of which a cluster key carries 128 bits */
#define TIER_REMOTE_KEY_MAX 102     /* "kvt:" + 32 + ":" + 64 hex digits, NUL included */

/* CRC16-CCITT (XMODEM: poly 0x1021, init 0), the cluster spec's key hash:
 * "123456789" -> 0x31C3. */
uint16_t tier_remote_crc16(const void *buf, size_t len);
/* A key's slot: CRC16 of the key, or of its hash tag (the bytes between
 * the first '{' and the first '}' after it, when not empty), mod 16384. */
unsigned tier_remote_slot(const void *key, size_t len);
/* The namespace id of desc into out: SHA-256 of, in this order,
 *   str("kvtier remote namespace 1"), str(tenant), str(model_id), str(dtype),
 *   str(layout), u32 block_tokens, u64 block_bytes, u32 tp_rank, u32 tp_size
 * where str(s) is s's length as a u32 then its bytes (no NUL), and every
 * integer is little-endian: no two descriptors share an encoding. The tag
 * names the encoding's version (another encoding gets another tag). 0,
 * -EINVAL (a NULL string, one of 4 GiB), -ENOMEM. */
int tier_remote_ns_id(const struct tier_remote_ns_desc *desc,
                      uint8_t out[TIER_REMOTE_NS_ID_BYTES]);
/* The cluster key of (namespace id, key) into out (TIER_REMOTE_KEY_MAX
 * bytes): "kvt:", the id's first TIER_REMOTE_NS_KEY_BYTES in hex, ":", the
 * key in hex; returns its length (TIER_REMOTE_KEY_MAX - 1). */
size_t tier_remote_key(char *out, const uint8_t ns_id[TIER_REMOTE_NS_ID_BYTES],
                       const struct tier_key *key);
/* The value header of payload[0..len) stored under rkey[0..klen). */
void tier_remote_hdr_make(uint8_t hdr[TIER_REMOTE_HDR_BYTES], const char *rkey, size_t klen,
                          const void *payload, uint64_t len);
/* Check a value read back under rkey: header, length (want_len) and
 * checksums. 0, or -EBADMSG. */
int tier_remote_value_check(const void *val, size_t vlen, const char *rkey, size_t klen,
                            uint64_t want_len);

#endif /* TIER_REMOTE_H */

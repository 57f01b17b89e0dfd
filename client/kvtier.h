/* SPDX-License-Identifier: MIT */
/*
 * kvtier.h - the public API of libkvtier, the client library of tierd.
 *
 * An engine process connects to tierd over a Unix socket, opens a namespace
 * for its model, and then moves KV-cache blocks in batches: lookup (how long
 * a prefix is cached), put (reserve slots in the shared warm pool, fill them,
 * commit) and get (lease slots, read them, release). Data never crosses the
 * socket: slots are pointers into the warm pool, which tierd shares with each
 * client as a memfd mapped once at connect time.
 *
 * Keys are vLLM-compatible salted SHA-256 prefix-chain block hashes;
 * kvt_hash_prompt() computes them without a daemon.
 *
 * Threads: a kvt_client and its namespaces may be used by one thread at a
 * time (the caller serialises). Separate clients are independent.
 *
 * Errors: every call that can fail returns a negative error code: a negated
 * errno (-ENOSPC, -EINVAL, ...) or one of the KVT_E* codes below.
 * kvt_strerror() describes both.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_KEY_BYTES 32
/* Most keys one call may carry; larger batches get -E2BIG (lookup excepted). */
#define KVT_BATCH_MAX 1024
/* Largest block one namespace may declare (bytes). */
#define KVT_BLOCK_MAX (256ull << 20)

/* A block hash: 32 opaque bytes. */
typedef struct kvt_key {
    uint8_t b[KVT_KEY_BYTES];
} kvt_key;

/* kvtier's own error codes, below -4095 so that they never meet an errno. */
enum {
    KVT_EPROTO = -4097,        /* malformed or truncated message */
    KVT_EVERSION = -4098,      /* client and daemon speak different versions */
    KVT_ENONS = -4099,         /* unknown namespace id */
    KVT_EBLOCKSIZE = -4100,    /* block size differs from the namespace's */
    KVT_EDISCONNECTED = -4101, /* tierd closed the connection or died */
};

/* Where a block is (kvt_lookup's tiers[] values). */
enum {
    KVT_TIER_NONE = 0,
    KVT_TIER_HOT = 1,
    KVT_TIER_WARM = 2,
    KVT_TIER_COLD = 3,
    KVT_TIER_COUNT = 4,
};

/* ---- keys (no daemon needed) ---------------------------------------- */

/* A multimodal item that covers tokens [offset, offset + length) of the
 * prompt; its identifier joins the extra keys of every block it overlaps. */
typedef struct kvt_mm_item {
    const char *identifier; /* borrowed, NUL-terminated */
    uint64_t offset;        /* first token of the item, absolute */
    uint64_t length;        /* tokens covered, > 0 */
} kvt_mm_item;

/* How a block's extra keys are written (kvt_hash_opts.extra_format): */
enum {
    KVT_EXTRA_TAGGED = 0,   /* vLLM 0.32 and later: ["lora", name, path],
                               ["mm", identifier, item offset - block start],
                               ["cache_salt", salt] */
    KVT_EXTRA_UNTAGGED = 1, /* earlier vLLM: the LoRA name, the items'
                               identifiers and the salt as bare strings */
};

/* How to hash a token sequence. Byte-compatible with vLLM's sha256_cbor
 * prefix-caching hash: key = SHA-256(canonical CBOR [parent, [tokens],
 * extra or null]), extra = [lora?, mm items..., cache_salt?] in the form of
 * extra_format (no extra key: null). */
typedef struct kvt_hash_opts {
    uint32_t block_tokens;     /* tokens per block, > 0 (vLLM default 16) */
    const char *seed;          /* NONE_HASH = SHA-256(CBOR(seed)); vLLM uses its
                                  PYTHONHASHSEED string. NULL is an error. */
    const char *cache_salt;    /* NULL or "": none; else on the first block only */
    const char *lora_name;     /* NULL: none; else on every block */
    const kvt_mm_item *mm;     /* sorted by offset; may be NULL when n_mm == 0 */
    size_t n_mm;
    const kvt_key *parent;     /* NULL: tokens start the prompt (parent is
                                  NONE_HASH); else the key of the block before */
    uint64_t start_token;      /* absolute index of tokens[0]; a multiple of
                                  block_tokens; 0 when parent is NULL */
    uint32_t extra_format;     /* KVT_EXTRA_TAGGED (0, today's vLLM) or _UNTAGGED */
    const char *lora_path;     /* KVT_EXTRA_TAGGED with lora_name: the adapter's path,
                                  which vLLM hashes with the name (required) */
} kvt_hash_opts;

/* Hash the full blocks of tokens[0..n_tokens) into keys_out (room for
 * n_tokens / block_tokens keys). A partial tail block gets no key. Allocates
 * nothing per block. Returns the number of keys written, or -EINVAL for bad
 * options, -ENOMEM / -EIO if the SHA-256 engine could not be set up. */
ssize_t kvt_hash_prompt(const kvt_hash_opts *o, const uint32_t *tokens, size_t n_tokens,
                        kvt_key *keys_out);

/* NONE_HASH for a seed string: the parent of every prompt's first block. */
int kvt_none_hash(const char *seed, kvt_key *out);

/* Lower-case hex of a key into out (65 bytes with the NUL). Returns out. */
char *kvt_key_hex(const kvt_key *k, char out[2 * KVT_KEY_BYTES + 1]);

/* ---- connection and namespaces --------------------------------------- */

typedef struct kvt_client kvt_client; /* one connection to tierd (opaque) */
typedef struct kvt_ns kvt_ns;         /* a namespace opened on it (opaque) */

/* Most bytes of a namespace's variant (kvt_model.variant). */
#define KVT_VARIANT_MAX (64u << 10)

/* What a namespace holds. Two clients that give equal descriptors (in the
 * same tenant) share blocks; any difference keeps them apart. Everything
 * that changes a block's bytes belongs in it: a parameter with no field of
 * its own goes into the variant. */
typedef struct kvt_model {
    const char *model_id;  /* e.g. "meta-llama/Llama-3.1-8B"; <= 127 bytes */
    const char *dtype;     /* element format, e.g. "bf16", "fp8_e4m3" (each FP8 format
                              its own name: kvt_model_set_dtype's); <= 15 bytes */
    const char *layout;    /* engine KV layout name, e.g. "vllm-flash"; <= 31 bytes */
    uint32_t block_tokens; /* tokens per block, > 0 */
    uint32_t tp_rank;      /* tensor-parallel rank of this client's shard */
    uint32_t tp_size;      /* tensor-parallel world size, >= 1 */
    uint64_t block_bytes;  /* bytes of one stored block, 1..KVT_BLOCK_MAX; tierd
                              refuses blocks over its largest slot (-EFBIG) */
    uint32_t pp_rank;      /* pipeline-parallel rank: the stage whose layers the
                              blocks hold (< pp_size) */
    uint32_t pp_size;      /* pipeline-parallel world size; 0 is taken as 1 */
    const void *variant;   /* NULL, or variant_len bytes (borrowed for the call) of
                              anything else that changes the blocks' bytes: the
                              KV quantisation scales when not 1.0 (vLLM's
                              per-layer k_scale / v_scale), an instance's own
                              scales (calculated ones: its id), ...; compared
                              as bytes */
    size_t variant_len;    /* 0..KVT_VARIANT_MAX */
} kvt_model;

/* Socket path used when none is given: $KVTIER_SOCKET, else this. */
#define KVT_DEFAULT_SOCKET "/run/kvtier/tierd.sock"

/* The socket path a client would use for NULL: $KVTIER_SOCKET or the
 * default. The string is static or the environment's; do not free it. */
const char *kvt_default_socket(void);

/* Connect to tierd (socket_path NULL: kvt_default_socket()) and map its warm
 * pool. On success *out owns the connection; free it with kvt_close().
 * Environment: KVTIER_TIMEOUT_MS bounds the wait for each reply (default
 * 30000; then -ETIMEDOUT and the client is closed for use); KVTIER_SPIN_US
 * busy-polls that long for a reply before sleeping (default 50; 0: never).
 * Errors: -ENOENT / -ECONNREFUSED when tierd is not running there,
 * -ETIMEDOUT when it does not answer the handshake in time or is not
 * accepting connections (its queue of them full: at once),
 * KVT_EVERSION, KVT_EPROTO, or a mapping errno. */
int kvt_connect(const char *socket_path, kvt_client **out);

/* kvt_connect with each reply's wait bounded to timeout_ms from the start,
 * its handshake included (0: KVTIER_TIMEOUT_MS or its default): a daemon
 * that stopped answering costs the caller that long, not 30 s. */
int kvt_connect_timeout(const char *socket_path, uint32_t timeout_ms, kvt_client **out);

/* Bound the wait for each reply on c from now on to ms milliseconds (0:
 * back to KVTIER_TIMEOUT_MS or its default), as the environment does for
 * every client: past it the call returns -ETIMEDOUT and c is closed for
 * use. For a caller that must never stall on a daemon that stopped
 * answering, such as an engine's scheduler asking for hits (open it with
 * kvt_connect_timeout, so that the handshake is bounded too). NULL ok. */
void kvt_set_timeout(kvt_client *c, uint32_t ms);

/* Close the connection: tierd reclaims every lease and reservation still
 * held. Invalidates every namespace and pointer obtained through c. NULL ok. */
void kvt_close(kvt_client *c);

/* Open (or join) the namespace for a model. *out stays valid until
 * kvt_close(c). With a pipeline stage (pp_size above 1) or a variant, the
 * layout tierd records (kvt_ns_info.layout) is the start of model->layout,
 * '#' and digits of a SHA-256 of the whole identity: the daemon's
 * descriptor has no room for more. Errors: -EINVAL for a bad descriptor,
 * -ENOSPC when tierd has no room for another namespace. */
int kvt_ns_open(kvt_client *c, const kvt_model *model, kvt_ns **out);

/* Bytes of one block in this namespace. */
uint64_t kvt_ns_block_bytes(const kvt_ns *ns);

/* The daemon's id of this namespace (kvt_ns_info.id, what kvt_admin_purge
 * takes); 0 for a hybrid handle, whose groups each have their own
 * (kvt_ns_group). */
uint32_t kvt_ns_id(const kvt_ns *ns);

/* Bound the wait of later gets on this namespace: blocks still on their way
 * from disk when ms milliseconds have passed count as misses (the get
 * returns the leading run that is in memory); their reads go on and land in
 * warm for next time. 0 (the default) waits for the disk. */
void kvt_ns_set_deadline(kvt_ns *ns, uint32_t ms);

/* ---- blocks ---------------------------------------------------------- */

/* Flags for kvt_lookup. */
#define KVT_LOOKUP_PREFETCH 0x1u /* start reading the leading cold hits into warm now,
                                    so that the get that follows waits less */

/* How many leading keys of the chain keys[0..n) are present: the prefix-hit
 * length. tiers (NULL or room for n) receives each key's tier, present or not
 * (a key after a miss may still be present). Any n is accepted. Returns the
 * hit count or a negative error. */
int kvt_lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags, uint8_t *tiers);

/* A pin: what a pinning lookup holds for a get to come. */
typedef struct kvt_pin {
    uint64_t id;      /* 0: nothing pinned; any client of the tenant may unpin it */
    uint32_t n;       /* leading blocks held */
    uint32_t hold_ms; /* for how long from the lookup */
} kvt_pin;

#define KVT_PIN_MAX_MS 60000 /* the longest hold a pin may ask */

/* kvt_lookup that also pins the leading hits, for hold_ms (0: 10 s; at most
 * KVT_PIN_MAX_MS): until then no tier evicts them, and those only on disk
 * are read into warm at once (as with KVT_LOOKUP_PREFETCH), so a get of
 * them finds them all, whatever else is put meanwhile. An engine's
 * scheduler pins what it counts as a hit; the worker that loads it (any
 * client of the same tenant) unpins it after the get. The pins of all of
 * a tenant's clients hold at most a quarter of its warm tier: beyond that
 * pin->n is less than the hits (the rest may be evicted before the get, as
 * without a pin). -EBUSY: this client holds 4096 pins. Returns the hit
 * count; pin->n of those are pinned. */
int kvt_lookup_pin(kvt_ns *ns, const kvt_key *keys, size_t n, uint32_t hold_ms, kvt_pin *pin,
                   uint8_t *tiers);

/* Release a pin (asynchronous: no round trip); the pin is zeroed. A zeroed
 * pin, or one that expired or was released, is a no-op. */
int kvt_unpin(kvt_client *c, kvt_pin *pin);

/* Reserve slots for the chain keys[0..n) (n <= KVT_BATCH_MAX); parent is the
 * key before keys[0] (NULL when keys[0] starts a prompt). slots[i] receives a
 * writable pointer of kvt_ns_block_bytes() bytes, or NULL where the key is
 * already stored or being stored (deduplicated: nothing to write). All or
 * nothing: -ENOSPC when the pool cannot hold the batch even after eviction
 * (e.g. all blocks leased); -EAGAIN when warm is still full of blocks on
 * their way to disk after waiting up to KVT_PUT_WAIT_MS for tierd's mover
 * (tierd never drops a block the disk could take). Returns the number of
 * slots reserved. Reserved keys are invisible to lookups until committed. */
#define KVT_PUT_WAIT_MS 2000
int kvt_put_reserve(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                    void **slots);

/* Publish the reserved keys among keys[0..n) once their slots are written;
 * keys this client did not reserve are ignored. Returns the number
 * committed. */
int kvt_put_commit(kvt_ns *ns, const kvt_key *keys, size_t n);

/* Flags for kvt_put_commit_flags. */
#define KVT_COMMIT_DURABLE 0x1u /* return once every block of keys[] is durable in the
                                   cold tier (written and synced, indexed): it
                                   survives a crash of tierd or of the machine */

/* kvt_put_commit with flags. With KVT_COMMIT_DURABLE: -EOPNOTSUPP when tierd
 * runs without a cold tier, -EIO / -ENOSPC when a block could not be made
 * durable (the blocks stay committed in memory), -ENODATA when a key of the
 * batch is not stored (deduplicated at reserve against another client's put
 * that was aborted, or a block evicted, since: put it again), -EAGAIN when a
 * block in hot could not be copied down (warm full of blocks on their way
 * to disk: retry), or when the commit was not done after tierd's
 * --durable-wait-ms (10 s by default: a key another client reserved and has
 * not finished, a slow disk; the blocks stay committed and their writes go
 * on, retry). A key another client is
 * still writing is waited for; a block in hot is copied down and written. */
int kvt_put_commit_flags(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags);

/* A commit started by kvt_put_commit_start: the caller's struct, filled
 * there, emptied by kvt_put_commit_wait. */
typedef struct kvt_commit {
    uint32_t id;     /* the request's (0: none) */
    uint32_t n;      /* keys committed */
    uint64_t client; /* the client's own tag: a handle waited on another client is -EINVAL */
} kvt_commit;

/* Commits one client may have started and not yet waited for: enough that
 * the disk stays busy while the engine fills its next batch and the oldest
 * ones make their data and index durable (three syncs each, in turn). */
#define KVT_COMMITS_MAX 4

/* kvt_put_commit_flags without waiting for the answer: the request is sent
 * and this returns, so that an engine reserves and fills its next batch
 * while tierd writes this one (with KVT_COMMIT_DURABLE, tierd writes the
 * next batch while it makes this one's index durable). Any other call may
 * be made meanwhile on the client (one thread at a time, as always).
 * kvt_put_commit_wait gives the result, which is kvt_put_commit_flags's;
 * every started commit must be waited for. Until then the blocks of keys[]
 * are committed only as far as the answer says, and keys[] is not needed
 * after this returns. Returns 0 and *cm, or -EINVAL, -E2BIG, -EBUSY
 * (KVT_COMMITS_MAX started and not waited for: wait for one first), or the
 * connection's error. */
int kvt_put_commit_start(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                         kvt_commit *cm);

/* Wait for the commit *cm started on ns's client: the count of blocks
 * newly stored or an error, as kvt_put_commit_flags; *cm is emptied.
 * Commits may be waited for in any order. -EINVAL for a commit not started
 * on this client or waited for already. */
int kvt_put_commit_wait(kvt_ns *ns, kvt_commit *cm);

/* Give back reservations among keys[0..n) without publishing them. */
int kvt_put_abort(kvt_ns *ns, const kvt_key *keys, size_t n);

/* Copying put: reserve, copy bufs[i] (kvt_ns_block_bytes() each) into the
 * new slots, commit. Returns the number of blocks newly stored. */
int kvt_put(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
            const void *const *bufs);

/* A set of leased blocks; the caller owns the struct, tierd the slots. */
typedef struct kvt_lease {
    uint64_t id; /* 0: nothing leased */
    uint32_t n;  /* blocks under the lease */
} kvt_lease;

/* Lease the leading present keys of keys[0..n) (n <= KVT_BATCH_MAX):
 * slots[i] (room for n) points at block i, read-only, for i < the returned
 * count, and stays valid and unchanged until kvt_release(). Leased blocks
 * are never evicted. Blocks only on disk are read into warm first (bounded
 * by kvt_ns_set_deadline). Returns the leading hit count (0 is not an error);
 * -EBUSY when this client already holds 4096 leases. */
int kvt_get_lease(kvt_ns *ns, const kvt_key *keys, size_t n, const void **slots,
                  kvt_lease *lease);

/* Drop a lease (asynchronous: no round trip). The slots must not be read
 * afterwards. A zeroed lease is a no-op. */
int kvt_release(kvt_ns *ns, kvt_lease *lease);

/* Copying get: lease, copy the leading hits into bufs[i], release. Returns
 * the leading hit count. */
int kvt_get(kvt_ns *ns, const kvt_key *keys, size_t n, void *const *bufs);

/* ---- the hot tier (GPU memory) ----------------------------------------- */

/* Kinds of hot pool. */
#define KVT_HOT_EMULATED 1 /* host memory standing in for a GPU (no GPU on tierd's
                              machine): slots are host pointers */
#define KVT_HOT_CUDA 2     /* a cudaMalloc pool: slots are device pointers */

typedef struct kvt_hot_info {
    uint32_t kind;  /* KVT_HOT_* */
    int32_t device; /* CUDA device ordinal of the pool */
    uint64_t bytes; /* pool size */
    void *base;     /* where the pool is mapped in this process (device memory
                       for KVT_HOT_CUDA) */
} kvt_hot_info;

/* Map tierd's hot pool into this process, once per client (later calls
 * only fill info): an emulated pool by mapping its memory, a CUDA pool by
 * CUDA IPC (cudaIpcOpenMemHandle on its device; needs a CUDA build of
 * libkvtier and a process other than tierd). Then reserves and gets may
 * hand out hot slots, so an engine's offload and restore are device to
 * device. info may be NULL. -EOPNOTSUPP: tierd has no hot tier, or it is a
 * CUDA pool and this libkvtier was built without CUDA. */
int kvt_hot_attach(kvt_client *c, kvt_hot_info *info);

/* Flags for kvt_put_reserve_flags. */
#define KVT_RESERVE_HOT 0x1u /* slots in the hot pool (after kvt_hot_attach); -ENOSPC
                                when hot has no room now: reserve in warm instead */

/* kvt_put_reserve with flags. Commit as usual; with KVT_COMMIT_DURABLE, hot
 * blocks are copied down to warm and written from there (the ack waits for
 * both; -EAGAIN when warm has no room for the copy now). */
int kvt_put_reserve_flags(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                          void **slots, unsigned flags);

/* Flags for kvt_get_lease_flags and kvt_ns_set_hot. */
#define KVT_GET_HOT 0x1u     /* blocks in hot are leased where they are: slots[i] points
                                into the hot pool and tiers[i] says KVT_TIER_HOT;
                                the others are in warm (KVT_TIER_WARM) */
#define KVT_GET_PROMOTE 0x2u /* once released, tierd copies the blocks that came from
                                warm or disk up into hot (where hot has room below
                                its high watermark), for the next restore */

/* kvt_get_lease with flags (both need kvt_hot_attach first). tiers (NULL,
 * or room for n) receives where each leased slot is. */
int kvt_get_lease_flags(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                        const void **slots, uint8_t *tiers, kvt_lease *lease);

/* Make this namespace handle use the hot tier (attaching it if needed):
 * KVT_GET_HOT: kvt_offload gathers into hot slots (warm when hot is full)
 * and kvt_restore scatters from hot blocks in place; KVT_GET_PROMOTE:
 * kvt_restore and prefetching lookups ask for the blocks in hot afterwards.
 * Offload and restore use hot only where the cache and the pool are the
 * same kind of memory (a device cache on a stream with a CUDA pool, a host
 * cache with an emulated pool), else warm as before. 0 turns it off. */
int kvt_ns_set_hot(kvt_ns *ns, unsigned flags);

/* ---- offload and restore of an engine's paged cache -------------------- */

/* The layout of an engine's paged KV cache (kernels/kv_layout.h, shipped
 * with this header): layers, element size, block/token/head/dim strides. */
struct kvk_layout;

/* Offload engine blocks block_ids[0..n) of the cache described by layout as
 * the chain keys[0..n) (parent: the key before keys[0], or NULL): reserve,
 * gather each new block's pages from every layer straight into its slot,
 * commit. Keys already stored are skipped. The layout's tier block size
 * must equal the namespace's (KVT_EBLOCKSIZE); the layout and every block id
 * are checked before anything is written (-EINVAL, -ERANGE). stream: NULL
 * for a cache in host memory (gathered by the CPU); a CUDA stream for a
 * device cache needs a CUDA build of libkvtier (-EOPNOTSUPP otherwise).
 * Returns the number of blocks newly stored. */
int kvt_offload(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                const struct kvk_layout *layout, const int64_t *block_ids, void *stream);

/* Restore the leading cached run of keys[0..n) into engine blocks
 * block_ids[0..run): lease, scatter into every layer's pages, release.
 * Checks as kvt_offload, and block_ids[0..n) must be distinct (-EINVAL: two
 * blocks cannot be restored into one engine block); nothing is written on
 * an error. Returns the run's length (0 is not an error). */
int kvt_restore(kvt_ns *ns, const kvt_key *keys, size_t n, const struct kvk_layout *layout,
                const int64_t *block_ids, void *stream);

/* Remove keys[0..n) (walked from the last to the first, so a chain goes
 * leaf-first). A key with resident children or leases stays. Returns the
 * number removed. */
int kvt_remove(kvt_ns *ns, const kvt_key *keys, size_t n);

/* ---- operators: namespaces, miss causes, flush, purge ------------------- */

/* Why keys missed (kvt_ns_info.misses, kvt_key_story.event): */
enum {
    KVT_MISS_NEVER = 0,    /* never stored (or forgotten: the daemon remembers a
                              bounded number of events) */
    KVT_MISS_DROPPED = 1,  /* evicted from memory with no copy on disk */
    KVT_MISS_EVICTED = 2,  /* evicted from the disk to make room */
    KVT_MISS_CHECKSUM = 3, /* read back from disk with wrong bytes: dropped */
    KVT_MISS_IO_ERROR = 4, /* could not be read back from disk: dropped */
    KVT_MISS_REMOVED = 5,  /* removed by a client or purged by an operator */
    KVT_MISS_ABORTED = 6,  /* reserved and never committed */
    KVT_MISS_WRITING = 7,  /* being written by a client, not committed yet */
    KVT_MISS_BROKEN = 8,   /* present, but behind a missing block of its chain */
    KVT_MISS_CAUSES = 9,
};

/* Static name of a miss cause ("never", "dropped", ...), "?" if unknown. */
const char *kvt_miss_cause_name(int cause);

/* A namespace and its traffic since tierd started. */
typedef struct kvt_ns_info {
    uint32_t id;               /* as kvt_admin_purge names it */
    uint32_t block_tokens;
    uint32_t tp_rank, tp_size;
    uint64_t block_bytes;
    char model_id[128], dtype[16], layout[32];
    uint64_t lookups;          /* lookup calls */
    uint64_t lookup_keys;      /* keys asked */
    uint64_t hit_keys;         /* keys in the leading runs found */
    uint64_t hit_tokens;       /* hit_keys x block_tokens: prefill saved */
    uint64_t put_blocks, get_blocks;
    uint64_t bytes_in, bytes_out;
    uint64_t misses[KVT_MISS_CAUSES]; /* missed lookup keys by cause */
    uint64_t evicted_age_ms;   /* summed over DROPPED/EVICTED misses: how long
                                  after its eviction each key was asked for */
    uint64_t deadline_misses;  /* gets answered short at their deadline */
} kvt_ns_info;

/* The namespaces of this client's tenant: out[0..min(cap, count)) filled.
 * Returns the count (which may exceed cap) or an error. */
int kvt_admin_namespaces(kvt_client *c, kvt_ns_info *out, size_t cap);

/* What tierd knows of one key in a namespace. */
typedef struct kvt_key_story {
    uint32_t ns_id;
    uint8_t present;      /* committed; tier says where */
    uint8_t writing;      /* reserved by a client, not committed yet */
    uint8_t tier;         /* KVT_TIER_* when present */
    uint8_t on_disk;      /* present with a durable copy */
    uint8_t chain_ok;     /* present, and the block before it too (if known) */
    uint8_t event;        /* absent: KVT_MISS_* cause (NEVER: nothing known) */
    uint8_t event_tier;   /* the tier it left */
    uint8_t pad;
    uint32_t leases;      /* getters holding it now */
    uint64_t event_age_ms;
} kvt_key_story;

/* One key's story in every namespace of the tenant that knows it (present,
 * being written, or an event remembered): out[0..min(cap, count)).
 * Returns the count (0: unknown everywhere) or an error. */
int kvt_admin_why(kvt_client *c, const kvt_key *key, kvt_key_story *out, size_t cap);

/* Write every block in warm that has no copy on disk to the cold tier and
 * return once they are durable (they stay in warm). Bounded by the
 * client's reply timeout (KVTIER_TIMEOUT_MS). -EOPNOTSUPP without a cold
 * tier. */
int kvt_admin_flush(kvt_client *c);

/* Remove every block of namespace ns_id from every tier and from the disk
 * (after a model's weights changed under the same name, say). All or
 * nothing: -EBUSY while any of its blocks is leased, being written or
 * moving (retry); KVT_ENONS for an unknown namespace. Returns the number
 * of blocks removed. */
int kvt_admin_purge(kvt_client *c, uint32_t ns_id);

/* ---- a model's KV cache, from its config.json ------------------------- */

/* What a model's KV cache costs, read from its Hugging Face config.json:
 * groups of layers (full, sliding-window, MLA, indexer, recurrent state,
 * none), bytes per token, fixed bytes per sequence, and the size of a tier
 * block. kvcalc and a namespace's block_bytes both come from here, so the
 * two never disagree. Needs no daemon. */

/* What a group of layers keeps per sequence. */
enum kvt_layer_kind {
    KVT_LAYER_FULL = 0,    /* full attention: K and V of every token */
    KVT_LAYER_MLA = 1,     /* multi-head latent attention: one latent of
                              kv_lora_rank + qk_rope_head_dim per token, no V */
    KVT_LAYER_INDEX = 2,   /* sparse-attention indexer keys (DeepSeek-V3.2): one
                              key per token in the same layers as the MLA group,
                              stored as vLLM does, in FP8 with a 4-byte scale per
                              128 values whatever the KV dtype (132 B per token
                              and layer for index_head_dim 128) */
    KVT_LAYER_SLIDING = 3, /* sliding window: K and V of the last `window` tokens */
    KVT_LAYER_STATE = 4,   /* linear attention / state space: a fixed recurrent
                              state per sequence, nothing per token */
    KVT_LAYER_NONE = 5,    /* no cache at all (MLP-only layers of a hybrid) */
    KVT_LAYER_KINDS = 6,
};

/* One group of layers of the same kind and shape. */
struct kvt_layer_group {
    enum kvt_layer_kind kind;
    const char *name;     /* static string: "full_attention", "mla", "indexer",
                             "sliding_attention", "gated_deltanet", "mamba2",
                             "mamba1", "mlp" */
    uint32_t layers;      /* layers in the group, >= 1 */
    uint32_t kv_heads;    /* KV heads per layer (1 for MLA and indexer; 0 for
                             STATE and NONE) */
    uint32_t head_dim;    /* elements per head; the latent size for MLA; for the
                             indexer, its bytes: index_head_dim + 4 per 128 */
    uint32_t n_kv;        /* tensors per token: 2 (K and V), 1 (MLA, indexer),
                             0 (STATE, NONE) */
    uint32_t elem_bytes;  /* bytes per K/V element (1, 2 or 4); 1 for the indexer
                             (kvt_model_set_dtype leaves it); 0 for STATE/NONE */
    uint32_t window;      /* SLIDING: window in tokens; else 0 */
    uint64_t state_bytes; /* STATE: estimated bytes per layer and sequence
                             (conv state in the config's dtype + recurrent state
                             in the SSM dtype, vLLM's layout); else 0 */
};

/* Notes on how a config was read (kvt_model_desc.notes), for reports. */
enum {
    KVT_MODEL_NOTE_DTYPE_ASSUMED = 1u << 0, /* config names no dtype: bf16 assumed */
    KVT_MODEL_NOTE_WINDOW_UNUSED = 1u << 1, /* sliding_window given but turned off */
    KVT_MODEL_NOTE_K_EQ_V = 1u << 2,        /* attention_k_eq_v: counted as separate
                                               K and V all the same */
    KVT_MODEL_NOTE_MTP = 1u << 3,           /* extra MTP / next-n layers not counted */
    KVT_MODEL_NOTE_STATE_EST = 1u << 4,     /* state bytes are an estimate */
};

#define KVT_MODEL_GROUPS_MAX KVT_LAYER_KINDS /* at most one group per kind */

/*
 * A model's KV-cache description. Plain data: no pointers to free, copy it
 * freely. Groups come in the order of enum kvt_layer_kind (the per-token
 * ones first). Fill it with kvt_model_parse_json() / kvt_model_parse_file().
 */
struct kvt_model_desc {
    char model_type[48];   /* config's model_type (text tower's if nested), or "" */
    char dtype[16];        /* KV dtype: "bf16", "fp16", "fp32", or an FP8 format:
                              "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz" */
    char config_dtype[24]; /* torch_dtype / dtype as the config spells it, or "" */
    uint32_t elem_bytes;   /* bytes per KV element of dtype */
    uint32_t num_layers;   /* num_hidden_layers */
    uint32_t max_model_len; /* max_position_embeddings, 0 when absent */
    unsigned notes;        /* KVT_MODEL_NOTE_* */
    uint32_t n_groups;     /* groups used, 1..KVT_MODEL_GROUPS_MAX */
    struct kvt_layer_group group[KVT_MODEL_GROUPS_MAX];
};

/*
 * Read a config.json held in memory (text[0..len), need not end in NUL).
 * Fields under "text_config" win over top-level ones. The literal tokens
 * Infinity, -Infinity and NaN outside strings (Python's json writes them)
 * are read as +-1e308 and null. The KV dtype is the config's (bf16 when it
 * names none; see kvt_model_set_dtype() to change it).
 * out:     filled on success; unspecified on failure.
 * err:     on failure, a one-line message naming the field, or the line and
 *          column of a syntax error (NUL-terminated, truncated to err_cap);
 *          may be NULL when err_cap is 0.
 * Returns 0, -EINVAL (bad JSON, missing or invalid field), -ENOMEM.
 */
int kvt_model_parse_json(const char *text, size_t len, struct kvt_model_desc *out, char *err,
                         size_t err_cap);

/*
 * kvt_model_parse_json() on the contents of the file at path. Errors as
 * there, plus a negated errno when the file cannot be read (err says which
 * file and why) and -EFBIG over 16 MiB.
 */
int kvt_model_parse_file(const char *path, struct kvt_model_desc *out, char *err,
                         size_t err_cap);

/* Change the KV dtype: "bf16", "fp16", "fp32" (also "bfloat16", "float16",
 * "float32"), or an FP8 format by vLLM's or torch's name: "fp8_e4m3" (also
 * "float8_e4m3fn", and "fp8", which vLLM takes as E4M3), "fp8_e5m2",
 * "fp8_e4m3fnuz", "fp8_e5m2fnuz" (torch's float8_* spellings too). Each
 * format keeps its own name in m->dtype, so that namespaces of different
 * formats never share blocks. Recurrent state keeps the config's dtype, the
 * indexer its FP8. Returns 0 or -EINVAL for an unknown name (m unchanged). */
int kvt_model_set_dtype(struct kvt_model_desc *m, const char *dtype);

/* Bytes one token adds to one layer group's cache (all its layers): 0 for
 * SLIDING (bounded, see kvt_layer_group_fixed_bytes), STATE and NONE. */
uint64_t kvt_layer_group_token_bytes(const struct kvt_layer_group *g);

/* Fixed bytes per sequence of a group: a full window for SLIDING, the state
 * estimate for STATE, else 0. Saturates at UINT64_MAX. */
uint64_t kvt_layer_group_fixed_bytes(const struct kvt_layer_group *g);

/* Bytes per token of the layers that grow with the sequence (FULL, MLA,
 * INDEX). */
uint64_t kvt_model_token_bytes(const struct kvt_model_desc *m);

/* Fixed bytes per sequence of the sliding layers (each at its full window). */
uint64_t kvt_model_window_bytes(const struct kvt_model_desc *m);

/* Estimated recurrent-state bytes per sequence of the STATE layers. */
uint64_t kvt_model_state_bytes(const struct kvt_model_desc *m);

/* Bytes one sequence of `tokens` tokens holds: growing layers for every
 * token, sliding layers for min(window, tokens), plus the state. Saturates
 * at UINT64_MAX. */
uint64_t kvt_model_seq_bytes(const struct kvt_model_desc *m, uint64_t tokens);

/*
 * Bytes of one tier block of block_tokens tokens for one tensor-parallel
 * rank of tp_size (1: the whole model). The block holds every layer with
 * per-token K/V (FULL, MLA, INDEX and SLIDING: a restored prefix needs the
 * sliding layers too), in the tier block format of kv_layout.h: per layer
 * n_kv * block_tokens * kv_heads * head_dim * elem_bytes. KV heads are
 * split across ranks (replicated when tp_size exceeds them); MLA latents
 * and indexer keys are replicated. STATE layers are not in blocks.
 * Returns 0 when no block is possible: block_tokens or tp_size 0, tp_size
 * not dividing (nor a multiple of) a group's kv_heads, no per-token layers,
 * or overflow.
 */
uint64_t kvt_model_block_bytes(const struct kvt_model_desc *m, uint32_t block_tokens,
                               uint32_t tp_size);

/* Bytes of one stored object of group g for one rank of tp_size: a block
 * of block_tokens tokens of its layers (KV groups, sliding ones included),
 * or one recurrent state of all its layers (STATE: split across ranks when
 * it divides evenly). 0 for NONE groups or when no object is possible. */
uint64_t kvt_layer_group_block_bytes(const struct kvt_layer_group *g, uint32_t block_tokens,
                                     uint32_t tp_size);

/*
 * Fill ns->block_tokens, ns->block_bytes and ns->dtype for a namespace of
 * this model, from block_tokens and ns->tp_size (0 is taken as 1). The
 * other fields (model_id, layout, tp_rank) are the caller's. ns->dtype
 * points into m: m must outlive ns's use. Returns 0, or -EINVAL when
 * kvt_model_block_bytes() gives 0 or the block exceeds KVT_BLOCK_MAX
 * (ns unchanged then).
 */
int kvt_model_fill_ns(const struct kvt_model_desc *m, uint32_t block_tokens, kvt_model *ns);

/* Static name of a kind: "full", "mla", "indexer", "sliding", "state",
 * "none", or "?" for an unknown value. */
const char *kvt_layer_kind_name(enum kvt_layer_kind kind);

/* The group of that kind in m, or NULL. */
const struct kvt_layer_group *kvt_model_group(const struct kvt_model_desc *m,
                                              enum kvt_layer_kind kind);

/* ---- hybrid models: a namespace per layer group -------------------------- */

/* Models whose layers do not all grow alike (sliding windows, linear
 * attention or SSM state, MLA) are stored group by group: each (block,
 * group) is its own object in its own namespace, sized for its group, so
 * groups are stored, evicted and moved independently, and a restore moves
 * only what its prefix needs:
 *   full, MLA, indexer: every block of the prefix;
 *   sliding (window W, block B): the last ceil(W/B) blocks of the prefix;
 *   state (linear attention, SSM): the state after the prefix's last block.
 * A lookup on a hybrid namespace answers the longest prefix restorable
 * under every group's rule at once. */

typedef struct kvt_hybrid_opts {
    uint32_t block_tokens; /* tokens per block: the engine's block size, > 0 */
    uint32_t state_every;  /* state groups keep the state after every k-th block of
                              a chain (and after each offload's last block): prefixes
                              restore to those blocks; 0 is 1 (every block) */
    uint32_t sliding_all;  /* 0 (default): a sliding group keeps only the blocks in
                              the window of each offload's last block, never the
                              ones no prefix ending there needs; 1: every block */
} kvt_hybrid_opts;

/* Open (or join) the namespaces of a model described by desc (from
 * kvt_model_parse_file) for m's model_id, layout, dtype, tensor- and
 * pipeline-parallel rank and variant (at most KVT_VARIANT_MAX - 64 bytes):
 * one per group that holds a cache; m->block_bytes and m->block_tokens are
 * ignored (o says the block size). Each group's namespace also has the
 * group's index in desc and its shape in its identity, so two groups of
 * one kind and size (vLLM's several sliding groups of Gemma 3) never share
 * blocks: every process must list a model's groups in the same order (as
 * kvt_model_parse_file does). The returned handle
 * answers kvt_lookup (the longest restorable prefix), kvt_offload_hybrid,
 * kvt_restore_hybrid, and names its groups' namespaces (kvt_ns_group);
 * plain block calls on it are -EINVAL. -EINVAL when desc has no group with
 * a cache or a group's block is over KVT_BLOCK_MAX. */
int kvt_ns_open_hybrid(kvt_client *c, const kvt_model *m, const struct kvt_model_desc *desc,
                       const kvt_hybrid_opts *o, kvt_ns **out);

/* Groups with stored objects (0 for a plain namespace), the namespace of
 * group g (a plain handle: put, get and remove that group's objects
 * directly), and its description. NULL when g is out of range. */
uint32_t kvt_ns_groups(const kvt_ns *ns);
kvt_ns *kvt_ns_group(kvt_ns *ns, uint32_t g);
const struct kvt_layer_group *kvt_ns_group_desc(const kvt_ns *ns, uint32_t g);

/* The blocks [*first, *last] of chain positions 0..end (a prefix of end+1
 * blocks) that group g needs stored to restore that prefix; the empty
 * range (1, 0) when ns is not hybrid or has no group g. */
void kvt_ns_group_needs(const kvt_ns *ns, uint32_t g, uint32_t end, uint32_t *first,
                        uint32_t *last);

/* Per group of a hybrid namespace, in kvt_ns_group order: where its data
 * is in the engine. KV groups (full, MLA, indexer, sliding): the paged
 * cache of the group's layers and its block ids for keys[0..n). State
 * groups: a pointer per key to the state after that block (offload; NULL
 * where the engine has none), or one buffer for the state after the
 * restored prefix's last block (restore), and the size of those buffers.
 * A state's size depends on the engine (its SSM dtype, its padding), and
 * the group's object size (kvt_ns_block_bytes(kvt_ns_group(ns, g))) is an
 * estimate from the config: when they differ, the call is KVT_EBLOCKSIZE,
 * as for a KV cache of the wrong shape; set the group's state_bytes in the
 * description to the engine's figure before kvt_ns_open_hybrid. */
typedef struct kvt_group_io {
    const struct kvk_layout *layout;
    const int64_t *block_ids;
    const void *const *states; /* offload, state groups */
    void *state_out;           /* restore, state groups */
    uint64_t state_bytes;      /* state groups: bytes of each buffer in states[]
                                  and of state_out, the engine's real size */
} kvt_group_io;

/* Offload the chain keys[0..n) (parent: the key before keys[0], or NULL)
 * group by group under the namespace's policy (sliding: the window of the
 * last block; state: every state_every-th block and the last). The engine
 * blocks must hold the chain's data for every group. Every group's io is
 * checked before any is written: -EINVAL for a missing layout, ids or
 * state buffers or a bad layout, KVT_EBLOCKSIZE for a cache or a state
 * size that is not its group's. Returns the number of objects newly stored
 * (all groups), or an error (nothing of a failed group is committed;
 * groups done before stay). */
int kvt_offload_hybrid(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                       const kvt_group_io *io, void *stream);

/* Restore the longest prefix of keys[0..n) that every group can restore
 * (as kvt_lookup answers): KV groups scatter the blocks their rule needs
 * into io[g].block_ids (positions of keys[]), state groups copy the state
 * after the prefix's last block into io[g].state_out. io is checked as by
 * kvt_offload_hybrid before anything is written. Returns the prefix
 * length in blocks (0: nothing to restore) or an error. */
int kvt_restore_hybrid(kvt_ns *ns, const kvt_key *keys, size_t n, const kvt_group_io *io,
                       void *stream);

/* Bytes kvtier stores for one prefix of `tokens` tokens of this model,
 * offloaded in batches of batch_blocks blocks (0: one batch), under policy o,
 * for one rank of tp_size: the same rules as kvt_offload_hybrid. And the
 * naive figure, every layer with a cache stored as a full-attention layer
 * of the model's attention shape. For sizing and the benchmark. */
uint64_t kvt_hybrid_stored_bytes(const struct kvt_model_desc *d, const kvt_hybrid_opts *o,
                                 uint32_t tp_size, uint64_t tokens, uint64_t batch_blocks);
uint64_t kvt_hybrid_naive_bytes(const struct kvt_model_desc *d, uint32_t block_tokens,
                                uint32_t tp_size, uint64_t tokens);

/* ---- statistics ------------------------------------------------------ */

/* The counters of kvt_stats and kvt_tier_stats are declared once, in
 * kvt_stats_list.h (installed next to this header): KVT_STATS_LIST and
 * KVT_TIER_STATS_LIST, documented there. The structs below, the field table
 * kvt_stats_fields() hands bindings, tierd's reply, the store's own counters,
 * tierctl's table and JSON and tierd's metrics page are made from them. */
#include "kvt_stats_list.h"

#define KVT_STATS_TIER_FIELD_(name, type, metric, help, remote) uint64_t name;
#define KVT_STATS_FIELD_(src, name, type, metric, help) KVT_STATS_FIELD_##src(name)
#define KVT_STATS_FIELD_STORE(name) uint64_t name;
#define KVT_STATS_FIELD_TIERD(name) uint64_t name;
#define KVT_STATS_FIELD_TIERS(name) kvt_tier_stats name[KVT_TIER_COUNT];

/* One tier's counters (kvt_stats.tier[KVT_TIER_*]). */
typedef struct kvt_tier_stats {
    KVT_TIER_STATS_LIST(KVT_STATS_TIER_FIELD_)
} kvt_tier_stats;

/* The daemon's counters, as seen by the calling client's tenant. */
typedef struct kvt_stats {
    uint32_t version;        /* KVT_STATS_VERSION */
    uint32_t clients;        /* connected clients */
    uint32_t namespaces;     /* namespaces open */
    uint32_t pad;
    KVT_STATS_LIST(KVT_STATS_FIELD_)
} kvt_stats;

#define KVT_STATS_VERSION 5

/* Fetch the daemon's counters. */
int kvt_stats_get(kvt_client *c, kvt_stats *out);

/* One field of kvt_stats or kvt_tier_stats, for a binding that lays the
 * structs out at run time from the library it loaded (the Python binding)
 * instead of copying them. */
typedef struct kvt_stats_field {
    const char *name;   /* the field's name in its struct */
    const char *type;   /* "counter" or "gauge" (the list's); "" for kvt_stats's head */
    const char *help;   /* what it counts; "" for the head */
    uint32_t offset;    /* bytes from the start of its struct */
    uint32_t bytes;     /* 4 (uint32_t), 8 (uint64_t), or for kvt_stats.tier the whole
                           array (KVT_TIER_COUNT kvt_tier_stats) */
} kvt_stats_field;

/* Which struct kvt_stats_fields describes. */
enum { KVT_STATS_OF_STATS = 0, KVT_STATS_OF_TIER = 1 };

/* The fields of kvt_stats (of: KVT_STATS_OF_STATS: the head, then
 * KVT_STATS_LIST's, "tier" among them) or of kvt_tier_stats
 * (KVT_STATS_OF_TIER: KVT_TIER_STATS_LIST's), in their order: a static
 * table of *n entries (n may be NULL), and the struct's size in *bytes
 * (may be NULL). NULL, *n and *bytes 0, for another `of`. */
const kvt_stats_field *kvt_stats_fields(int of, size_t *n, size_t *bytes);

/* A description of any error this API returns (static string). */
const char *kvt_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_H */

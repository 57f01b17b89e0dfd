/* SPDX-License-Identifier: MIT */
/*
 * kvt_admin.c - libkvtier's calls for operators and their tools: the
 * daemon's statistics, the namespace list, a key's story, flush and purge,
 * and the names of miss causes and error codes.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

int kvt_stats_get(kvt_client *c, kvt_stats *out)
{
    uint32_t blen;
    int rc;

    if (!c || !out)
        return -EINVAL;
    rc = kvt_rpc(c, KVT_OP_STATS, NULL, 0, &blen, NULL);
    if (rc < 0)
        return rc;
    if (blen != sizeof(*out))
        return kvt_fail(c, KVT_EPROTO);
    memcpy(out, kvt_reply_body(c), sizeof(*out));
    return out->version == KVT_STATS_VERSION ? 0 : KVT_EVERSION;
}

const char *kvt_miss_cause_name(int cause)
{
    static const char *const name[KVT_MISS_CAUSES] = {
        "never", "dropped", "evicted", "checksum", "io_error", "removed", "aborted",
        "writing", "broken_chain",
    };

    return cause >= 0 && cause < KVT_MISS_CAUSES ? name[cause] : "?";
}

/* One request with a small body; the reply's body lands in c->rbuf. */
static int admin_rpc(kvt_client *c, uint16_t op, const void *req, size_t len, uint32_t *blen)
{
    return c ? kvt_rpc(c, op, req, len, blen, NULL) : -EINVAL;
}

int kvt_admin_namespaces(kvt_client *c, kvt_ns_info *out, size_t cap)
{
    /* as many as fit one reply; then ask again from where it stopped */
    struct kvt_wire_ns_list_req req = {
        .start = 1,
        .max = (KVT_WIRE_MSG_MAX - sizeof(struct kvt_wire_ns_list_rep)) / sizeof(kvt_ns_info),
    };
    size_t count = 0;

    if (!c || (cap && !out))
        return -EINVAL;
    do {
        struct kvt_wire_ns_list_rep rep;
        uint32_t blen;
        int rc = admin_rpc(c, KVT_OP_NS_LIST, &req, sizeof(req), &blen);

        if (rc < 0)
            return rc;
        memcpy(&rep, kvt_reply_body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
        if (blen < sizeof(rep) || rep.n > req.max ||
            blen != sizeof(rep) + rep.n * sizeof(kvt_ns_info) ||
            (rep.next && rep.next <= req.start))
            return kvt_fail(c, KVT_EPROTO);
        for (uint32_t i = 0; i < rep.n; i++, count++)
            if (count < cap)
                memcpy(&out[count], kvt_reply_body(c) + sizeof(rep) + i * sizeof(kvt_ns_info),
                       sizeof(kvt_ns_info));
        req.start = rep.next;
    } while (req.start);
    return count > INT32_MAX ? INT32_MAX : (int)count;
}

int kvt_admin_why(kvt_client *c, const kvt_key *key, kvt_key_story *out, size_t cap)
{
    struct kvt_wire_why_rep rep;
    uint32_t blen;
    int rc;

    if (!c || !key || (cap && !out))
        return -EINVAL;
    rc = admin_rpc(c, KVT_OP_WHY, key, KVT_KEY_BYTES, &blen);
    if (rc < 0)
        return rc;
    memcpy(&rep, kvt_reply_body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen < sizeof(rep) || blen != sizeof(rep) + (size_t)rep.n * sizeof(kvt_key_story))
        return kvt_fail(c, KVT_EPROTO);
    for (uint32_t i = 0; i < rep.n && i < cap; i++)
        memcpy(&out[i], kvt_reply_body(c) + sizeof(rep) + i * sizeof(kvt_key_story),
               sizeof(kvt_key_story));
    return (int)rep.n;
}

int kvt_admin_flush(kvt_client *c)
{
    uint32_t blen;
    int rc = admin_rpc(c, KVT_OP_FLUSH, NULL, 0, &blen);

    if (rc == 0 && blen != 0)
        return kvt_fail(c, KVT_EPROTO);
    return rc;
}

int kvt_admin_purge(kvt_client *c, uint32_t ns_id)
{
    struct kvt_wire_purge_req req = { .ns_id = ns_id };
    struct kvt_wire_count_rep rep;
    uint32_t blen;
    int rc = admin_rpc(c, KVT_OP_PURGE, &req, sizeof(req), &blen);

    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return kvt_fail(c, KVT_EPROTO);
    memcpy(&rep, kvt_reply_body(c), sizeof(rep));
    return rep.count > INT32_MAX ? INT32_MAX : (int)rep.count;
}

const char *kvt_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case KVT_EPROTO: return "malformed or truncated message";
    case KVT_EVERSION: return "client and tierd speak different protocol versions";
    case KVT_ENONS: return "unknown namespace";
    case KVT_EBLOCKSIZE: return "block size differs from the namespace's";
    case KVT_EDISCONNECTED: return "tierd closed the connection";
    case -EBUSY: return "busy: too many leases held (by this client, or by its tenant: its "
                        "lease_bytes), or the same kind of request still running: release "
                        "some leases, or wait for it";
    case -EACCES: return "permission denied: the socket's mode or group keeps this user out, "
                         "or no tenant of tierd admits it (its uid/gid)";
    case -EUSERS: return "tierd has as many clients as it takes (--max-clients, or the "
                         "tenant's max_clients)";
    case -ENOSPC: return "no room: the warm pool is full of leased or reserved blocks";
    case -EAGAIN: return "no room yet: the warm pool is full of blocks still being written "
                         "to disk; retry shortly";
    case -ENODATA: return "a block of the batch is not stored (deduplicated against a put "
                          "that was aborted or evicted since): put it again";
    case -E2BIG: return "batch too large (more than KVT_BATCH_MAX keys)";
    case -EFBIG: return "block larger than the warm pool's largest slot";
    case -ENOENT: return "tierd is not running at that socket path (no such file)";
    case -ECONNREFUSED: return "tierd is not running (connection refused)";
    case -ETIMEDOUT: return "tierd did not answer in time";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

/* SPDX-License-Identifier: MIT */
/*
 * kvt_ns.c - libkvtier's namespaces: a model's descriptor checked and sent
 * to tierd (NS_OPEN), with a pipeline stage or an engine's variant folded
 * into its layout; the handle's settings (deadline, hot tier). The handles
 * are the client's, freed by kvt_close.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

static void put_str(char *dst, size_t cap, const char *s)
{
    if (s)
        memcpy(dst, s, strlen(s) + 1 <= cap ? strlen(s) + 1 : 0);
}

/*
 * Design note: tierd keys a namespace by the bytes of its descriptor
 * (tierd/tenant.c) and has no field for a pipeline stage or an engine's
 * variant (KV scales and the like). Rather than widen the daemon's
 * descriptor, the client folds them into it: with a stage (pp_size above
 * 1), a variant, or a '#' in the caller's layout, the layout on the wire
 * is the layout's start (at most LAYOUT_KEPT bytes, cut between UTF-8
 * characters), '#', and hex digits of a SHA-256 over the whole identity
 * (layout, stage, variant) to fill the field: 12 digits (48 bits) at
 * least, the odds of two of a tenant's few namespaces meeting beyond any
 * concern. A descriptor with none of them travels as it always did, so its
 * namespace, and its blocks on disk, stay the same.
 */
#define LAYOUT_HEX_MIN 12
#define LAYOUT_KEPT (KVT_WIRE_LAYOUT_MAX - 2 - LAYOUT_HEX_MIN)

static int wire_layout(const kvt_model *m, uint32_t pp_size, char *out)
{
    static const char tag[] = "kvtier namespace 1"; /* the encoding's version, NUL too */
    static const char digits[] = "0123456789abcdef";
    const char *layout = m->layout ? m->layout : "";
    size_t len = strlen(layout), kept = len < LAYOUT_KEPT ? len : LAYOUT_KEPT, nhex;
    uint8_t stage[16], *p;
    const void *parts[4] = { tag, layout, stage, m->variant };
    size_t lens[4] = { sizeof(tag), len + 1, sizeof(stage), m->variant_len };
    kvt_key h;
    int rc;

    if (pp_size == 1 && m->variant_len == 0 && !strchr(layout, '#')) {
        memcpy(out, layout, len + 1);
        return 0;
    }
    /* the stage's rank and size, then the variant's length (64 bits) */
    p = put_le(stage, m->pp_rank, 4);
    p = put_le(p, pp_size, 4);
    put_le(p, m->variant_len, 8);
    if ((rc = kvt_sha256_parts(parts, lens, m->variant_len ? 4 : 3, &h)) < 0)
        return rc;
    while (kept > 0 && kept < len && ((uint8_t)layout[kept] & 0xc0) == 0x80)
        kept--; /* never half a character: tierctl prints the layout */
    memcpy(out, layout, kept);
    out[kept] = '#';
    nhex = KVT_WIRE_LAYOUT_MAX - 2 - kept;
    for (size_t i = 0; i < nhex; i++)
        out[kept + 1 + i] = digits[(h.b[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    out[kept + 1 + nhex] = '\0';
    return 0;
}

int kvt_ns_open(kvt_client *c, const kvt_model *m, kvt_ns **out)
{
    struct kvt_wire_ns_req req = { 0 };
    struct kvt_wire_ns_rep rep;
    uint32_t blen, pp_size;
    kvt_ns *ns;
    int rc;

    if (!c || !m || !out || !m->model_id || !*m->model_id ||
        strlen(m->model_id) >= KVT_WIRE_MODEL_ID_MAX ||
        (m->dtype && strlen(m->dtype) >= KVT_WIRE_DTYPE_MAX) ||
        (m->layout && strlen(m->layout) >= KVT_WIRE_LAYOUT_MAX) || m->block_tokens == 0 ||
        m->block_bytes == 0 || m->block_bytes > KVT_BLOCK_MAX || m->tp_size == 0 ||
        m->tp_rank >= m->tp_size)
        return -EINVAL;
    pp_size = m->pp_size ? m->pp_size : 1;
    if (m->pp_rank >= pp_size || m->variant_len > KVT_VARIANT_MAX ||
        (m->variant_len && !m->variant))
        return -EINVAL;
    req.block_bytes = m->block_bytes;
    req.block_tokens = m->block_tokens;
    req.tp_rank = m->tp_rank;
    req.tp_size = m->tp_size;
    put_str(req.model_id, sizeof(req.model_id), m->model_id);
    put_str(req.dtype, sizeof(req.dtype), m->dtype);
    if ((rc = wire_layout(m, pp_size, req.layout)) < 0)
        return rc;
    rc = kvt_rpc(c, KVT_OP_NS_OPEN, &req, sizeof(req), &blen, NULL);
    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return kvt_fail(c, KVT_EPROTO);
    memcpy(&rep, kvt_reply_body(c), sizeof(rep));
    ns = calloc(1, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    ns->c = c;
    ns->id = rep.ns_id;
    ns->block_bytes = m->block_bytes;
    ns->next = c->ns;
    c->ns = ns;
    *out = ns;
    return 0;
}

uint64_t kvt_ns_block_bytes(const kvt_ns *ns)
{
    return ns->block_bytes;
}

uint32_t kvt_ns_id(const kvt_ns *ns)
{
    return ns->hy ? 0 : ns->id;
}

kvt_ns *kvt_ns_new_hybrid(kvt_client *c, struct kvt_hybrid *hy)
{
    kvt_ns *ns = calloc(1, sizeof(*ns));

    if (!ns)
        return NULL;
    ns->c = c;
    ns->hy = hy;
    ns->next = c->ns;
    c->ns = ns;
    return ns;
}

struct kvt_hybrid *kvt_ns_hybrid(const kvt_ns *ns)
{
    return ns->hy;
}

void kvt_ns_set_deadline(kvt_ns *ns, uint32_t ms)
{
    ns->deadline_ms = ms;
    if (ns->hy)
        kvt_hybrid_set_deadline(ns->hy, ms);
}

int kvt_ns_set_hot(kvt_ns *ns, unsigned flags)
{
    int rc;

    if (!ns || (flags & ~(KVT_GET_HOT | KVT_GET_PROMOTE)))
        return -EINVAL;
    if (flags && (rc = kvt_hot_attach(ns->c, NULL)) < 0)
        return rc;
    ns->hot = flags;
    return 0;
}

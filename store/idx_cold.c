/* SPDX-License-Identifier: MIT */
/*
 * idx_cold.c - LMDB behind idx_cold.h.
 *
 * Keys are 36 bytes: the namespace id big-endian (so a namespace's records
 * are contiguous in key order), then the 32-byte block key. Values are the
 * 72-byte struct idx_cold_rec. The environment is opened with
 * MDB_NOMETASYNC (never MDB_NOSYNC): a commit syncs its pages before it
 * writes the meta page that makes them current, so a crash can at worst
 * lose the last transaction, never corrupt the file; the meta page reaches
 * the disk with the next sync. put_batch leaves that sync to its caller
 * (tier_cold.c issues it through the ring, or the next batch's commit does
 * it), which saves one of LMDB's two syncs per batch and keeps the other
 * off the path; every other write syncs before it returns (commit_durable).
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "idx_cold.h"

struct idx_cold {
    MDB_env *env;
    MDB_dbi dbi;    /* "blocks": ns + key -> struct idx_cold_rec */
    MDB_dbi ns_dbi; /* "namespaces": descriptor bytes -> uint32_t id */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

#define KEY_BYTES (4 + TIER_KEY_BYTES)

/* LMDB's own codes are positive and outside errno: report them and map them
 * to the closest errno for the caller. */
static int err(struct idx_cold *x, const char *what, int rc)
{
    char msg[256];

    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (x && x->log) {
        snprintf(msg, sizeof(msg), "cold index: %s: %s", what, mdb_strerror(rc));
        x->log(x->log_ctx, msg);
    }
    if (rc == MDB_MAP_FULL)
        return -ENOSPC;
    return rc > 0 && rc < 4096 ? -rc : -EIO;
}

static void make_key(uint8_t out[KEY_BYTES], uint32_t ns, const struct tier_key *key)
{
    out[0] = (uint8_t)(ns >> 24);
    out[1] = (uint8_t)(ns >> 16);
    out[2] = (uint8_t)(ns >> 8);
    out[3] = (uint8_t)ns;
    memcpy(out + 4, key->b, TIER_KEY_BYTES);
}

/* LMDB opens its files by name: the folder and the files in it must be
 * what they seem, not symbolic links planted to make us write elsewhere
 * (-ELOOP). */
static int no_links(const char *dir)
{
    static const char *const files[] = { "data.mdb", "lock.mdb" };
    char path[4096];
    struct stat st;

    if (lstat(dir, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ELOOP;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, files[i]) >= (int)sizeof(path))
            return -ENAMETOOLONG;
        if (lstat(path, &st) < 0) {
            if (errno == ENOENT)
                continue;
            return -errno;
        }
        if (!S_ISREG(st.st_mode))
            return -ELOOP;
    }
    return 0;
}

int idx_cold_open(const char *dir, uint64_t map_bytes, void (*log)(void *, const char *),
                  void *log_ctx, struct idx_cold **out)
{
    struct idx_cold *x = calloc(1, sizeof(*x));
    MDB_txn *txn;
    int rc;

    if (!x)
        return -ENOMEM;
    x->log = log;
    x->log_ctx = log_ctx;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        goto out_free;
    }
    rc = no_links(dir);
    if (rc < 0)
        goto out_free;
    rc = mdb_env_create(&x->env);
    if (rc)
        goto out_lmdb;
    rc = mdb_env_set_mapsize(x->env, map_bytes ? map_bytes : (4ull << 30));
    if (!rc)
        rc = mdb_env_set_maxdbs(x->env, 2);
    if (!rc)
        rc = mdb_env_open(x->env, dir, MDB_NOMETASYNC, 0600);
    if (rc)
        goto out_env;
    rc = mdb_txn_begin(x->env, NULL, 0, &txn);
    if (rc)
        goto out_env;
    rc = mdb_dbi_open(txn, "blocks", MDB_CREATE, &x->dbi);
    if (!rc)
        rc = mdb_dbi_open(txn, "namespaces", MDB_CREATE, &x->ns_dbi);
    if (!rc)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc)
        goto out_env;
    *out = x;
    return 0;
out_env:
    rc = err(x, dir, rc);
    mdb_env_close(x->env);
    goto out_free;
out_lmdb:
    rc = err(x, dir, rc);
out_free:
    free(x);
    return rc;
}

void idx_cold_close(struct idx_cold *x)
{
    if (!x)
        return;
    mdb_env_close(x->env);
    free(x);
}

/* Commit txn and sync the file, so that it is durable on return: for the
 * writes whose callers free space or hand out ids right after. */
static int commit_durable(struct idx_cold *x, MDB_txn *txn)
{
    int rc = mdb_txn_commit(txn);

    if (!rc)
        rc = mdb_env_sync(x->env, 1);
    return rc ? err(x, "commit", rc) : 0;
}

int idx_cold_fd(struct idx_cold *x)
{
    mdb_filehandle_t fd = -1;

    return mdb_env_get_fd(x->env, &fd) ? -1 : fd;
}

int idx_cold_sync(struct idx_cold *x)
{
    int rc = mdb_env_sync(x->env, 1);

    return rc ? err(x, "sync", rc) : 0;
}

int idx_cold_put_batch(struct idx_cold *x, const struct idx_cold_put *p, size_t n,
                       struct idx_cold_rec *old)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(x->env, NULL, 0, &txn);

    if (rc)
        return err(x, "begin", rc);
    for (size_t i = 0; i < n; i++) {
        uint8_t kb[KEY_BYTES];
        MDB_val k = { KEY_BYTES, kb }, v;

        make_key(kb, p[i].ns, &p[i].key);
        if (old) {
            memset(&old[i], 0, sizeof(old[i]));
            rc = mdb_get(txn, x->dbi, &k, &v);
            if (rc == 0 && v.mv_size == sizeof(old[i]))
                memcpy(&old[i], v.mv_data, sizeof(old[i]));
            else if (rc && rc != MDB_NOTFOUND)
                goto out_abort;
        }
        v = (MDB_val){ sizeof(p[i].rec), (void *)&p[i].rec };
        rc = mdb_put(txn, x->dbi, &k, &v, 0);
        if (rc)
            goto out_abort;
    }
    /* its pages are synced, its meta page only written (MDB_NOMETASYNC):
     * durable at the next sync, which also covers every earlier commit */
    rc = mdb_txn_commit(txn);
    return rc ? err(x, "commit", rc) : 0;
out_abort:
    mdb_txn_abort(txn);
    return err(x, "put", rc);
}

int idx_cold_del(struct idx_cold *x, uint32_t ns, const struct tier_key *key)
{
    uint8_t kb[KEY_BYTES];
    MDB_val k = { KEY_BYTES, kb };
    MDB_txn *txn;
    int rc = mdb_txn_begin(x->env, NULL, 0, &txn);

    if (rc)
        return err(x, "begin", rc);
    make_key(kb, ns, key);
    rc = mdb_del(txn, x->dbi, &k, NULL);
    if (rc) {
        mdb_txn_abort(txn);
        return err(x, "delete", rc);
    }
    return commit_durable(x, txn);
}

/* A transaction (flags: mdb_txn_begin's) and a cursor on the records in it;
 * the error already said when either fails. */
static int txn_cursor(struct idx_cold *x, unsigned flags, MDB_txn **txn, MDB_cursor **cur)
{
    int rc = mdb_txn_begin(x->env, NULL, flags, txn);

    if (rc)
        return err(x, "begin", rc);
    rc = mdb_cursor_open(*txn, x->dbi, cur);
    if (rc) {
        mdb_txn_abort(*txn);
        return err(x, "cursor", rc);
    }
    return 0;
}

int idx_cold_del_ns(struct idx_cold *x, uint32_t ns,
                    void (*fn)(void *ctx, const struct idx_cold_rec *rec), void *ctx)
{
    static const struct tier_key zero;
    uint8_t kb[KEY_BYTES];
    MDB_val k = { KEY_BYTES, kb }, v;
    MDB_cursor *cur;
    MDB_txn *txn;
    int rc = txn_cursor(x, 0, &txn, &cur), n = 0;

    if (rc)
        return rc;
    /* a namespace's records are one run of keys: its id comes first */
    make_key(kb, ns, &zero);
    /* after a delete the cursor sits on the next record: MDB_NEXT returns it */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx_cold_rec rec;

        if (k.mv_size != KEY_BYTES || memcmp(k.mv_data, kb, 4) != 0)
            break;
        if (v.mv_size == sizeof(rec)) {
            memcpy(&rec, v.mv_data, sizeof(rec));
            fn(ctx, &rec);
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc)
            break;
        n++;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return err(x, "delete", rc);
    }
    rc = commit_durable(x, txn);
    return rc ? rc : n;
}

int idx_cold_get(struct idx_cold *x, uint32_t ns, const struct tier_key *key,
                 struct idx_cold_rec *rec)
{
    uint8_t kb[KEY_BYTES];
    MDB_val k = { KEY_BYTES, kb }, v;
    MDB_txn *txn;
    int rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &txn);

    if (rc)
        return err(x, "begin", rc);
    make_key(kb, ns, key);
    rc = mdb_get(txn, x->dbi, &k, &v);
    if (rc == 0 && v.mv_size != sizeof(*rec))
        rc = MDB_CORRUPTED;
    if (rc == 0)
        memcpy(rec, v.mv_data, sizeof(*rec));
    mdb_txn_abort(txn);
    return rc ? err(x, "get", rc) : 0;
}

int idx_cold_scan(struct idx_cold *x,
                  int (*fn)(void *ctx, uint32_t ns, const struct tier_key *key,
                            const struct idx_cold_rec *rec),
                  void *ctx)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = txn_cursor(x, MDB_RDONLY, &txn, &cur), stop = 0;

    if (rc)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const uint8_t *kb = k.mv_data;
        struct tier_key key;
        struct idx_cold_rec rec;

        if (k.mv_size != KEY_BYTES || v.mv_size != sizeof(rec))
            continue; /* not ours: skipped rather than misread */
        memcpy(key.b, kb + 4, TIER_KEY_BYTES);
        memcpy(&rec, v.mv_data, sizeof(rec));
        stop = fn(ctx, (uint32_t)kb[0] << 24 | (uint32_t)kb[1] << 16 | (uint32_t)kb[2] << 8 |
                           kb[3],
                  &key, &rec);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND ? 0 : err(x, "scan", rc);
}

int idx_cold_ns_id(struct idx_cold *x, const void *desc, size_t len, uint32_t *id)
{
    MDB_val k = { len, (void *)desc }, v;
    MDB_txn *txn;
    MDB_stat st;
    int rc;

    if (len == 0 || len > 511) /* LMDB's default key size limit */
        return -EINVAL;
    rc = mdb_txn_begin(x->env, NULL, 0, &txn);
    if (rc)
        return err(x, "begin", rc);
    rc = mdb_get(txn, x->ns_dbi, &k, &v);
    if (rc == 0 && v.mv_size == sizeof(*id)) {
        memcpy(id, v.mv_data, sizeof(*id));
        mdb_txn_abort(txn);
        return 0;
    }
    if (rc != MDB_NOTFOUND && rc != 0)
        goto out_abort;
    /* ids are dense and never reused: the next is the count plus one */
    rc = mdb_stat(txn, x->ns_dbi, &st);
    if (rc)
        goto out_abort;
    *id = (uint32_t)st.ms_entries + 1;
    v = (MDB_val){ sizeof(*id), id };
    rc = mdb_put(txn, x->ns_dbi, &k, &v, MDB_NOOVERWRITE);
    if (rc)
        goto out_abort;
    return commit_durable(x, txn);
out_abort:
    mdb_txn_abort(txn);
    return err(x, "namespace", rc);
}

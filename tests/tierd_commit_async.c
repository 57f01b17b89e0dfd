/* SPDX-License-Identifier: MIT */
/*
 * tierd_commit_async.c - durable commits started and waited for apart
 * (kvt_put_commit_start / kvt_put_commit_wait) through tierd: KVT_COMMITS_MAX
 * waiting at once while the client reserves and fills the next batch, each
 * answered for its own batch (in any order, errors included), the limit
 * refused at once, and every block acknowledged back after tierd is killed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "t.h"

#define BLK (1u << 20)
#define N 8

static uint8_t buf[N][BLK];

/* Reserve the N keys of chain ch and fill them (payload seeds ch*100+i). */
static void reserve_fill(kvt_ns *ns, int ch, kvt_key *k)
{
    void *slots[N];

    t_keys(k, N, 4400 + (uint64_t)ch);
    cr_assert_eq(kvt_put_reserve(ns, NULL, k, N, slots), N, "reserve of chain %d", ch);
    for (int i = 0; i < N; i++) {
        cr_assert_not_null(slots[i]);
        t_fill(slots[i], BLK, (uint64_t)ch * 100 + (uint64_t)i);
    }
}

/* Get chain ch, every byte checked: the hits. */
static int get_chain(kvt_ns *ns, int ch)
{
    void *dst[N];

    for (int i = 0; i < N; i++)
        dst[i] = buf[i];
    return t_get_seeded(ns, 4400 + (uint64_t)ch, N, BLK, (uint64_t)ch * 100, dst);
}

static const char *const args[] = { "--warm-bytes", "64M", "--cold-bytes", "128M", NULL };

#define M KVT_COMMITS_MAX

Test(tierd_commit_async, started_commits_overlap_and_each_answers_for_its_batch)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[M + 1][N];
    kvt_commit cm[M + 1];

    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    /* a call answered at once while commits wait: its own reply, even when
     * a commit's comes first */
    for (int b = 0; b < M; b++) {
        reserve_fill(ns, b, k[b]);
        cr_assert_eq(kvt_put_commit_start(ns, k[b], N, KVT_COMMIT_DURABLE, &cm[b]), 0,
                     "commit %d of the %d kept", b, M);
        cr_assert_neq(cm[b].id, 0);
    }
    reserve_fill(ns, M, k[M]);
    cr_assert_eq(kvt_put_commit_start(ns, k[M], N, KVT_COMMIT_DURABLE, &cm[M]), -EBUSY,
                 "one more started commit is refused: %d are kept", M);
    cr_assert_eq(cm[M].id, 0);
    /* waited for out of order */
    cr_assert_eq(kvt_put_commit_wait(ns, &cm[1]), N, "the second commit");
    cr_assert_eq(cm[1].id, 0, "a commit waited for is emptied");
    cr_assert_eq(kvt_put_commit_start(ns, k[M], N, KVT_COMMIT_DURABLE, &cm[M]), 0,
                 "a slot is free again");
    cr_assert_eq(kvt_put_commit_wait(ns, &cm[0]), N, "the first commit");
    cr_assert_eq(kvt_put_commit_wait(ns, &cm[0]), -EINVAL, "waited for twice");
    for (int b = M; b >= 2; b--)
        cr_assert_eq(kvt_put_commit_wait(ns, &cm[b]), N, "commit %d", b);
    for (int ch = 0; ch <= M; ch++)
        cr_assert_eq(get_chain(ns, ch), N, "chain %d before the kill", ch);
    kvt_close(c);
    /* acknowledged durable: back after SIGKILL, from disk */
    cr_assert_eq(t_tierd_kill(&d, SIGKILL), 128 + SIGKILL);
    t_tierd_restart(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    for (int ch = 0; ch <= M; ch++)
        cr_assert_eq(get_chain(ns, ch), N, "chain %d after the kill", ch);
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_commit_async, a_started_commits_error_is_its_own)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[N], never[N];
    kvt_commit ok, bad;
    kvt_stats st;

    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(never, N, 4999);
    reserve_fill(ns, 0, k);
    cr_assert_eq(kvt_put_commit_start(ns, k, N, KVT_COMMIT_DURABLE, &ok), 0);
    /* keys never put: nothing to make durable */
    cr_assert_eq(kvt_put_commit_start(ns, never, N, KVT_COMMIT_DURABLE, &bad), 0);
    cr_assert_eq(kvt_stats_get(c, &st), 0, "a call between starts and waits");
    cr_assert_eq(kvt_put_commit_wait(ns, &bad), -ENODATA);
    cr_assert_eq(kvt_put_commit_wait(ns, &ok), N);
    cr_assert_eq(kvt_put_commit_start(ns, k, N, KVT_COMMIT_DURABLE | 0x100u, &ok), -EINVAL);
    cr_assert_eq(kvt_put_commit_wait(ns, &ok), -EINVAL, "a refused start leaves nothing");
    cr_assert_eq(get_chain(ns, 0), N);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* Request ids start alike in every client: a handle waited on another
 * client names none of its commits (it took the other's answer, and left
 * its own client a slot short for good). */
Test(tierd_commit_async, a_handle_waited_on_another_client_is_refused)
{
    struct t_tierd d;
    kvt_client *a, *b;
    kvt_ns *na, *nb;
    kvt_key ka[N], kb[N];
    kvt_commit ca, cb;
    void *slots[N];

    t_tierd_start(&d, args);
    a = t_connect(&d);
    b = t_connect(&d);
    na = t_ns(a, BLK);
    nb = t_ns(b, BLK);
    reserve_fill(na, 0, ka);
    t_keys(kb, N, 4500);
    cr_assert_eq(kvt_put_reserve(nb, NULL, kb, N, slots), N);
    cr_assert_eq(kvt_put_commit_start(na, ka, N, KVT_COMMIT_DURABLE, &ca), 0);
    cr_assert_eq(kvt_put_commit_start(nb, kb, N, KVT_COMMIT_DURABLE, &cb), 0);
    cr_assert_eq(ca.id, cb.id, "the ids this test is about coincide");
    cr_assert_eq(kvt_put_commit_wait(nb, &ca), -EINVAL, "b waited on a's handle");
    cr_assert_neq(ca.id, 0, "a refused wait leaves the handle");
    cr_assert_eq(kvt_put_commit_wait(nb, &cb), N);
    cr_assert_eq(kvt_put_commit_wait(na, &ca), N);
    kvt_close(a);
    kvt_close(b);
    t_tierd_stop(&d);
}

/* SPDX-License-Identifier: MIT */
/*
 * sess_int.h - what tierd's session files share, never included outside
 * them: the session and what it holds (leases, pins, reservations, its one
 * pending request), and the calls each of the files offers the others.
 * sess.c owns the session's life, the framing, the replies and the timer;
 * sess_data.c the data operations and the pending request (a get or a
 * lookup is the store's to drive: sess_data.c submits it and replies);
 * sess_pin.c the pins; sess_admin.c the handshake and the operators'
 * requests.
 */
#ifndef SESS_INT_H
#define SESS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvt_wire.h"

struct tierd;
struct tenant;
struct tier_key;
struct tier_ns;
struct tier_req;

struct lease {
    uint64_t id;   /* as told to the client: from the session's random start */
    uint32_t n;    /* blocks */
    uint32_t *ids; /* store entry ids, owned */
};

/* A pinning lookup's hold on blocks (tier_pin), for a get by any session of
 * the tenant: an engine's scheduler looks up and pins, its workers load. */
struct pin {
    uint64_t id;        /* the owner's session id << 32 | a count: found from the id */
    uint64_t expire_ms; /* CLOCK_MONOTONIC ms */
    uint64_t bytes;     /* counted in its tenant's pin budget */
    uint32_t n, cap;
    uint32_t *ids;      /* store entry ids, owned */
};

/* A keys request (LOOKUP, PUT_*, GET, REMOVE), decoded and checked by
 * sess_data.c's parse_keys; keys and parent point into the message. */
struct kreq {
    uint32_t ns_id;
    struct tier_ns *ns;            /* the store's namespace of ns_id (its block size the
                                      request's: parse_keys checked) */
    uint32_t n;
    uint32_t flags;
    uint32_t deadline_ms;
    const struct tier_key *parent; /* NULL: none */
    uint64_t pin_id;               /* KVT_WIRE_KF_PIN: the pin to extend (0: a new one) */
    const struct tier_key *keys;
};

/* What a session's request waits for. A client has at most one get or
 * lookup outstanding (s->pend, s->req) and up to KVT_WIRE_COMMITS_MAX
 * durable commits beside it (s->commit[]: an engine fills its next batch
 * while the last one is written); each is a request in the store, which
 * drives its waits for the remote tier and the disk and calls back once
 * (sess_data.c's req_done). */
enum sess_pend_kind {
    SESS_PEND_NONE, /* nothing waits */
    SESS_PEND_REQ,  /* the store has the request */
};

/* The pending request, for its reply. */
struct pending {
    enum sess_pend_kind kind;
    struct kvt_wire_hdr hdr; /* the request being answered */
    uint64_t t0_ns;          /* when the request came (metrics_req_start; 0: none) */
    struct kreq req;         /* as parsed; its keys come back with the answer */
};

/* A durable commit's slot: its pending reply and its store request. */
struct commit_slot {
    struct sess *s;
    struct pending pend;
    struct tier_req *req;      /* NULL until the slot's first commit */
};

struct sess {
    struct tierd *d;
    struct tenant *t;          /* by SO_PEERCRED; NULL: refused at its first message */
    int fd;
    uint32_t id;               /* owner id in the store: random, unique among sessions */
    uid_t uid;                 /* SO_PEERCRED at accept */
    pid_t pid;
    bool hello;                /* HELLO done: the pool is mapped */
    bool hot;                  /* HOT_ATTACH done: it may be handed hot slots */
    int refuse;                /* != 0: over a limit; its first message is answered
                                  with this error, then it is closed when the peer
                                  closes or at hs_deadline_ms (not counted in
                                  d->clients) */
    bool told;                 /* refused, and the error sent */
    uint32_t *resv;            /* ids reserved; pruned after commit/abort */
    size_t nresv, resv_cap;
    size_t resv_live;          /* ids left after the last prune (>= 32) */
    struct lease *lease;       /* outstanding leases; linear search, few per client */
    size_t nlease, lease_cap;
    struct pin *pins;          /* pinning lookups' holds; linear search, few per client */
    size_t npin, pin_cap;
    uint64_t lease_seq;        /* lease ids, from a random start: they tell nothing
                                  of other sessions, and name no lease after a
                                  restart */
    uint64_t hs_deadline_ms;   /* closed if no HELLO came by then (0: HELLO done) */
    uint32_t pin_seq;          /* from a random start: a pin id from before a
                                  restart names no pin of the new tierd */
    struct pending pend;       /* a get or lookup waiting for the store */
    struct tier_req *req;      /* gets and lookups, submitted to the store (NULL
                                  until the first) */
    struct commit_slot commit[KVT_WIRE_COMMITS_MAX]; /* durable commits waiting */
    struct pending *armed;     /* the request the message being handled left
                                  waiting (NULL: none), for its latency */
    bool submitting;           /* inside tier_req_submit: a reply that fails there ... */
    int submit_rc;             /* ... is returned from it, as any other request's */
    bool flush_wait;           /* a FLUSH waits for the store's flush to end */
    struct kvt_wire_hdr flush_hdr;
    uint64_t flush_t0;         /* its arrival, for the latency metrics */
    struct sess *prev, *next;  /* all sessions (for shutdown); next stays as it was
                                  when the session closed */
    bool closed;               /* sess_close() done: nothing more for it */
    struct sess *dead_next;    /* closed sessions, until sess_reap() */
};

/* Every open session, newest first; a walk that may close sessions takes
 * next before each step (a closed session's next stays valid). */
extern struct sess *sess_all;

/* ---- sess.c ------------------------------------------------------------ */

/* Close s: give back everything it holds in the store, free it at the next
 * sess_reap(). Re-entrant; a closed session stays valid memory. */
void sess_close(struct sess *s);

/* Send one reply: header + up to two body parts, and pass_fd (>= 0) with
 * it. -1: the client does not read its replies (drop it). */
int sess_reply(struct sess *s, const struct kvt_wire_hdr *req, int status, const void *a,
               size_t alen, const void *b, size_t blen, int pass_fd);

/* An error reply; KVT_EPROTO is counted as a malformed message. */
int sess_reply_err(struct sess *s, const struct kvt_wire_hdr *req, int status);

/* Count a malformed message, for the operator and for s's tenant. */
void sess_count_proto_error(struct sess *s);

/* Have the timer fire by at_ms (CLOCK_MONOTONIC ms) at the latest. */
void sess_arm_timer(uint64_t at_ms);

/* The earlier of two deadlines, 0 meaning none. */
static inline uint64_t sess_earliest(uint64_t a, uint64_t b)
{
    return !a || (b && b < a) ? b : a;
}

/* ---- sess_data.c: lookups, puts, gets, leases, pins, remove ----------- */

/* LOOKUP, PUT_RESERVE, PUT_COMMIT, PUT_ABORT, GET, REMOVE. */
int sess_op_keys(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
int sess_op_release(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);

/* Release s's pins that expired (sess_pin_expire) and answer its pending
 * request if its deadline passed, at now; returns next lowered to s's next deadline. */
uint64_t sess_data_expire(struct sess *s, uint64_t now, uint64_t next);

/* Give back everything s holds in the store (its pending get's leases, its
 * leases, pins and reservations) and stop its pending request; returns the
 * blocks given back. */
size_t sess_data_reclaim(struct sess *s);

/* Free what sess_data.c allocated for s (after sess_data_reclaim). */
void sess_data_free(struct sess *s);

/* ---- sess_pin.c: pinning lookups' holds ------------------------------ */

/* Pin the first `local` keys of k (a pinning lookup), as far as the
 * tenant's pin budget goes: a new pin, or k->pin_id extended (a longer
 * chain's next batch), held k->deadline_ms from now. 0 and *out, or the
 * error. */
int sess_pin_run(struct sess *s, const struct kreq *k, uint32_t local,
                 struct kvt_wire_pin_rep *out);

/* UNPIN: a pin of any session of the tenant, by id. */
int sess_op_unpin(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);

/* Release s's pins that expired at now; returns next lowered to the
 * earliest expiry left. */
uint64_t sess_pin_expire(struct sess *s, uint64_t now, uint64_t next);

/* Give back s's pins (its session goes); returns the blocks they held. */
size_t sess_pin_reclaim(struct sess *s);

/* Free s's pins (after sess_pin_reclaim). */
void sess_pin_free(struct sess *s);

/* ---- sess_admin.c: the handshake, namespaces, operators' requests ----- */

int sess_op_hello(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
int sess_op_hot_attach(struct sess *s, const struct kvt_wire_hdr *h);
int sess_op_ns_open(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
int sess_op_ns_list(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
int sess_op_stats(struct sess *s, const struct kvt_wire_hdr *h);
int sess_op_why(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
int sess_op_flush(struct sess *s, const struct kvt_wire_hdr *h);
int sess_op_purge(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);

#endif /* SESS_INT_H */

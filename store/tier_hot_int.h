/* SPDX-License-Identifier: MIT */
/*
 * tier_hot_int.h - what tier_hot.c shares with its CUDA backend
 * (tier_hot_cuda.c): the completion queue and the backend's entry points.
 * Never installed; not part of the store's interface.
 */
#ifndef TIER_HOT_INT_H
#define TIER_HOT_INT_H

#include <pthread.h>

#include "tier_hot.h"

/* One copy: queued at submit, handed back through the completion queue. */
struct hot_op {
    tier_hot_cb cb;
    void *ctx;
    int rc;
    struct hot_done *q;   /* where its completion goes */
    struct hot_op *next;  /* in the completion queue */
};

/* Completions, pushed from any thread (the CUDA callback thread), popped by
 * tier_hot_poll on the owner's thread. */
struct hot_done {
    pthread_mutex_t lock;
    struct hot_op *head, **tail; /* FIFO under lock */
    int efd;                     /* written once per push */
};

void hot_done_push(struct hot_done *q, struct hot_op *op, int rc);

#ifdef KVT_HAVE_CUDA
/* The CUDA backend (tier_hot_cuda.c). ctx is its own state. */
int hot_cuda_open(int device, uint64_t bytes, struct hot_done *q, void **ctx, char *why,
                  size_t why_len);
void hot_cuda_close(void *ctx);
int hot_cuda_register(void *ctx, void *base, uint64_t len);
int hot_cuda_export(void *ctx, int *device, uint8_t *ipc);
int hot_cuda_copy(void *ctx, bool to_device, uint64_t dev_off, void *host, uint64_t len,
                  struct hot_op *op);
#endif

#endif /* TIER_HOT_INT_H */

/* SPDX-License-Identifier: MIT */
/*
 * tier_hot.c - the hot tier's device front-end and its emulated backend.
 *
 * The emulated device is anonymous host memory; a copy is done at submit
 * (a memcpy) but its completion is delivered like a real device's, through
 * the completion queue and the eventfd, so the code above sees the same
 * asynchronous behaviour it will see on a GPU. The CUDA backend
 * (tier_hot_cuda.c) fills the same queue from CUDA's callback thread.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvt_common.h"
#include "tier_hot_int.h"
#include "tier_ram.h"

struct tier_hot {
    enum tier_hot_kind kind;
    uint64_t bytes;
    uint8_t *emu;          /* emulated device memory */
    int emu_fd;            /* its memfd, which clients map to share it (-1: none) */
    void *cuda;            /* CUDA backend state */
    struct hot_done done;
    unsigned inflight;
};

void hot_done_push(struct hot_done *q, struct hot_op *op, int rc)
{
    uint64_t one = 1;

    op->rc = rc;
    op->next = NULL;
    pthread_mutex_lock(&q->lock);
    *q->tail = op;
    q->tail = &op->next;
    pthread_mutex_unlock(&q->lock);
    /* a full eventfd counter is impossible here (2^64 - 2 pushes) */
    if (write(q->efd, &one, sizeof(one)) < 0)
        return;
}

/* A line to the caller's log (NULL: none), as every store module reports. */
#define say(cfg, ...) cmn_logf((cfg)->log, (cfg)->log_ctx, __VA_ARGS__)

int tier_hot_open(const struct tier_hot_cfg *cfg, struct tier_hot **out)
{
    struct tier_hot *h;
    int rc;

    if (cfg->bytes == 0)
        return -EINVAL;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->bytes = (cfg->bytes + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    pthread_mutex_init(&h->done.lock, NULL);
    h->done.tail = &h->done.head;
    h->emu_fd = -1;
    h->done.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->done.efd < 0) {
        rc = -errno;
        goto out_free;
    }
    if (cfg->kind != TIER_HOT_EMU) {
#ifdef KVT_HAVE_CUDA
        char why[200] = "";

        rc = hot_cuda_open(cfg->device, h->bytes, &h->done, &h->cuda, why, sizeof(why));
        if (rc == 0) {
            h->kind = TIER_HOT_CUDA;
            *out = h;
            return 0;
        }
        say(cfg, "hot tier: no CUDA device (%s)%s", why,
            cfg->kind == TIER_HOT_AUTO ? "; emulating it in host memory" : "");
#else
        rc = -ENODEV;
        if (cfg->kind == TIER_HOT_AUTO)
            say(cfg, "hot tier: built without CUDA; emulating it in host memory");
#endif
        if (cfg->kind == TIER_HOT_CUDA)
            goto out_efd;
    }
    h->kind = TIER_HOT_EMU;
    /* a memfd, not anonymous memory: clients map it as they would open a
     * CUDA pool's IPC handle, so hot slots are shared in the emulation too */
    h->emu_fd = tier_ram_memfd("kvtier-hot", false, h->bytes);
    if (h->emu_fd < 0) {
        rc = h->emu_fd;
        goto out_memfd;
    }
    h->emu = mmap(NULL, h->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, h->emu_fd, 0);
    if (h->emu == MAP_FAILED) {
        rc = -errno;
        goto out_memfd;
    }
    *out = h;
    return 0;
out_memfd:
    if (h->emu_fd >= 0)
        close(h->emu_fd);
out_efd:
    close(h->done.efd);
out_free:
    pthread_mutex_destroy(&h->done.lock);
    free(h);
    return rc;
}

void tier_hot_close(struct tier_hot *h)
{
    if (!h)
        return;
    while (h->inflight)
        if (tier_hot_poll(h, true) < 0)
            break;
#ifdef KVT_HAVE_CUDA
    if (h->cuda)
        hot_cuda_close(h->cuda);
#endif
    if (h->emu)
        munmap(h->emu, h->bytes);
    if (h->emu_fd >= 0)
        close(h->emu_fd);
    close(h->done.efd);
    pthread_mutex_destroy(&h->done.lock);
    free(h);
}

enum tier_hot_kind tier_hot_kind(const struct tier_hot *h) { return h->kind; }
uint64_t tier_hot_bytes(const struct tier_hot *h) { return h->bytes; }
int tier_hot_event_fd(const struct tier_hot *h) { return h->done.efd; }
unsigned tier_hot_inflight(const struct tier_hot *h) { return h->inflight; }
void *tier_hot_emu_base(const struct tier_hot *h) { return h->emu; }

int tier_hot_export(const struct tier_hot *h, struct tier_hot_export *out)
{
    *out = (struct tier_hot_export){ .kind = h->kind, .bytes = h->bytes, .fd = h->emu_fd };
#ifdef KVT_HAVE_CUDA
    if (h->cuda)
        return hot_cuda_export(h->cuda, &out->device, out->ipc);
#endif
    return 0;
}

int tier_hot_register_host(struct tier_hot *h, void *base, uint64_t len)
{
#ifdef KVT_HAVE_CUDA
    if (h->cuda)
        return hot_cuda_register(h->cuda, base, len);
#endif
    (void)h;
    (void)base;
    (void)len;
    return 0;
}

static int copy(struct tier_hot *h, bool to_device, uint64_t dev_off, void *host, uint64_t len,
                tier_hot_cb cb, void *ctx)
{
    struct hot_op *op;
    int rc = 0;

    if (!host || len == 0 || dev_off > h->bytes || len > h->bytes - dev_off)
        return -EINVAL;
    op = malloc(sizeof(*op));
    if (!op)
        return -ENOMEM;
    *op = (struct hot_op){ .cb = cb, .ctx = ctx };
#ifdef KVT_HAVE_CUDA
    if (h->cuda) {
        rc = hot_cuda_copy(h->cuda, to_device, dev_off, host, len, op);
        if (rc < 0) {
            free(op);
            return rc;
        }
        h->inflight++;
        return 0;
    }
#endif
    if (to_device)
        memcpy(h->emu + dev_off, host, len);
    else
        memcpy(host, h->emu + dev_off, len);
    h->inflight++;
    hot_done_push(&h->done, op, rc);
    return 0;
}

int tier_hot_copy_in(struct tier_hot *h, uint64_t dev_off, const void *host, uint64_t len,
                     tier_hot_cb cb, void *ctx)
{
    return copy(h, true, dev_off, (void *)host, len, cb, ctx);
}

int tier_hot_copy_out(struct tier_hot *h, void *host, uint64_t dev_off, uint64_t len,
                      tier_hot_cb cb, void *ctx)
{
    return copy(h, false, dev_off, host, len, cb, ctx);
}

int tier_hot_poll(struct tier_hot *h, bool wait)
{
    struct hot_op *list;
    uint64_t n;
    int ran = 0;

    if (wait && h->inflight) {
        struct pollfd p = { .fd = h->done.efd, .events = POLLIN };

        while (poll(&p, 1, -1) < 0)
            if (errno != EINTR)
                return -errno;
    }
    if (read(h->done.efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        return -errno;
    pthread_mutex_lock(&h->done.lock);
    list = h->done.head;
    h->done.head = NULL;
    h->done.tail = &h->done.head;
    pthread_mutex_unlock(&h->done.lock);
    while (list) {
        struct hot_op *op = list;

        list = op->next;
        h->inflight--;
        if (op->cb)
            op->cb(op->ctx, op->rc);
        free(op);
        ran++;
    }
    return ran;
}

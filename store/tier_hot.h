/* SPDX-License-Identifier: MIT */
/*
 * tier_hot.h - the hot tier's device: a pool of device memory and
 * asynchronous copies between it and host memory (the warm pool), with
 * completions delivered through an eventfd like the cold tier's.
 *
 * Two backends behind this one interface: the emulated one (host memory;
 * used wherever there is no GPU, so every path above it is tested) and the
 * CUDA one (a cudaMalloc pool, cudaMemcpyAsync on its own stream, the warm
 * pool registered with cudaHostRegister so copies are DMA), built when the
 * CUDA toolkit is present (KVT_HAVE_CUDA). Which one runs is chosen at open.
 * Not thread-safe: one caller (tierd's loop); the CUDA backend's own
 * callback thread only queues completions.
 */
#ifndef TIER_HOT_H
#define TIER_HOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tier_hot_kind {
    TIER_HOT_AUTO = 0, /* CUDA when built in and a device answers, else emulated */
    TIER_HOT_EMU = 1,
    TIER_HOT_CUDA = 2,
};

struct tier_hot_cfg {
    enum tier_hot_kind kind;
    uint64_t bytes;   /* device pool size (rounded up to 2 MiB) */
    int device;       /* CUDA device ordinal */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

/* Completion of a copy: rc 0 or a negative errno (-EIO for a device error). */
typedef void (*tier_hot_cb)(void *ctx, int rc);

struct tier_hot;

/* Open the device pool. TIER_HOT_CUDA fails with -ENODEV when CUDA is not
 * built in or no device answers; TIER_HOT_AUTO then logs and emulates. */
int tier_hot_open(const struct tier_hot_cfg *cfg, struct tier_hot **out);
/* Wait for every copy in flight (callbacks run), free the pool. NULL ok. */
void tier_hot_close(struct tier_hot *h);

enum tier_hot_kind tier_hot_kind(const struct tier_hot *h); /* EMU or CUDA */
uint64_t tier_hot_bytes(const struct tier_hot *h);
int tier_hot_event_fd(const struct tier_hot *h); /* readable: completions wait */

/* Make host memory [base, base+len) a fast copy source/target (pinned for
 * DMA with CUDA; a no-op emulated). Once, for the warm pool. */
int tier_hot_register_host(struct tier_hot *h, void *base, uint64_t len);

/* Copy len bytes host -> device at dev_off, or device -> host. Queued on the
 * device's stream, in order; host memory must stay valid until cb runs.
 * -EINVAL when [dev_off, dev_off+len) leaves the pool. */
int tier_hot_copy_in(struct tier_hot *h, uint64_t dev_off, const void *host, uint64_t len,
                     tier_hot_cb cb, void *ctx);
int tier_hot_copy_out(struct tier_hot *h, void *host, uint64_t dev_off, uint64_t len,
                      tier_hot_cb cb, void *ctx);

/* Run the callbacks of finished copies; wait for one first when wait is
 * true and copies are in flight. Returns callbacks run or -errno. */
int tier_hot_poll(struct tier_hot *h, bool wait);
unsigned tier_hot_inflight(const struct tier_hot *h);

/* The emulated backend's device memory, for tests (NULL with CUDA). */
void *tier_hot_emu_base(const struct tier_hot *h);

#define TIER_HOT_IPC_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */

/* How another process reaches the pool: the emulated one by mapping fd
 * (owned by the device; pass it, do not close it), the CUDA one by opening
 * the IPC handle (cudaIpcOpenMemHandle) on device. */
struct tier_hot_export {
    enum tier_hot_kind kind;
    int device;                        /* CUDA ordinal */
    int fd;                            /* EMU: the memfd of the pool; else -1 */
    uint64_t bytes;
    uint8_t ipc[TIER_HOT_IPC_BYTES];   /* CUDA: cudaIpcMemHandle_t of the pool */
};

/* Describe the pool for sharing. 0, or -EIO when CUDA refuses a handle. */
int tier_hot_export(const struct tier_hot *h, struct tier_hot_export *out);

#endif /* TIER_HOT_H */

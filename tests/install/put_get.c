/* SPDX-License-Identifier: MIT */
/*
 * put_get.c - an engine's first program against an installed kvtier, built
 * by tests/install_tree.c with nothing but `pkg-config --cflags --libs kvtier`
 * (and once more with --static, linked to libkvtier.a). It puts blocks
 * into the tierd at argv[1], reads them back and checks every byte, and
 * calls kv_layout.h's checks, which libkvtier exports too. None of the
 * tree's headers or helpers: only the installed <kvtier.h> and <kv_layout.h>.
 * Usage: put_get SOCKET SEED (the keys' seed: runs of other seeds put anew).
 * Exit 0, or the step that failed: 2 usage, 3 connect, 4 namespace, 5 put,
 * 6 get, 7 a wrong byte, 8 kv_layout.h's calls.
 */
#include <kv_layout.h>
#include <kvtier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 16
#define BLOCK_BYTES (64u << 10)

/* The byte at offset i of block b: differs between blocks and offsets. */
static uint8_t pattern(unsigned b, size_t i)
{
    return (uint8_t)((i * 131u) ^ (i >> 8) ^ (b * 29u + 7u));
}

int main(int argc, char **argv)
{
    static uint8_t in[BLOCKS][BLOCK_BYTES], out[BLOCKS][BLOCK_BYTES];
    const void *bufs[BLOCKS];
    void *outs[BLOCKS];
    kvt_key keys[BLOCKS];
    kvt_model m = { .model_id = "install/put_get", .dtype = "bf16", .layout = "test",
                    .block_tokens = 16, .tp_size = 1, .block_bytes = BLOCK_BYTES };
    struct kvk_layout l = { .n_layers = 2, .base = in, .layer_stride = BLOCK_BYTES * 4,
                            .elem_bytes = 2, .block_tokens = 16, .kv_heads = 4,
                            .head_dim = 64, .n_kv = 2, .num_blocks = 2,
                            .stride_kv = 2 * 16 * 4 * 64, .stride_block = 16 * 4 * 64,
                            .stride_token = 4 * 64, .stride_head = 64, .stride_dim = 1 };
    kvt_hash_opts ho = { .block_tokens = 16 };
    uint32_t tokens[BLOCKS * 16];
    kvt_client *c;
    kvt_ns *ns;
    int rc;

    if (argc != 3) {
        fprintf(stderr, "usage: put_get SOCKET SEED\n");
        return 2;
    }
    ho.seed = argv[2];
    if (kvk_layout_check(&l) != 0 || kvk_block_bytes(&l) != 2u * 2 * 16 * 4 * 64 * 2) {
        fprintf(stderr, "put_get: kv_layout.h: layout refused or block size wrong\n");
        return 8;
    }
    rc = kvt_connect(argv[1], &c);
    if (rc < 0) {
        fprintf(stderr, "put_get: kvt_connect(%s): %s\n", argv[1], kvt_strerror(rc));
        return 3;
    }
    rc = kvt_ns_open(c, &m, &ns);
    if (rc < 0) {
        fprintf(stderr, "put_get: kvt_ns_open: %s\n", kvt_strerror(rc));
        kvt_close(c);
        return 4;
    }
    for (unsigned i = 0; i < BLOCKS * 16; i++)
        tokens[i] = 1000 + i;
    if (kvt_hash_prompt(&ho, tokens, BLOCKS * 16, keys) != BLOCKS) {
        fprintf(stderr, "put_get: kvt_hash_prompt: not %d keys\n", BLOCKS);
        kvt_close(c);
        return 5;
    }
    for (unsigned b = 0; b < BLOCKS; b++) {
        for (size_t i = 0; i < BLOCK_BYTES; i++)
            in[b][i] = pattern(b, i);
        bufs[b] = in[b];
        outs[b] = out[b];
    }
    rc = kvt_put(ns, NULL, keys, BLOCKS, bufs);
    if (rc != BLOCKS) {
        fprintf(stderr, "put_get: kvt_put: expected %d blocks, got %d (%s)\n", BLOCKS, rc,
                rc < 0 ? kvt_strerror(rc) : "short");
        kvt_close(c);
        return 5;
    }
    memset(out, 0, sizeof(out));
    rc = kvt_get(ns, keys, BLOCKS, outs);
    if (rc != BLOCKS) {
        fprintf(stderr, "put_get: kvt_get: expected %d blocks, got %d (%s)\n", BLOCKS, rc,
                rc < 0 ? kvt_strerror(rc) : "short");
        kvt_close(c);
        return 6;
    }
    kvt_close(c);
    for (unsigned b = 0; b < BLOCKS; b++)
        for (size_t i = 0; i < BLOCK_BYTES; i++)
            if (out[b][i] != pattern(b, i)) {
                fprintf(stderr, "put_get: block %u byte %zu: expected 0x%02x, got 0x%02x\n",
                        b, i, pattern(b, i), out[b][i]);
                return 7;
            }
    printf("put_get: %d blocks of %u bytes put and read back, every byte checked\n", BLOCKS,
           BLOCK_BYTES);
    return 0;
}

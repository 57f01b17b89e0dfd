#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Write the seed corpus of the fuzz harnesses into tests/fuzz/corpus/:
# bundled configs (fuzz_config), trace lines and price files behind the
# selector byte (fuzz_trace), and well-formed daemon sessions in the record
# format of fuzz_wire.h (fuzz_reply), and well-formed client requests in the
# same format (fuzz_proto). Run from the repository root after a
# change of the wire layout or of a harness's input format.
import os
import shutil
import struct

OUT = "tests/fuzz/corpus"

# fuzz_wire.h
FRAME, STATUS, STALE, OP = 0x01, 0x02, 0x10, 0x20
FD_WARM, FD_HOT, FD_PIPE = 1 << 2, 2 << 2, 3 << 2
NO_SLOT = (1 << 64) - 1
WARM, HOT = 256 << 10, 128 << 10  # the pools' memfd sizes in fuzz_reply.c


def rec(mode, body=b"", status=None, op=None):
    """One record: mode, [status], [op], u16 length, bytes."""
    out = bytes([mode])
    if status is not None:
        out += struct.pack("<i", status)
    if op is not None:
        out += bytes([op])
    return out + struct.pack("<H", len(body)) + body


def call(fn, n=0, flag=False):
    """An op byte of fuzz_reply's script: call, key count, flag."""
    return bytes([fn | (n << 4) | (0x80 if flag else 0)])


def u64s(*v):
    return b"".join(struct.pack("<Q", x) for x in v)


HELLO = rec(FRAME | FD_WARM, struct.pack("<QQII", WARM, 1, 1024, 4096))
NS_4K = call(0, 1) + rec(FRAME, struct.pack("<IIQQ", 1, 0, 4096, 4096))
STATS = rec(FRAME, struct.pack("<IIII", 3, 1, 1, 0) + bytes(432 - 16))


def session():
    """Every call once, each answered as tierd would."""
    s = HELLO + NS_4K
    s += call(1, 4, True) + rec(FRAME, struct.pack("<II", 2, 4) + bytes([2, 2, 3, 0]))
    s += call(2, 4) + rec(FRAME, struct.pack("<II", 4, 3) + u64s(0, 4096, NO_SLOT, 8192))
    s += call(3, 4) + rec(FRAME, struct.pack("<II", 0, 3))
    s += call(6, 2) + rec(FRAME, struct.pack("<QII", 77, 2, 0) + u64s(0, 4096))
    s += call(12) + rec(FRAME | FD_HOT, struct.pack("<IiQ", 1, 0, HOT) + bytes(64))
    s += call(7, 2) + rec(FRAME, struct.pack("<QII", 78, 2, 0) + u64s(0, 8192) + bytes([1, 2]))
    s += call(8, 1) + rec(FRAME, struct.pack("<II", 1, 1) + u64s(4096))
    s += call(13) + STATS
    s += call(14, 2) + rec(FRAME, struct.pack("<II", 1, 0) + bytes(352))
    s += rec(FRAME, struct.pack("<II", 1, 0) + bytes(24))
    s += call(15, 3) + rec(FRAME) + rec(FRAME, struct.pack("<II", 0, 5))
    s += call(9, 2) + rec(FRAME, struct.pack("<II", 2, 2) + u64s(0, 4096))
    s += rec(FRAME, struct.pack("<II", 0, 2))
    s += call(9, 2, True) + rec(FRAME, struct.pack("<QII", 79, 2, 0) + u64s(12288, 0))
    s += call(4, 1) + rec(FRAME, struct.pack("<II", 0, 1))
    s += call(5, 1) + rec(FRAME, struct.pack("<II", 0, 0))
    return s


def reply_seeds():
    return {
        "hello": HELLO,
        "session": session(),
        # errors the daemon reports: no room for a namespace, a busy purge
        "errors": HELLO + call(0, 1) + rec(FRAME | STATUS, status=-28) + NS_4K +
                  call(2, 2) + rec(FRAME | STATUS, status=-28) +
                  call(15, 1) + rec(FRAME) + rec(FRAME | STATUS, status=-16),
        # a late answer to an older call first, then the right one
        "stale": HELLO + call(13) + rec(FRAME | STALE, STATS[3:]),
        # a raw message: a reply from another protocol version
        "version": rec(0, struct.pack("<IHHIiII", 0x3154564B, 2, 1, 1, -4098, 0, 0)),
        # an engine cache in host memory offloaded to 64-byte blocks and restored
        "offload": HELLO + call(0, 0) + rec(FRAME, struct.pack("<IIQQ", 2, 0, 64, 4096)) +
                   call(10, 2) + rec(FRAME, struct.pack("<II", 2, 2) + u64s(0, 4096)) +
                   rec(FRAME, struct.pack("<II", 0, 2)) +
                   call(10, 2, True) + rec(FRAME, struct.pack("<QII", 80, 2, 0) + u64s(0, 4096)),
        # regressions, one per bug the harness found (see the fixes in kvt_client.c):
        # a lookup's tiers[] with a value no KVT_TIER_* has
        "regress_lookup_tier": HELLO + NS_4K +
                               call(1, 2) + rec(FRAME, struct.pack("<II", 0, 2) + b"\x02\xff"),
        # a commit counting more keys than it was given
        "regress_commit_count": HELLO + NS_4K + call(3, 2) + rec(FRAME, struct.pack("<II", 0, 5)),
        # a warm pool announced larger than its memfd, a slot past the file's end
        "regress_pool_size": rec(FRAME | FD_WARM, struct.pack("<QQII", 2 * WARM, 1, 1024, 4096)) +
                             NS_4K + call(6, 1) +
                             rec(FRAME, struct.pack("<QII", 81, 1, 0) + u64s(WARM + 4096)),
        # the same for the hot pool
        "regress_hot_size": HELLO + NS_4K +
                            call(12) + rec(FRAME | FD_HOT, struct.pack("<IiQ", 1, 0, 4 * HOT) +
                                           bytes(64)) +
                            call(8, 1) + rec(FRAME, struct.pack("<II", 1, 1) + u64s(2 * HOT)),
        # a descriptor passed with an empty message (the connection's end): the
        # client closed the connection and kept the descriptor
        # (the input the fuzzer found, as it found it)
        "regress_fd_with_empty_reply": bytes.fromhex(
            "0518000000040000000000001908010030610041000400000000000008000000"
            "006d6d6d6d"),
        # a hot tier answered with a descriptor nobody can map
        "hot_pipe": HELLO + call(12) + rec(FRAME | FD_PIPE, struct.pack("<IiQ", 1, 0, HOT) +
                                           bytes(64)),
    }


def trace_seeds():
    with open("data/traces/conversation_trace.jsonl", "rb") as f:
        lines = [f.readline() for _ in range(6)]
    with open("tools/kvreplay_prices.json", "rb") as f:
        prices = f.read()
    return {
        "trace3": b"\x00" + b"".join(lines[:3]),
        "trace_limit2": b"\x20" + b"".join(lines[3:6]),
        "trace_blank": b"\x00\n" + lines[0].replace(b'"timestamp": 0, ', b"") + b"  \n",
        "prices_default": b"\x01" + prices,
        "prices_named": b"\x05" + prices,  # preset "llama8b-h100"
        "prices_small": b"\x03" + b'{"presets": {"api-1-50": {"price_hit": 0.1, "mfu": 1}}}',
    }


# regressions of kvt_model.c: error messages must stay on one line
CONFIG_REGRESS = {
    # jansson quotes the bad token, newline and all (found by the fuzzer)
    "regress_err_newline_json": b'"\\\n x',
    # a config's own string in the message
    "regress_err_newline_field.json": b'{"num_hidden_layers": 1, "layer_types": ["a\\nb"]}',
}

CONFIGS = ["llama-3.1-8b", "deepseek-v3.2", "gemma-3-27b-it", "jamba-v0.1", "nemotron-h-56b",
           "qwen3-next-80b-a3b", "gpt-oss-20b", "opt-13b"]


def keys_req(ns, n, block, flags=0, deadline=0):
    """A keys request body (kvt_wire_keys_req) and n distinct keys."""
    body = struct.pack("<IIQII", ns, n, block, flags, deadline)
    return body + b"".join(bytes([i + 1]) * 32 for i in range(n))


def proto_seeds():
    """Requests of a client to tierd (fuzz_proto.c opens namespace 1 with
    blocks of 64 KiB first): each op, framed, in the orders engines use."""
    blk = 64 << 10
    req = lambda op, body: rec(FRAME | OP, body, op=op)
    return {
        "lookup": req(3, keys_req(1, 2, blk)),
        "put_commit_get_release": req(4, keys_req(1, 3, blk)) + req(5, keys_req(1, 3, blk)) +
        req(7, keys_req(1, 3, blk)) + req(8, struct.pack("<Q", 1)),
        "durable": req(4, keys_req(1, 2, blk)) + req(5, keys_req(1, 2, blk, flags=2)),
        "hot": req(11, b"") + req(4, keys_req(1, 2, blk, flags=4)) +
        req(5, keys_req(1, 2, blk)) + req(7, keys_req(1, 2, blk, flags=4 | 8)),
        "abort_remove": req(4, keys_req(1, 2, blk)) + req(6, keys_req(1, 2, blk)) +
        req(9, keys_req(1, 2, blk)),
        "operators": req(10, b"") + req(12, struct.pack("<II", 1, 4)) + req(13, b"\x01" * 32) +
        req(14, b"") + req(15, struct.pack("<II", 1, 0)),
        "prefetch_lookup": req(3, keys_req(1, 2, blk, flags=1 << 8)),
        "bad_frame": rec(0, b"KVT1\x01\x00\x03\x00"),
        # a put, a pinning lookup of it (a new pin: id 0 before the keys), a get, an unpin
        "pin": req(4, keys_req(1, 2, blk)) + req(5, keys_req(1, 2, blk)) +
        req(3, struct.pack("<IIQII", 1, 2, blk, 0x10, 500) + bytes(8) +
            b"".join(bytes([i + 1]) * 32 for i in range(2))) +
        req(7, keys_req(1, 2, blk)) + req(16, struct.pack("<Q", 1 << 32 | 1)),
        # a pinning lookup that pins nothing (the input the fuzzer found, as it
        # found it): the session offset a pin's ids array it had not made yet
        "regress_pin_of_nothing": bytes.fromhex(
            "2104580001000000020000000000010000000000000000000000000001010101"
            "0101010101010101010101010101010101010101010101010101010102020202"
            "0202020202020202020202020202020202020202020202020202020221055800"
            "0100000002000000000001000000000000000000000000000101010101010101"
            "010101010101010101010101010101dc01010101010101010202020202020202"
            "0202020202020202020202020202020202020202020202022103600001000000"
            "02000000000001000000000010000000f40100000000000000000000010105ff"
            "fefe010101010101010101010101010101010101010101010101010102020202"
            "0202020202020202020202020202020202020202020202020202020221075800"
            "0100000002000000000001000000000000000000000000000101010101010101"
            "0101010101010101010101010101010101010101010101010202020202020202"
            "0202020202020202020202020202020202020202020202022110080001000000"
            "01000000"),
        # a client attacks the pools it was passed (the record's descriptor
        # bits): cuts the warm pool (must fail: sealed), punches a hole in it,
        # hands it back with a get; the hot pool (odd bodies) likewise
        "pool_attacks": req(11, b"") + rec(FRAME | OP | FD_WARM, keys_req(1, 2, blk), op=4) +
        rec(FRAME | OP | FD_HOT, keys_req(1, 2, blk), op=5) +
        rec(FRAME | OP | FD_WARM, keys_req(1, 2, blk) + b"\x00", op=3) +
        rec(FRAME | OP | FD_PIPE, keys_req(1, 2, blk), op=7) + req(10, b""),
        # a put whose absent parent is also its first key, twice: the store
        # deleted the reserved entry with the parent's ghost (found by the fuzzer)
        "regress_key_is_its_parent": req(4, struct.pack("<IIQII", 1, 2, blk, 1, 0) +
                                         b"\xff" * 96),
    }


def main():
    for name in ("fuzz_config", "fuzz_trace", "fuzz_reply", "fuzz_proto"):
        shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
        os.makedirs(os.path.join(OUT, name))
    for c in CONFIGS:
        shutil.copyfile(f"data/configs/{c}.json", os.path.join(OUT, "fuzz_config", c + ".json"))
    for harness, seeds in (("fuzz_config", CONFIG_REGRESS), ("fuzz_trace", trace_seeds()),
                           ("fuzz_reply", reply_seeds()), ("fuzz_proto", proto_seeds())):
        for name, data in seeds.items():
            with open(os.path.join(OUT, harness, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()

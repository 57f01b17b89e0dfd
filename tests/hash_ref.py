#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference block keys for tests/kvt_hash_vs_python.c, independent of libkvtier.

Computes vLLM's sha256_cbor prefix-caching hashes with Debian's python3-cbor2
and hashlib, following vLLM's own walk over a request's blocks (including its
multimodal cursor). It does not import anything from kvtier.

Input, one case per line, a JSON object:
    {"seed": "0", "block": 16, "salt": null | "s", "lora": null | "name",
     "lora_path": null | "path", "format": "tagged" | "untagged",
     "mm": [["identifier", offset, length], ...], "tokens": [t0, t1, ...]}
"untagged" is vLLM's earlier form of the extra keys (bare LoRA name, item
identifiers, salt); "tagged" today's (("lora", name, path), ("mm",
identifier, offset from the block's start), ("cache_salt", salt)).
Output, one line per case: the hex keys of the full blocks, space-separated
(an empty line when the prompt has no full block).
Exit status 3 when cbor2 is missing, 2 on a malformed case.
"""
import hashlib
import json
import sys

try:
    import cbor2
except ImportError:
    sys.stderr.write("hash_ref.py: python module cbor2 is missing "
                     "(Debian package python3-cbor2)\n")
    sys.exit(3)


def sha256_cbor(obj):
    """vLLM's sha256_cbor: SHA-256 of the canonical CBOR encoding."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def mm_keys(mm, start, end, idx):
    """Identifiers of the items overlapping [start, end), vLLM's walk.

    mm is sorted by offset; idx is the first item not yet passed. Returns the
    keys and the cursor for the next block.
    """
    keys = []
    if not mm:
        return keys, idx
    last_off, last_len = mm[-1][1], mm[-1][2]
    if last_off + last_len < start:
        return keys, idx
    while idx < len(mm):
        ident, off, length = mm[idx]
        if end <= off:
            break                   # the block ends before this item
        if start > off + length:
            idx += 1                # the item ended before this block
            continue
        keys.append(ident)
        if end >= off + length:
            idx += 1                # the item ends here; the next may start here too
        else:
            break                   # the item goes on into the next block
    return keys, idx


def mm_keys_tagged(mm, start, end, idx):
    """Today's walk: ("mm", identifier, offset - start) for each item that
    overlaps [start, end); an item that ended at the block's start does not."""
    keys = []
    if not mm or mm[-1][1] + mm[-1][2] <= start:
        return keys, idx
    while idx < len(mm):
        ident, off, length = mm[idx]
        if end <= off:
            break                   # the block ends before this item
        if start >= off + length:
            idx += 1                # the item ended before this block
            continue
        keys.append(("mm", ident, off - start))
        if end >= off + length:
            idx += 1
        else:
            break
    return keys, idx


def case_keys(case):
    block = case["block"]
    tokens = case["tokens"]
    salt = case.get("salt")
    lora = case.get("lora")
    tagged = case.get("format", "untagged") == "tagged"
    mm = [tuple(m) for m in case.get("mm") or []]
    parent = sha256_cbor(case["seed"])      # NONE_HASH
    out = []
    idx = 0
    for start in range(0, len(tokens) - block + 1, block):
        end = start + block
        if tagged:
            mmk, idx = mm_keys_tagged(mm, start, end, idx)
            extra = ([("lora", lora, case["lora_path"])] if lora is not None else []) + mmk
            if start == 0 and salt:
                extra.append(("cache_salt", salt))
        else:
            mmk, idx = mm_keys(mm, start, end, idx)
            extra = ([lora] if lora is not None else []) + mmk
            if start == 0 and salt:
                extra.append(salt)
        key = sha256_cbor((parent, tuple(tokens[start:end]),
                           tuple(extra) if extra else None))
        out.append(key.hex())
        parent = key
    return out


def main():
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
            keys = case_keys(case)
        except (ValueError, KeyError, TypeError) as e:
            sys.stderr.write("hash_ref.py: case on line %d: %s\n" % (lineno, e))
            sys.exit(2)
        sys.stdout.write(" ".join(keys) + "\n")


if __name__ == "__main__":
    main()

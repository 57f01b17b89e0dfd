# SPDX-License-Identifier: MIT
"""KvtierConnector: vLLM's KV connector (V1 interface) over tierd.

Load it with vLLM's standard option:

    --kv-transfer-config '{"kv_connector": "KvtierConnector",
        "kv_connector_module_path": "kvtier.vllm_connector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/kvtier/tierd.sock"}}'

(the socket may instead come from $KVTIER_SOCKET), with
--prefix-caching-hash-algo sha256_cbor. Block hashes are seeded with
$PYTHONHASHSEED, or without it with vLLM's fixed default ("vllm-none-hash",
vLLM 0.32 and later); the connector logs the seed it found.

Loads and saves are asynchronous by default ("async": true in
kv_connector_extra_config); "async": false does both inside the step.
Asynchronous, a load goes to a worker thread where it would wait on
something other than this CPU (a CUDA cache's copies, blocks the lookup
found on disk or in the remote tier); a host cache's hit held in tierd's
RAM is a memory copy by the CPU that runs the model, which a thread would
not overlap, so it is loaded in the step and the request does not wait a
step for it ("async_loads": "always" sends every load to the thread). A
host cache's saves (and a hybrid model's) end before the next forward
pass instead of holding a finished request's blocks until they are done.

How vLLM's calls map onto kvtier:
  - keys: vLLM's own block hashes (request.block_hashes, sha256_cbor) are the
    kvtier keys, byte for byte; kvtier computes nothing.
  - scheduler side: get_num_new_matched_tokens is a pinning lookup
    (kvt_lookup_pin) of the request's hashes in every tensor-parallel rank's
    namespace, and the hit is the shortest run found: the pins hold it in
    kvtier, whatever else is put, until the worker loads it (they expire
    after pin_ms if it never does; beyond the tenant's pin budget, a quarter
    of its warm tier, a hit is unheld and may be evicted, as without pins);
    asynchronous, the request then waits for its KV (vLLM's
    WAITING_FOR_REMOTE_KVS) while other requests run. update_state_after_alloc
    records which new engine blocks receive the hit and hands the pins to
    the load (or releases them when vLLM loads nothing);
    build_connector_meta hands the workers that load plan, the blocks that
    become full and computed during the step (to save), the requests
    preempted in it and those finished with saves behind them;
    update_connector_output has blocks that failed to load saved again once
    recomputed; request_finished forgets the request, and asynchronous,
    keeps its blocks from being freed (returns True) while its saves run,
    unless they are fenced (a host cache, a hybrid model: see below).
  - worker side: register_kv_caches describes vLLM's per-layer KV tensors as
    a kvk_layout (data pointers and strides). Synchronous: start_load_kv
    restores every planned block by kvt_restore (lease + scatter, all
    layers at once) and releases its namespace's pin; wait_for_save
    offloads the step's new full blocks by kvt_offload (gather + put) before
    the step ends. Asynchronous: both go to worker threads (_Mover), a
    loader and a saver, each with a connection of its own, and get_finished
    reports the loads done (finished_recving) and the finished requests
    whose saves are done (finished_sending), after which vLLM frees their
    blocks; handle_preemptions waits for the saves of preempted requests,
    whose blocks vLLM frees at once, before the step can write into them.
    Fenced (a host cache, a hybrid model; not under vLLM's model runner
    V2, which writes new blocks before it): handle_preemptions, which
    vLLM's V1 model runner calls before anything of a step writes KV, waits
    for every save handed out, so a finished request's blocks are freed at
    once (a save still overlaps the scheduling between steps). Scheduler
    and worker decide that from the same config (_fenced), never from what
    they see. The blocks of a request that reads a block loaded within the
    step are saved only once the step's output is known (_open_gates).
    Blocks a restore could not fill are reported through
    get_block_ids_with_load_errors, so vLLM recomputes them.
  - namespace: model id, KV dtype (each FP8 format its own), block size, the
    tier block's shape (layers, KV heads per rank, head size), the tensor-
    and pipeline-parallel rank and size, and for an FP8 cache where its
    scales come from (calculated: this instance's own; the checkpoint's,
    under its quantization method), so two instances of one model share
    blocks and anything that stores other bytes never does. The tier block
    format (layer, K/V, token, head, dim) does not depend on the engine's
    paged layout, so a CPU and a GPU instance of the same model share too.
  - hybrid models (several KV cache groups): a hybrid namespace with a
    group per vLLM group, each stored by its rule: full attention every
    block, a sliding window the window of a save's last block, a
    recurrent state (vLLM's "align" mode) the state at the block boundary
    a step ended on; a load fills each group's blocks, all or none.
  - failures: kvtier is a cache, so nothing it does fails a request. While
    tierd is away (killed, not yet started) lookups are misses, loads are
    reported failed and saves skipped; the connection is opened again once
    it is back (_Tierd). A block that fails to load (tierd gone between
    lookup and load, a checksum or disk error) goes to vLLM's failed-load
    path, which recomputes it (the connector sets kv_load_failure_policy to
    "recompute"), and is saved again once recomputed.
"""
import errno
import hashlib
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
try:       # vLLM keeps its hybrid allocator on with a connector that says it copes
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:
    SupportsHMA = object
from vllm.logger import init_logger

import kvtier

log = init_logger("vllm.kvtier")   # under vllm: shown in its log

# torch's dtype names -> kvtier's (kvt_model_set_dtype's): each FP8 format
# is its own, as the same values are other bytes in each
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
           "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
           "float8_e4m3fnuz": "fp8_e4m3fnuz", "float8_e5m2fnuz": "fp8_e5m2fnuz"}


class KvtierConfigError(ValueError):
    """vLLM is configured in a way under which kvtier's keys would be wrong."""


@dataclass
class _Load:
    req_id: str
    keys: list          # 32-byte keys, in chain order
    block_ids: list     # engine blocks that receive them
    pins: list = field(default_factory=list)  # the lookup's pin per namespace
    #                     (stage-major, then rank; 0: none; a hybrid namespace's: a list, a
    #                     pin per group): each worker unpins its own
    first: int = 0      # hybrid: keys and group_ids start at the prompt's first block,
    group_ids: list | None = None  # and blocks [first, len(keys)) are loaded, per group
    on_thread: bool = True  # asynchronous mode: by the loader thread (vLLM holds the
    #                         request for it), else in the step, before the forward pass


@dataclass
class _Save:
    req_id: str
    parent: bytes | None  # key of the block before keys[0], None at the start
    keys: list
    block_ids: list
    group_ids: list | None = None  # hybrid: engine block ids per group, for keys
    state_at: int | None = None    # state groups: the key whose block holds the state
    #                                after it once the step has run (None: no key's)


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    """One step's work for the workers: loads before the forward pass (or
    beside it, asynchronous), saves after it; asynchronous, the requests
    preempted in this step (their saves must end before the step writes
    into their freed blocks) and the finished ones whose blocks vLLM keeps
    until their saves are done."""
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    preempted: list = field(default_factory=list)
    finished: list = field(default_factory=list)
    resets: int = 0           # the scheduler's cache resets so far (see reset_cache)


@dataclass
class _ReqState:
    """Scheduler-side bookkeeping of one request."""
    request: object
    local_tokens: int = 0     # block-aligned local hit, from the last query
    hit_blocks: int = 0       # blocks kvtier holds, from the last query
    saved_blocks: int = 0     # leading blocks handed to the workers to save
    pending_load: _Load | None = None   # planned by update_state_after_alloc
    pins: list = field(default_factory=list)  # the last lookup's pins, until a load takes them
    loaded: tuple | None = None  # the last load: (first block index, engine block ids)
    saving: bool = False      # a save was handed to the workers (asynchronous: its
    #                           blocks stay allocated after the request ends until it is done)
    load_async: bool = False  # the last lookup's hit is loaded by the thread
    load_failed: bool = False  # hybrid: a load failed; vLLM recomputes all of it, and
    #                            asks again: answered with no hit, or it would loop
    hit_cap: int | None = None  # blocks: a plain load failed at this block; later
    #                             hits stop before it, for the same reason
    gate: int = 0             # steps to be scheduled before its blocks past saved_blocks
    #                           may be saved: they were computed in a step with a load in
    #                           the step into blocks it reads, whose outcome vLLM's
    #                           scheduler has not seen yet (see _open_gates)


@dataclass
class _Late:
    """A request that finished while its blocks were withheld (_ReqState.gate):
    its save, handed out once the outcome is known unless a load it read
    failed; vLLM holds its blocks until then (and the save's end)."""
    req_id: str
    save: _Save | None
    blocks: set
    gate: int


def hash_seed():
    """The seed vLLM derives NONE_HASH (the parent of every prompt's first
    block) from under sha256_cbor, which is kvt_hash_prompt's seed for its
    keys, and where it came from: $PYTHONHASHSEED when set (even empty, as
    vLLM reads it), else vLLM's fixed default ("vllm-none-hash" since vLLM
    0.32). Earlier vLLM drew a random NONE_HASH per process then, which no
    other instance shares: KvtierConfigError."""
    seed = os.environ.get("PYTHONHASHSEED")
    if seed is not None:
        return seed, "PYTHONHASHSEED"
    try:
        from vllm.v1.core.kv_cache_utils import DEFAULT_NONE_HASH_SEED
    except ImportError:
        raise KvtierConfigError(
            "kvtier: set PYTHONHASHSEED (e.g. PYTHONHASHSEED=0) in vLLM's environment: "
            "without it this vLLM seeds the first block's hash at random, so no other "
            "instance would find its blocks") from None
    return DEFAULT_NONE_HASH_SEED, "vLLM's default"


def check_vllm_config(vllm_config):
    """Refuse a configuration in which vLLM's block hashes are not kvtier keys
    shared across processes. Returns hash_seed()'s (seed, origin); raises
    KvtierConfigError with what to change."""
    algo = vllm_config.cache_config.prefix_caching_hash_algo
    if algo != "sha256_cbor":
        raise KvtierConfigError(
            "kvtier: vLLM's block hashes are kvtier keys only with "
            "--prefix-caching-hash-algo sha256_cbor (it is %r)" % algo)
    return hash_seed()


def _vllm_none_hash():
    """vLLM's NONE_HASH in this process (bytes), None before init_none_hash
    has run or where vLLM keeps it elsewhere."""
    try:
        from vllm.v1.core import kv_cache_utils
        return bytes(kv_cache_utils.NONE_HASH)
    except (ImportError, AttributeError):
        return None


def load_failure_policy(vllm_config, extra):
    """Make vLLM recompute a block that fails to load (its kv_load_failure_policy
    "recompute"; vLLM's default "fails" the request), unless the connector's
    "load_failure_policy" in kv_connector_extra_config says "fail": a kvtier
    block is a copy of what vLLM can always compute again. vLLM's scheduler
    reads its policy after making its connector, so setting it here holds.
    Returns the policy."""
    want = extra.get("load_failure_policy", "recompute")
    if want not in ("recompute", "fail"):
        raise KvtierConfigError("kvtier: load_failure_policy is \"recompute\" or \"fail\", "
                                "not %r" % (want,))
    ktc = vllm_config.kv_transfer_config
    if getattr(ktc, "kv_load_failure_policy", want) != want:
        log.info("kvtier: vLLM's kv_load_failure_policy %r set to %r (the connector's "
                 "load_failure_policy)", ktc.kv_load_failure_policy, want)
        ktc.kv_load_failure_policy = want
    return want


def _model_id(model_config):
    mid = str(model_config.model)
    rev = getattr(model_config, "revision", None)
    if rev:
        mid = "%s@%s" % (mid, rev)
    if len(mid.encode()) > 127:
        # keep the readable tail and make the whole unique
        h = hashlib.sha256(mid.encode()).hexdigest()[:16]
        mid = h + ":" + mid.encode()[-(127 - 17):].decode(errors="ignore")
    return mid


def _state_kind(spec):
    """A MambaSpec group (Mamba, linear attention): "state", where vLLM keeps
    a state at every block boundary it caches (mamba_cache_mode "align", as
    vLLM sets with prefix caching: block i's slot holds the state after
    tokens [0, (i + 1) * block size)); KvtierConfigError otherwise."""
    mode = getattr(spec, "mamba_cache_mode", None)
    if mode != "align":
        raise KvtierConfigError(
            "kvtier: a recurrent-state (Mamba, linear attention) group needs vLLM's "
            "mamba_cache_mode \"align\" (vLLM's default with --enable-prefix-caching), "
            "not %r: only then does vLLM keep a state per block for kvtier to save" % mode)
    odd = [a for a in ("num_speculative_blocks", "num_prefill_checkpoint_blocks")
           if getattr(spec, a, 0)]
    if odd:
        # those move states away from their block's slot
        raise KvtierConfigError("kvtier: recurrent-state groups with %s are not supported"
                                % ", ".join(odd))
    return "state"


def _group_kind(spec):
    """kvtier's kind of layer group ("full", "sliding" or "state") for a vLLM
    KV cache spec; KvtierConfigError for any other."""
    name = type(spec).__name__
    if name == "MambaSpec":
        return _state_kind(spec)
    if not hasattr(spec, "num_kv_heads"):
        raise KvtierConfigError("kvtier: unsupported KV cache spec %s" % name)
    for a in ("block_size", "num_kv_heads", "head_size", "dtype"):
        if not hasattr(spec, a):
            raise KvtierConfigError("kvtier: unsupported KV cache spec %s (no %s)" % (name, a))
    window = getattr(spec, "sliding_window", None)
    if name == "FullAttentionSpec" and window is None:
        kind = "full"
    elif name == "SlidingWindowSpec" and window:
        kind = "sliding"
        if getattr(spec, "extra_retained_tokens", 0):
            # vLLM then keeps more of the window than kvtier stores: every
            # hit would fail its load
            raise KvtierConfigError("kvtier: sliding-window groups that retain extra "
                                    "tokens (speculative decoding) are not supported")
    else:
        raise KvtierConfigError("kvtier: unsupported KV cache spec %s: full or sliding-"
                                "window attention, or recurrent state, only" % name)
    odd = [a for a, ok in (
        ("head_size_v", getattr(spec, "head_size_v", None) in (None, spec.head_size)),
        ("kv_quant_mode", getattr(getattr(spec, "kv_quant_mode", None), "name",
                                  "NONE") == "NONE")) if not ok]
    if odd:
        raise KvtierConfigError("kvtier: unsupported KV cache (%s set)" % ", ".join(odd))
    return kind


def kv_groups(kv_cache_config):
    """vLLM's KV cache groups with kvtier's kind of each, [(group, kind)]:
    one full-attention group is a plain namespace, anything else (several
    groups, sliding windows, states) a hybrid one. Every group must have the
    same block size, and vLLM's block hashes that size: a block's hash covers
    the same tokens in each."""
    groups = list(kv_cache_config.kv_cache_groups)
    if not groups:
        raise KvtierConfigError("kvtier: the model has no KV cache group")
    if len(groups) > len(kvtier.LAYER_KINDS):
        raise KvtierConfigError("kvtier: %d KV cache groups; kvtier handles at most %d"
                                % (len(groups), len(kvtier.LAYER_KINDS)))
    out = [(g, _group_kind(g.kv_cache_spec)) for g in groups]
    sizes = {g.kv_cache_spec.block_size for g, _ in out}
    if len(sizes) != 1:
        raise KvtierConfigError("kvtier: KV cache groups of several block sizes %s"
                                % sorted(sizes))
    if all(k == "state" for _, k in out):
        raise KvtierConfigError("kvtier: a model with no attention group is not supported")
    hashed = getattr(kv_cache_config, "hash_block_size", None)
    if hashed not in (None, *sizes):
        # finer hashes (prefix_match_unit) are not one per block
        raise KvtierConfigError("kvtier: vLLM hashes every %d tokens, its blocks hold %d"
                                % (hashed, sizes.pop()))
    return out


def _attention_spec(groups):
    """The spec of the first attention group: the namespace's KV dtype."""
    return next(g.kv_cache_spec for g, k in groups if k != "state")


def _hybrid(groups):
    return len(groups) > 1 or groups[0][1] != "full"


def _host_cache(vllm_config):
    """Whether vLLM's KV cache is in host memory (its CPU build). A config
    without a device says no: the side that holds blocks for saves and
    loads on the thread is the one that is right everywhere."""
    dc = getattr(vllm_config, "device_config", None)
    return getattr(dc, "device_type", None) == "cpu"


def _model_runner_v2(vllm_config):
    """Whether vLLM runs its model runner V2 (vllm/v1/worker/gpu/), as its
    workers decide it (VllmConfig.use_v2_model_runner); a config that
    cannot tell says yes (its handle_preemptions comes after the step's
    first writes to new blocks: the side that holds blocks is right)."""
    try:
        return bool(getattr(vllm_config, "use_v2_model_runner", False))
    except Exception:
        return True


def _torch_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]      # torch.float8_e5m2 -> float8_e5m2


def kv_dtype(vllm_config, spec):
    """The namespace's dtype name and the element size of a KV cache spec.
    vLLM allocates its FP8 caches as uint8 and names the format in
    cache_config.cache_dtype: "fp8_e5m2", or "fp8" / "fp8_e4m3", which are
    the platform's E4M3 (FNUZ on ROCm's MI300, FN elsewhere)."""
    name = _torch_name(spec.dtype)
    if name in _DTYPES:
        return _DTYPES[name], spec.dtype.itemsize
    cache = str(getattr(vllm_config.cache_config, "cache_dtype", "auto"))
    if name == "uint8" and cache == "fp8_e5m2":
        return "fp8_e5m2", 1
    if name == "uint8" and cache in ("fp8", "fp8_e4m3"):
        try:
            from vllm.platforms import current_platform
            e4m3 = _DTYPES.get(_torch_name(current_platform.fp8_dtype()))
        except Exception as e:        # an E4M3 of the wrong kind is the wrong bytes
            raise KvtierConfigError("kvtier: cannot tell which FP8 format the %s cache "
                                    "holds: %s" % (cache, e))
        if e4m3:
            return e4m3, 1
    raise KvtierConfigError("kvtier: unsupported KV dtype %s (cache dtype %s)"
                            % (spec.dtype, cache))


def kv_variant(vllm_config, dtype):
    """The bytes that tell this instance's FP8 blocks apart by their scales
    (kvt_model's variant), or None. Only FP8 caches are scaled. Calculated
    scales (calculate_kv_scales) are this instance's own: its engine id,
    which its scheduler and workers share, keeps them apart. Static ones come
    with the checkpoint, which the model id names, read by the quantization
    method; without one they are 1.0 (checked by the workers on their
    layers)."""
    if not dtype.startswith("fp8"):
        return None
    if getattr(vllm_config.cache_config, "calculate_kv_scales", False):
        eid = getattr(getattr(vllm_config, "kv_transfer_config", None), "engine_id", None)
        if not eid:
            raise KvtierConfigError("kvtier: calculated KV scales are an instance's own, "
                                    "and this one has no engine id to name them by")
        return ("kv_scales=calculated engine=%s" % eid).encode()
    quant = getattr(vllm_config.model_config, "quantization", None)
    return None if quant is None else ("kv_scales=checkpoint quantization=%s" % quant).encode()


def stage_layers(vllm_config, group, pp_rank, pp_size):
    """KV layers of pipeline stage pp_rank. The scheduler's kv_cache_config is
    the first stage's (vLLM copies the first worker's), so the others are
    counted as vLLM partitions its decoder layers (get_pp_indices); workers
    check their own count against it."""
    if pp_size == 1:
        return len(group.layer_names)
    from vllm.distributed.utils import get_pp_indices
    start, end = get_pp_indices(vllm_config.model_config.get_total_num_hidden_layers(),
                                pp_rank, pp_size)
    return end - start


def namespace_desc(vllm_config, kv_cache_config, tp_rank, pp_rank=0):
    """The kvt_model fields of this instance's namespace (tensor-parallel
    rank tp_rank of pipeline stage pp_rank), as a dict. A hybrid model's
    (several groups, or sliding windows) has "groups": its layer groups in
    vLLM's order, each its own namespace (Client.ns_open_hybrid)."""
    groups = kv_groups(kv_cache_config)
    group = groups[0][0]
    spec = _attention_spec(groups)
    dtype, esize = kv_dtype(vllm_config, spec)
    pp_size = getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1)
    if vllm_config.cache_config.block_size != spec.block_size:
        raise KvtierConfigError(
            "kvtier: the cache block size (%d) differs from the hash block size (%d)"
            % (spec.block_size, vllm_config.cache_config.block_size))
    if getattr(vllm_config.parallel_config, "decode_context_parallel_size", 1) != 1:
        raise KvtierConfigError("kvtier: decode context parallelism is not supported")
    d = {
        "model_id": _model_id(vllm_config.model_config),
        "dtype": dtype,
        "block_tokens": spec.block_size,
        "tp_rank": tp_rank,
        "tp_size": vllm_config.parallel_config.tensor_parallel_size,
        "pp_rank": pp_rank,
        "pp_size": pp_size,
        "variant": kv_variant(vllm_config, dtype),
    }
    if _hybrid(groups):
        if pp_size != 1:
            raise KvtierConfigError("kvtier: pipeline parallelism with a hybrid model (several "
                                    "KV cache groups) is not supported")
        gs, block_bytes = _hybrid_groups(vllm_config, groups, dtype, esize)
        # the groups' shapes and order are in each group's identity (kvt_ns_open_hybrid)
        d.update(layout="vllm:hybrid:%dG" % len(gs), groups=gs, block_bytes=block_bytes)
        states = state_format(groups)
        if states:
            # a state's size does not tell its format (its dtypes, their order)
            d["variant"] = (d["variant"] + b" " if d["variant"] else b"") + states
        return d
    layers = stage_layers(vllm_config, group, pp_rank, pp_size)
    d.update(layout="vllm:%dLx%dHx%dD" % (layers, spec.num_kv_heads, spec.head_size),
             block_bytes=layers * 2 * spec.block_size * spec.num_kv_heads * spec.head_size
             * esize)
    return d


def _hybrid_groups(vllm_config, groups, dtype, esize):
    """A hybrid namespace's groups (Client.ns_open_hybrid's dicts), the KV
    groups all of the first one's dtype, and each group's object size (a
    block of a KV group, a state of all a state group's layers)."""
    gs, sizes = [], []
    tp = vllm_config.parallel_config.tensor_parallel_size
    for g, kind in groups:
        spec = g.kv_cache_spec
        n = len(g.layer_names)
        if kind == "state":
            if tp > 1 and getattr(spec, "tp_replicated", False):
                raise KvtierConfigError("kvtier: recurrent-state groups replicated across "
                                        "tensor-parallel ranks are not supported")
            # vLLM's state shapes are one rank's; kvtier splits state_bytes by
            # the ranks, so it is given the whole model's
            gs.append({"kind": "state", "layers": n, "state_bytes": state_bytes(spec) * tp})
            sizes.append(n * state_bytes(spec))
            continue
        if kv_dtype(vllm_config, spec) != (dtype, esize):
            raise KvtierConfigError("kvtier: KV cache groups of several dtypes")
        # vLLM's spec has one rank's heads, kvtier's group the model's (it
        # splits them by the ranks, as for a state; a head fewer than the
        # ranks is replicated, one per rank)
        d = {"kind": kind, "layers": n, "kv_heads": spec.num_kv_heads * tp,
             "head_dim": spec.head_size, "n_kv": 2, "elem_bytes": esize}
        if kind == "sliding":
            d["window"] = spec.sliding_window
        gs.append(d)
        sizes.append(n * 2 * spec.block_size * spec.num_kv_heads * spec.head_size * esize)
    return gs, sizes


def state_bytes(spec):
    """Bytes of one layer's state (a MambaSpec's states, conv and SSM, packed
    as vLLM packs them at the start of the layer's page): its real size,
    without the page's padding."""
    return sum(math.prod(shape) * torch.empty((), dtype=dt).element_size()
               for shape, dt in zip(spec.shapes, spec.dtypes))


def state_format(groups):
    """The state groups' format (shapes and dtypes of each state), as bytes
    for the namespace's variant; b"" without state groups."""
    return b" ".join(("states=" + ",".join(
        "x".join(map(str, shape)) + ":" + _torch_name(dt)
        for shape, dt in zip(g.kv_cache_spec.shapes, g.kv_cache_spec.dtypes))).encode()
        for g, k in groups if k == "state")


def purge_namespaces(client, spaces, deadline):
    """Purge every block of spaces (a hybrid one: each group's) through
    client, retrying while a block is busy (leased, being written) until
    deadline (time.monotonic()); the blocks removed."""
    ids = []
    for ns in spaces:
        ids += [ns.group(g).id for g in range(ns.groups)] \
            if isinstance(ns, kvtier.HybridNamespace) else [ns.id]
    removed = 0
    for ns_id in ids:
        while True:
            try:
                removed += client.purge(ns_id)
                break
            except kvtier.KvtierError as e:
                if e.code == -errno.EBUSY and time.monotonic() < deadline:
                    time.sleep(0.05)   # a load or a save still on it
                    continue
                raise
    return removed


def window_blocks(window, block_tokens):
    """Blocks of a sliding group kvtier stores for a prefix's next token: the
    C hybrid API's rule, ceil(window / block)."""
    return -(-window // block_tokens)


def layout_for_tensors(tensors, block_size, kv_heads, head_size):
    """A kvtier.Layout for vLLM's per-layer KV tensors (in layer order), from
    their shapes and strides. Known shapes, for B blocks of T tokens, H heads
    of D dims:
        [2, B, T, H, D]  flash-attn          [B, 2, T, H, D]  FlashInfer NHD
        [2, B, H, T, D]                       [B, 2, H, T, D]  HND
        [B, H, T, 2*D]   vLLM's CPU backend (viewed as [B, H, 2*T, D]: the K
                         rows of a block and head, then its V rows)
    Raises KvtierConfigError for anything else."""
    t0 = tensors[0]
    shape, T, H, D = tuple(t0.shape), block_size, kv_heads, head_size
    named = {
        "kbthd": lambda s: len(s) == 5 and s[0] == 2 and s[2:] == (T, H, D),
        "bkthd": lambda s: len(s) == 5 and s[1] == 2 and s[2:] == (T, H, D),
        "kbhtd": lambda s: len(s) == 5 and s[0] == 2 and s[2:] == (H, T, D),
        "bkhtd": lambda s: len(s) == 5 and s[1] == 2 and s[2:] == (H, T, D),
    }
    for dims, match in named.items():
        if match(shape):
            return kvtier.Layout.from_tensors(tensors, dims)
    if len(shape) == 4 and shape[1:] == (H, T, 2 * D):
        st = tuple(t0.stride())
        if st[3] != 1 or st[2] != 2 * D:
            raise KvtierConfigError("kvtier: CPU KV cache with unexpected strides %r" % (st,))
        for t in tensors:
            if tuple(t.shape) != shape or tuple(t.stride()) != st or t.dtype != t0.dtype:
                raise KvtierConfigError("kvtier: KV tensors differ in shape or dtype")
        return kvtier.Layout([t.data_ptr() for t in tensors], elem_bytes=t0.element_size(),
                             block_tokens=T, kv_heads=H, head_dim=D, num_blocks=shape[0],
                             n_kv=2, stride_kv=T * D, stride_block=st[0], stride_token=D,
                             stride_head=st[1], stride_dim=1)
    raise KvtierConfigError(
        "kvtier: unknown KV cache shape %r (block size %d, %d KV heads, head size %d)"
        % (shape, T, H, D))


class StateLayout:
    """Where a state group's states are in vLLM's cache: per layer, vLLM's
    [B, 1, 1, page] int8 view of its pages, whose first nbytes bytes of
    block b are the layer's states after that block, packed (conv, then
    SSM: MambaBase.bind_kv_cache), the rest padding. A kvtier state object
    is those bytes of every layer, in layer order (block_bytes in all)."""

    def __init__(self, tensors, nbytes):
        t0 = tensors[0]
        for t in tensors:
            if t.dim() != 4 or tuple(t.shape[1:3]) != (1, 1) or t.shape[3] < nbytes or \
                    t.stride(3) != 1 or t.element_size() != 1 or t.shape[0] != t0.shape[0]:
                raise KvtierConfigError(
                    "kvtier: unknown state cache shape %r strides %r (%s; %d-byte states)"
                    % (tuple(t.shape), tuple(t.stride()), t.dtype, nbytes))
        self.pages = [t[:, 0, 0, :nbytes] for t in tensors]
        self.nbytes, self.block_bytes, self.num_blocks = nbytes, nbytes * len(tensors), \
            t0.shape[0]

    def _check(self, block):
        if not 0 < block < self.num_blocks:
            raise KvtierConfigError("kvtier: state block %d of %d" % (block, self.num_blocks))

    def gather(self, block):
        """A host copy (uint8, contiguous) of block's states, every layer."""
        self._check(block)
        return torch.cat([p[block] for p in self.pages]).view(torch.uint8).cpu()

    def restore(self, ns, key, block):
        """Copy the state object key of namespace ns (a state group's) into
        block; False when ns does not hold it."""
        self._check(block)
        with ns.lease([key]) as le:
            if not le.views:
                return False
            src = torch.frombuffer(bytearray(le.views[0]), dtype=torch.uint8)
        n = self.nbytes
        for i, p in enumerate(self.pages):
            p[block].copy_(src[i * n:(i + 1) * n].view(p.dtype))
        return True


def _worker_ranks():
    """This worker's tensor-parallel rank and pipeline stage; 0 where vLLM's
    process groups are not initialised (a single process)."""
    from vllm.distributed import parallel_state as ps
    try:
        rank = ps.get_tensor_model_parallel_rank()
    except Exception:
        rank = 0
    try:
        stage = ps.get_pp_group().rank_in_group
    except Exception:
        stage = 0
    return rank, stage


def scaled_layers(vllm_config, layer_names):
    """Of layer_names, those whose attention layer holds KV scales other than
    1.0 (vLLM keeps them as _k_scale_float / _v_scale_float)."""
    ctx = getattr(getattr(vllm_config, "compilation_config", None),
                  "static_forward_context", None) or {}
    return [n for n in layer_names if n in ctx and
            (getattr(ctx[n], "_k_scale_float", 1.0), getattr(ctx[n], "_v_scale_float", 1.0))
            != (1.0, 1.0)]


# libkvtier's connection is dead for good after these (tierd closed it or
# stopped answering) ...
_DEAD = (kvtier.EDISCONNECTED, -errno.ETIMEDOUT)
# ... and kvt_connect gives these too where no tierd listens (yet)
_AWAY = _DEAD + (-errno.ENOENT, -errno.ECONNREFUSED)


class _Tierd:
    """The connection to tierd and one side's namespaces on it (descs: the
    namespace_desc() dicts), opened again after tierd went away.

    Design note. Once tierd is killed or stops answering, libkvtier's
    connection is dead for good (KVT_EDISCONNECTED, -ETIMEDOUT): it is closed
    here and a new one, with its namespaces, opened at a later use, trying
    at most every retry_s (a connect where nothing listens fails at once,
    but a hung tierd holds each try for timeout_ms: after each try that
    timed out, the wait doubles, to a minute at most, so that a hung tierd
    costs the scheduler a shrinking share of its time). Meanwhile
    spaces() is None and the connector counts lookups as misses, loads as
    failed (vLLM recomputes them) and saves as skipped: vLLM goes on serving
    without kvtier. Pins taken on a lost connection died with its tierd; a
    new tierd may reuse their ids, so an unpin sent there is at worst an
    early release (the hit may then be evicted, reported and recomputed)."""

    def __init__(self, socket, descs, retry_s, timeout_ms=0):
        self.socket, self._descs, self._retry_s = socket, list(descs), retry_s
        self.timeout_ms = timeout_ms    # each reply's bound (0: libkvtier's)
        self._wait = retry_s   # before the next connect: grows while tierd hangs
        self.client = None     # kvtier.Client, None while tierd is away
        self.ns = None         # the namespaces of descs, in order, with client
        self._next_try = 0.0   # time.monotonic() of the next connect, while away
        self._away = False     # said so in the log (once, until it is back)
        try:
            self._open()
        except kvtier.KvtierError as e:
            if e.code not in _AWAY:
                raise          # a namespace tierd refuses: vLLM's configuration
            self._not_there(e)

    def _where(self):
        return self.socket or kvtier.default_socket()

    @staticmethod
    def _ns_open(c, d):
        if "groups" in d:
            # a state for every block (state_every 1), a window per offload
            return c.ns_open_hybrid(d["model_id"], d["dtype"], d["layout"], d["groups"],
                                    d["block_tokens"], d["tp_rank"], d["tp_size"],
                                    d["pp_rank"], d["pp_size"], d["variant"])
        return c.ns_open(d["model_id"], d["dtype"], d["layout"], d["block_tokens"],
                         d["block_bytes"], d["tp_rank"], d["tp_size"], d["pp_rank"],
                         d["pp_size"], d["variant"])

    def _open(self):
        c = kvtier.Client(self.socket, self.timeout_ms)
        try:
            self.ns = [self._ns_open(c, d) for d in self._descs]
        except BaseException:
            c.close()
            raise
        self.client = c

    def _hung(self, e):
        """After e: the next connect in self._wait, which doubles when e is a
        timeout (tierd there but not answering)."""
        if e.code == -errno.ETIMEDOUT:    # there, but not answering (or accepting)
            self._wait = min(max(2 * self._wait, self._retry_s, 1.0), 60.0)
        self._next_try = time.monotonic() + self._wait

    def _not_there(self, e):
        """A connect failed: try again later (_hung)."""
        self._hung(e)
        if not self._away:
            log.warning("kvtier: tierd on %s is away (%s): lookups are misses, loads are "
                        "recomputed and saves skipped until it is back", self._where(), e)
        self._away = True

    def _drop(self):
        c, self.client, self.ns = self.client, None, None
        try:
            c.close()
        except Exception:      # only a view still held could refuse: none is
            pass

    def spaces(self, now=False):
        """The namespaces (a list, in descs' order), after connecting again if
        the connection was lost and the next try is due (now: at once); None
        while tierd is away."""
        if self.client is not None:
            return self.ns
        if not now and time.monotonic() < self._next_try:
            return None
        try:
            self._open()
        except kvtier.KvtierError as e:
            self._not_there(e)
            return None
        log.info("kvtier: connected to tierd on %s again", self._where())
        self._away, self._wait = False, self._retry_s
        return self.ns

    def call(self, what, fn):
        """fn(namespaces), which calls tierd: (True, its result), or (False,
        None) when tierd is away or fn raised a KvtierError (logged; a dead
        connection dropped). A connection tierd closed (it may have restarted
        since the last call) is replaced at once and fn run once more; one
        that timed out is not (a hung tierd would hold the second try as
        long)."""
        for again in (False, True):
            spaces = self.spaces(now=again)
            if spaces is None:
                return False, None
            try:
                return True, fn(spaces)
            except kvtier.KvtierError as e:
                self.failed(e, what)
                if again or e.code != kvtier.EDISCONNECTED:
                    return False, None
        return False, None

    def failed(self, e, what):
        """A call through the connection raised e (a KvtierError): log it, and
        drop the connection when e says it is dead."""
        log.warning("kvtier: %s: %s", what, e)
        if e.code in _DEAD:
            self._drop()
            if e.code == -errno.ETIMEDOUT:
                self._hung(e)      # not at the next call: it would hang as long

    def unpin(self, pins):
        """Release the pins a lookup took (0s skipped); those of a lost
        connection died with it, and a failed unpin leaves one to expire."""
        for pin_id in pins:
            if isinstance(pin_id, list):   # a hybrid namespace's, one per group
                self.unpin(pin_id)
                continue
            if not pin_id or self.client is None:
                continue
            try:
                self.client.unpin(pin_id)
            except kvtier.KvtierError as e:
                self.failed(e, "unpin (the pin expires)")

    def close(self):
        if self.client is not None:
            self.client.close()
        self.client, self.ns = None, None


class _Mover:
    """A worker thread that runs one direction's transfers (loads or saves)
    in order, on a connection of its own (tierd: a _Tierd, which only this
    thread uses from then on: a kvt_client serves one thread at a time),
    while the engine's steps go on: libkvtier's calls run without the GIL.

    submit(req_id, fn) queues fn(tierd, stream) for request req_id; stream
    is the thread's own CUDA stream (a torch.cuda.Stream) for a device
    cache, else None. What fn returns, unless None, is kept for collect()
    when keep is set. busy(req_id) says whether a job of req_id is queued or running;
    wait(req_ids) blocks until none is (a hung tierd holds each job for
    KVTIER_TIMEOUT_MS at most). A job that keeps a result must not raise;
    one that raises anyway is logged and keeps none."""

    def __init__(self, name, tierd, device, keep):
        self.tierd, self._name, self._device, self._keep = tierd, name, device, keep
        self._q = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._pending = {}     # req_id -> jobs queued or running
        self._done = []        # (req_id, result) not yet collected (keep only)
        self._thread = threading.Thread(target=self._run, name="kvtier-" + name,
                                        daemon=True)
        self._thread.start()

    def submit(self, req_id, fn):
        with self._cv:
            self._pending[req_id] = self._pending.get(req_id, 0) + 1
        self._q.put((req_id, fn))

    def _run(self):
        stream = None
        if self._device is not None:
            torch.cuda.set_device(self._device)
            stream = torch.cuda.Stream(self._device)
        while True:
            job = self._q.get()
            if job is None:
                return
            req_id, fn = job
            try:
                res = fn(self.tierd, stream)
            except Exception:
                log.exception("kvtier: %s of request %s", self._name, req_id)
                res = None
            with self._cv:
                if self._keep and res is not None:
                    self._done.append((req_id, res))
                left = self._pending[req_id] - 1
                if left:
                    self._pending[req_id] = left
                else:
                    del self._pending[req_id]
                self._cv.notify_all()

    def collect(self):
        with self._cv:
            done, self._done = self._done, []
        return done

    def busy(self, req_id):
        with self._cv:
            return req_id in self._pending

    def wait(self, req_ids=None):
        """Until no job of req_ids (None: of any request) is left."""
        with self._cv:
            self._cv.wait_for(lambda: not (self._pending if req_ids is None else
                                           any(r in self._pending for r in req_ids)))

    def close(self, timeout_s):
        """Stop after the jobs queued (waiting timeout_s at most), then close
        the connection; True if the thread ended."""
        self._q.put(None)
        self._thread.join(timeout_s)
        ended = not self._thread.is_alive()
        if ended:
            self.tierd.close()
        else:
            log.warning("kvtier: the %s thread is still in a call to tierd at shutdown",
                        self._name)
        return ended


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM KV connector over kvtier: prefix blocks saved to and restored from
    tierd by vLLM's own block hashes, asynchronously unless "async" is
    false."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._seed, origin = check_vllm_config(vllm_config)
        if kv_cache_config is None:
            raise KvtierConfigError("kvtier: needs vLLM's kv_cache_config")
        extra = getattr(self._kv_transfer_config, "kv_connector_extra_config", None) or {}
        socket = extra.get("socket") or None      # None: $KVTIER_SOCKET / default
        # how long a hit stays pinned for its load: a request vLLM cannot
        # schedule now is looked up (and pinned) again at its next try
        self._pin_ms = int(extra.get("pin_ms", 10000))
        if not 0 < self._pin_ms <= kvtier.PIN_MAX_MS:
            raise KvtierConfigError("kvtier: pin_ms must be 1..%d, not %d"
                                    % (kvtier.PIN_MAX_MS, self._pin_ms))
        # how often a tierd that went away is looked for again
        retry_ms = int(extra.get("reconnect_ms", 1000))
        if retry_ms < 0:
            raise KvtierConfigError("kvtier: reconnect_ms must be 0 or more, not %d"
                                    % retry_ms)
        # the scheduler's bound on each call to tierd: its lookups run inside
        # vLLM's scheduling step, which a hung tierd must not stall for
        # libkvtier's 30 s (the workers' loads and saves keep that bound)
        lookup_ms = extra.get("lookup_timeout_ms", 1000)
        if not isinstance(lookup_ms, int) or isinstance(lookup_ms, bool) or \
                not 0 < lookup_ms <= 600000:
            raise KvtierConfigError("kvtier: lookup_timeout_ms must be 1..600000, not %r"
                                    % (lookup_ms,))
        policy = load_failure_policy(vllm_config, extra)
        # asynchronous by default: a load holds up only its own request and a
        # save no request at all, where the synchronous mode holds the batch
        self._async = extra.get("async", True)
        if not isinstance(self._async, bool):
            raise KvtierConfigError("kvtier: \"async\" is true or false, not %r"
                                    % (self._async,))
        loads_mode = extra.get("async_loads", "auto")
        if loads_mode not in ("auto", "always"):
            raise KvtierConfigError("kvtier: \"async_loads\" is \"auto\" or \"always\", not %r"
                                    % (loads_mode,))
        self._host = _host_cache(vllm_config)
        self._socket, self._retry_s = socket, retry_ms / 1000.0
        # a producer only saves: vLLM keeps a freed block from reuse while a
        # step may still write it only for consumers, and a load needs that
        ktc = self._kv_transfer_config
        self._loads = bool(getattr(ktc, "is_kv_consumer", True))
        self._vllm = vllm_config
        tp_size = vllm_config.parallel_config.tensor_parallel_size
        pp_size = getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1)
        self._groups = kv_groups(kv_cache_config)
        self._hybrid = _hybrid(self._groups)
        group = self._groups[0][0]
        self._layer_names = list(group.layer_names)
        self._block_size = group.kv_cache_spec.block_size
        self._states = any(k == "state" for _, k in self._groups)
        if self._hybrid and not self._async:
            # with several groups vLLM hears of a failed load only from an
            # asynchronous one (failed_recving): a synchronous one would leave
            # blocks it never received in its prefix cache
            log.warning("kvtier: loads and saves are asynchronous for a hybrid model, "
                        "whatever \"async\" says")
            self._async = True
        # a host cache's hit in tierd's RAM is a memory copy by the CPU that
        # runs the model: on a thread it overlaps nothing and costs the
        # request a step of waiting with its blocks held, so it is loaded in
        # the step; a hybrid load stays on the thread (its failures can only
        # be told whole, through failed_recving)
        self._loads_auto = self._async and loads_mode == "auto" and self._host and \
            not self._hybrid
        # saves fenced before the next forward pass (handle_preemptions), so
        # a finished request's blocks need not be held for them: a host
        # cache (its copy is as fast as the scheduling between steps), and a
        # hybrid model (its sliding groups' freed blocks need the fence
        # anyway). A CUDA cache holds them instead, so the next step's
        # kernels are never queued behind the last step's copies.
        # Both sides decide from the config alone: a worker that did not
        # fence where its scheduler frees at once would save reused blocks.
        # Not under vLLM's model runner V2: it zeroes a step's new blocks (a
        # Mamba or mixed-precision cache: hybrid models) and copies Mamba
        # states into them before pre_forward, where it calls
        # handle_preemptions: too late for a fence
        self._fenced = self._async and (self._host or self._hybrid) and \
            not _model_runner_v2(vllm_config)
        if role == KVConnectorRole.SCHEDULER:
            # one scheduler serves every rank of every stage: a hit counts
            # only where all have it
            descs = [namespace_desc(vllm_config, kv_cache_config, r, p)
                     for p in range(pp_size) for r in range(tp_size)]
            self._reqs = {}
            self._seed_checked = False
            self._finished = []    # ended with saves behind them, for the next metadata
            self._resets = 0       # reset_cache calls, told to the workers
            self._loading = set()  # requests with an asynchronous load handed out
            # a step's output reaches this scheduler only after the next step
            # has been scheduled when vLLM runs several at once (pipeline
            # stages, async scheduling): at the schedule of step N +
            # max_concurrent_batches, step N's output has been processed
            try:
                self._depth = max(1, int(vllm_config.max_concurrent_batches))
            except (AttributeError, TypeError, ValueError):
                self._depth = 1
            self._late = []        # _Late: finished with withheld blocks
            self._inline_steps = []  # [steps left, blocks]: loads within the step whose
            #                          outcome is not known yet (see _open_gates)
            self._late_saves = []  # their saves, for the next metadata
        else:
            rank, stage = _worker_ranks()
            self._pin_at = stage * tp_size + rank   # this worker's pin in a load's list
            self._desc = namespace_desc(vllm_config, kv_cache_config, rank, stage)
            expect = len(self._layer_names) if self._hybrid else \
                stage_layers(vllm_config, group, stage, pp_size)
            if len(self._layer_names) != expect:
                raise KvtierConfigError(
                    "kvtier: pipeline stage %d holds %d KV layers, not the %d of vLLM's "
                    "partition: the scheduler would look its blocks up in another "
                    "namespace" % (stage, len(self._layer_names), expect))
            descs = [self._desc]
            self._layout = None
            self._layouts = None      # hybrid: one per group, in the namespace's order
            self._stream_dev = None
            self._load_errors = set()
            self._failed_recving = set()   # hybrid: loads that failed, for vLLM
            self._loader = self._saver = None   # asynchronous: made with the layout
            self._inline = None       # auto loads: the connection of loads in the step
            self._finishing = set()   # finished requests whose saves may still run
            self._resets_seen = 0     # the scheduler's resets this worker has acted on
        self._tierd = _Tierd(socket, descs, self._retry_s,
                             lookup_ms if role == KVConnectorRole.SCHEDULER else 0)
        log.info("kvtier: %s connector on %s; block hashes seeded with %r (%s); failed "
                 "loads: %s; %s loads and saves%s", role.name.lower(),
                 socket or kvtier.default_socket(), self._seed, origin, policy,
                 "asynchronous" if self._async else "synchronous",
                 " (hits in tierd's RAM loaded in the step; saves fenced before the next "
                 "forward pass)" if self._loads_auto else
                 " (saves fenced before the next forward pass)" if self._fenced else "")
        if not self._loads:
            log.info("kvtier: kv_role %r: saves only, no loads", getattr(ktc, "kv_role", None))

    # ---- scheduler side --------------------------------------------------

    def _check_seed(self):
        """Once, at the first lookup (vLLM sets NONE_HASH after making its
        scheduler): say so if vLLM's NONE_HASH is not the seed's."""
        self._seed_checked = True
        nh = _vllm_none_hash()
        if nh is not None and nh != kvtier.none_hash(self._seed):
            log.warning("kvtier: vLLM's NONE_HASH is not that of seed %r: its block hashes "
                        "are still the keys, but kvt_hash_prompt (tierctl hash) with that "
                        "seed gives others, and other instances share these blocks only if "
                        "they hash alike", self._seed)

    def _align_state_chunks(self):
        """Once, at the first lookup of a model with a state group: vLLM's
        "align" mode ends prefill chunks at multiples of cache_config's
        block size, which its CPU build (0.32) hands the scheduler at its
        default (128) though the KV cache's blocks are a state's page wide
        (384 tokens and more); a chunk that ends inside a block leaves no
        state to save or to resume from. The cache's block size is the one
        vLLM aligns to on a GPU, so this changes nothing there."""
        cc = self._vllm.cache_config
        if cc.block_size != self._block_size:
            log.warning("kvtier: vLLM aligns prefill chunks to %d tokens, its KV cache's "
                        "blocks hold %d: aligning them to the blocks, so that a state "
                        "exists at each block boundary", cc.block_size, self._block_size)
            cc.block_size = self._block_size

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if not self._seed_checked:
            self._check_seed()
            if self._states:
                self._align_state_chunks()
        keys = list(request.block_hashes)
        # vLLM computes at least the prompt's last token itself
        usable = min(len(keys), (request.num_tokens - 1) // self._block_size)
        st = self._reqs.setdefault(request.request_id, _ReqState(request))
        if st.load_failed or not self._loads:
            usable = 0
        if st.hit_cap is not None:
            usable = min(usable, st.hit_cap)
        if self._hybrid:
            usable = min(usable, kvtier.BATCH_MAX)   # a hybrid lookup's most blocks
        # asked again (vLLM could not schedule it): the new pins replace the
        # old, which go first so that both never count against the budget
        self._tierd.unpin(st.pins)
        st.pins = []
        pins = []
        where = []                 # auto loads: each rank's tier of each key looked up

        def look(spaces):
            # the leading run every rank's namespace holds, pinned
            hit = usable
            pins.clear()           # a first try's died with its connection
            where.clear()
            hybrid = []
            for at, ns in enumerate(spaces):
                if hit == 0:
                    break
                if isinstance(ns, kvtier.HybridNamespace):
                    # its groups hold different ranges of the prefix: pinned
                    # once the hit over every rank is known
                    hybrid.append(at)
                    pins.append([])
                    hit = min(hit, ns.lookup(keys[:hit]))
                    continue
                try:
                    if self._loads_auto:
                        found, pin_id, _, tiers = ns.lookup_pin(keys[:hit], self._pin_ms,
                                                                tiers=True)
                        where.append(tiers)
                    else:
                        found, pin_id, _ = ns.lookup_pin(keys[:hit], self._pin_ms)
                except kvtier.KvtierError as e:
                    if e.code != -errno.EBUSY:
                        raise
                    found, pin_id = ns.lookup(keys[:hit]), 0   # out of pins: unheld
                    where.append(None)     # unknown: the thread's
                pins.append(pin_id)
                # what the tenant's pin budget did not hold may be evicted
                # before the load, and is then reported and recomputed as
                # without pins
                hit = min(hit, found)
            if hit * self._block_size > num_computed_tokens:
                for at in hybrid:
                    self._pin_groups(spaces[at], keys, num_computed_tokens // self._block_size,
                                     hit, pins[at])
            return hit

        # tierd away or refusing: a miss, never a failed request
        ok, hit = self._tierd.call("lookup", look) if usable else (False, 0)
        if not ok or hit * self._block_size <= num_computed_tokens:
            self._tierd.unpin(pins)   # nothing for the workers to load: held for nobody
            pins, hit = [], (hit if ok else 0)
        st.pins = pins + [0] * (len(self._tierd.ns) - len(pins)) if pins else []
        st.request = request
        st.local_tokens = num_computed_tokens
        st.hit_blocks = hit
        extra = hit * self._block_size - num_computed_tokens
        st.load_async = False
        if extra <= 0:
            return 0, False
        st.load_async = self._async
        if self._loads_auto:
            # in the step only if every rank's every block to load was in RAM
            first = num_computed_tokens // self._block_size
            st.load_async = any(t is None or any(x != kvtier.TIER_WARM for x in t[first:hit])
                                for t in where)
        return extra, st.load_async

    def _pin_groups(self, ns, keys, local, hit, got):
        """Pin in each group of hybrid namespace ns the blocks its rule needs
        to restore the prefix of hit blocks (a window's last blocks, a
        state's one) that the load reads: none of the first `local`, which
        vLLM holds. The pins go into got as they are taken (so a failure
        midway still releases them). What the tenant's pin budget does not
        hold may be evicted before the load, which then fails whole and is
        recomputed, as without pins."""
        for g in range(ns.groups):
            first, last = ns.group_needs(g, hit - 1)
            first = max(first, min(local, last))
            try:
                _, pin_id, _ = ns.group(g).lookup_pin(keys[first:last + 1], self._pin_ms)
            except kvtier.KvtierError as e:
                if e.code != -errno.EBUSY:
                    raise
                pin_id = 0     # out of pins: unheld
            got.append(pin_id)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        st = self._reqs.setdefault(request.request_id, _ReqState(request))
        st.request = request
        if num_external_tokens <= 0:
            self._tierd.unpin(st.pins)   # vLLM loads nothing of it
            st.pins = []
            return
        first = st.local_tokens // self._block_size
        n = num_external_tokens // self._block_size
        if self._hybrid:
            # a sliding group's blocks before its window are vLLM's null block
            # (0): the worker fills only the others
            load = _Load(request.request_id, list(request.block_hashes[:first + n]), [],
                         st.pins, first=first,
                         group_ids=[list(g[:first + n]) for g in blocks.get_block_ids()])
            st.loaded = None       # failures come whole (failed_recving), not by block
        else:
            ids = blocks.get_block_ids()[0]
            load = _Load(request.request_id, list(request.block_hashes[first:first + n]),
                         list(ids[first:first + n]), st.pins, on_thread=st.load_async)
            st.loaded = (first, load.block_ids)
        st.pins = []               # the workers release them once loaded
        st.pending_load = load
        if st.load_async:
            self._loading.add(request.request_id)
        # what is loaded is in kvtier already: no need to save it again
        st.saved_blocks = max(st.saved_blocks, first + n)

    def update_connector_output(self, connector_output):
        # blocks that failed to load: vLLM recomputes them (and what follows),
        # and they are saved again as they become full, so that kvtier holds
        # them again (a block that failed its checksum is gone from it). A
        # stale match (a preempted request's block loaded into by another)
        # costs a save of blocks kvtier mostly holds already
        for req_id in getattr(connector_output, "finished_recving", None) or ():
            self._loading.discard(req_id)
        for req_id in getattr(connector_output, "failed_recving", None) or ():
            st = self._reqs.get(req_id)
            if st is not None:     # vLLM computes the whole request again
                st.load_failed = True
                st.saved_blocks = 0
        bad = getattr(connector_output, "invalid_block_ids", None)
        if not bad:
            return
        self._failed_loads(set(bad))
        for st in self._reqs.values():
            if st.loaded is None:
                continue
            first, ids = st.loaded
            at = next((i for i, b in enumerate(ids) if b in bad), None)
            if at is not None:
                st.saved_blocks = min(st.saved_blocks, first + at)
                st.loaded = None
                # vLLM asks again when nothing before the failed block was
                # computed: offering that block again could fail again, forever
                st.hit_cap = first + at

    def build_connector_meta(self, scheduler_output):
        meta = KvtierConnectorMetadata(resets=self._resets)
        self._open_gates()
        meta.saves, self._late_saves = self._late_saves, []
        inline = set()             # engine blocks a load fills within this step
        for st in self._reqs.values():
            if st.pending_load is not None:
                ld = st.pending_load
                meta.loads.append(ld)
                if not (self._async and ld.on_thread):
                    inline.update(ld.block_ids)
                st.pending_load = None
        if inline:
            self._inline_steps.append([self._depth, inline])
        if self._async:
            meta.finished, self._finished = self._finished, []
            # vLLM frees a preempted request's blocks at once: the workers end
            # its saves before this step may write into them
            # (all of them: one aborted since, its state gone here, may still
            # have a save reading its blocks; a request with none costs nothing)
            meta.preempted = sorted(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for req_id, n_sched in scheduler_output.num_scheduled_tokens.items():
            st = self._reqs.get(req_id)
            if st is None:
                continue
            req = st.request
            # full blocks whose KV exists once this step has run
            done = self._full_blocks(req, req.num_computed_tokens + n_sched)
            if done <= st.saved_blocks:
                continue
            groups = self._block_ids(req_id)
            if groups is None or any(len(g) < done for g in groups):
                continue
            # withheld (see _open_gates) while a load within a step it reads
            # has an outcome vLLM's scheduler has not seen: this step's, or
            # an earlier one's (vLLM caches such blocks at once, so a
            # request scheduled since may hold them as its local hit)
            ids = groups[0][:done]
            for left, blocks in self._inline_steps:
                if left > st.gate and not blocks.isdisjoint(ids):
                    st.gate = left
            if st.gate:
                continue
            first = st.saved_blocks
            sv = self._save_of(req, groups[0], first, done)
            if self._hybrid:
                sv.group_ids = [list(g[first:done]) for g in groups]
            if self._states and req.num_computed_tokens + n_sched == done * self._block_size:
                # the step ends on a block boundary: vLLM's "align" mode keeps
                # the state after it in that block's slot (after any other
                # end, no block holds its state)
                sv.state_at = done - 1 - first
            meta.saves.append(sv)
            st.saved_blocks = done
            st.saving = True
        return meta

    # A load within the step (synchronous, or a hit in RAM on a host cache)
    # that fails is reported to vLLM only after the step's forward pass has
    # run: that pass computed the request's next blocks on top of blocks
    # that never arrived, and a request of the same step that took those
    # blocks as its local prefix hit read them too. vLLM recomputes them;
    # a save of that step would store them under their keys, and kvtier
    # keeps the first copy of a key (the recomputed blocks' saves are
    # skipped): wrong bytes served to every later hit, on every rank that
    # stored them. So the blocks of every request that reads a block loaded
    # within the step are withheld (st.gate) until the step's
    # output has reached the scheduler (update_connector_output: the blocks
    # that failed, from every rank), and saved only then, from where vLLM
    # recomputes.

    def _open_gates(self):
        """At each schedule: one step less to wait for every withheld request;
        finished ones whose wait is over are handed out (their save unless a
        failed load reached it) and released."""
        for st in self._reqs.values():
            if st.gate:
                st.gate -= 1
        for step in self._inline_steps:
            step[0] -= 1
        self._inline_steps = [step for step in self._inline_steps if step[0] > 0]
        keep = []
        for late in self._late:
            late.gate -= 1
            if late.gate > 0:
                keep.append(late)
                continue
            if late.save is not None:
                self._late_saves.append(late.save)
            self._finished.append(late.req_id)
        self._late = keep

    def _failed_loads(self, bad):
        """A step's blocks that failed to load (bad), from its output: every
        withheld request that holds one is saved again from there."""
        for req_id, st in self._reqs.items():
            if not st.gate:
                continue
            groups = self._block_ids(req_id)
            at = next((i for i, b in enumerate(groups[0] if groups else ()) if b in bad),
                      None)
            if at is not None:
                st.saved_blocks = min(st.saved_blocks, at)
        for late in self._late:
            if late.save is not None and not bad.isdisjoint(late.blocks):
                log.warning("kvtier: request %s: finished after a failed load it read; %d "
                            "blocks not saved", late.req_id, len(late.save.keys))
                late.save = None

    def _finished_withheld(self, request, st):
        """request_finished of a request whose blocks are withheld: a _Late
        (asynchronous: vLLM holds its blocks for it) or None (nothing to
        save, or synchronous: they are not saved)."""
        req = request
        done = self._full_blocks(req, req.num_computed_tokens)
        groups = self._block_ids(req.request_id)
        if not self._async or self._hybrid or groups is None or done <= st.saved_blocks \
                or len(groups[0]) < done:
            return None
        sv = self._save_of(req, groups[0], st.saved_blocks, done)
        return _Late(req.request_id, sv, set(groups[0][:done]), st.gate)

    def _full_blocks(self, req, tokens):
        """How many of req's blocks are full once tokens of it are computed."""
        return min(len(req.block_hashes), tokens // self._block_size)

    @staticmethod
    def _save_of(req, ids, first, done):
        """The save of req's blocks [first, done), in engine blocks ids (the
        first group's)."""
        return _Save(req.request_id, req.block_hashes[first - 1] if first else None,
                     list(req.block_hashes[first:done]), list(ids[first:done]))

    def has_pending_push_work(self):
        # a finished request's withheld save still to hand out: vLLM steps on
        # (it would otherwise hold the request's blocks until its next request)
        return bool(getattr(self, "_late", None))

    def _block_ids(self, req_id):
        """The request's engine block ids, a list per KV cache group."""
        mgr = self._kv_cache_manager
        if mgr is None:
            return None
        return [list(g) for g in mgr.get_block_ids(req_id)]

    def request_finished(self, request, block_ids):
        st = self._reqs.pop(request.request_id, None)
        if st is None:
            return False, None
        self._tierd.unpin(st.pins)
        if st.pending_load is not None:   # planned, never sent to the workers
            self._tierd.unpin(st.pending_load.pins)
        # asynchronous saves read the blocks after the step: vLLM frees them
        # once every worker has said its saves are done (get_finished). A
        # request whose load is still out has no save behind it (those of a
        # preemption were waited for), and vLLM holds its blocks for the load
        # already: held twice, it would be freed twice. (vLLM sets the
        # finished status before it calls this: the status cannot tell.)
        loading = request.request_id in self._loading
        self._loading.discard(request.request_id)
        late = self._finished_withheld(request, st) if st.gate and not loading else None
        if late is not None:
            self._late.append(late)   # released by _open_gates
            return True, None
        if not self._async or self._fenced or not st.saving or loading:
            return False, None
        self._finished.append(request.request_id)
        return True, None

    def reset_cache(self):
        """vLLM's reset_prefix_cache(reset_connector=True), after a weight
        update: the blocks kvtier holds for this model were computed with the
        old weights, so every namespace of the model (each rank's, each
        stage's, each group's of a hybrid model) is purged; a later save
        stores the new weights' blocks. True once all are, False (vLLM says
        the reset failed) when tierd is away or a namespace stayed busy
        (leased, being written) for RESET_TIMEOUT_S."""
        deadline = time.monotonic() + self.RESET_TIMEOUT_S
        # the workers purge again once their saves in flight have landed
        # (old weights' blocks too), at the next step
        self._resets += 1
        # this scheduler's own pins hold blocks of the model: gone with them
        # (a hit looked up before the reset is looked up again, or its load
        # fails and is recomputed)
        for st in self._reqs.values():
            self._tierd.unpin(st.pins)
            st.pins = []
            if st.gate:
                # withheld blocks were computed with the old weights: never saved
                st.saved_blocks = max(st.saved_blocks, self._full_blocks(
                    st.request, st.request.num_computed_tokens))
        for late in self._late:
            late.save = None
        self._late_saves = []

        def purge(spaces):
            c = self._tierd.client
            c.set_timeout(0)    # a large namespace's purge outlasts a lookup's bound
            try:
                return purge_namespaces(c, spaces, deadline)
            finally:
                c.set_timeout(self._tierd.timeout_ms)

        ok, removed = self._tierd.call("connector cache reset (purge)", purge)
        if ok:
            log.info("kvtier: connector cache reset: %d blocks purged", removed)
        else:
            log.warning("kvtier: connector cache reset failed: tierd still holds this "
                        "model's blocks (purge them with tierctl)")
        return ok

    RESET_TIMEOUT_S = 10

    def request_finished_all_groups(self, request, block_ids):
        # vLLM's hybrid allocator (SupportsHMA) calls this instead
        return self.request_finished(request, block_ids)

    # ---- worker side ------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        names = [n for g, _ in self._groups for n in g.layer_names]
        missing = [n for n in names if n not in kv_caches]
        if missing:
            raise KvtierConfigError("kvtier: no KV tensor for layers %s" % missing[:4])
        # a group's blocks are touched only through its own layers: vLLM's
        # groups share one allocation, and a block id is one group's
        layouts = []
        want = self._desc["block_bytes"] if self._hybrid else [self._desc["block_bytes"]]
        for (g, kind), bb in zip(self._groups, want):
            spec = g.kv_cache_spec
            if kind == "state":
                lay = StateLayout([kv_caches[n] for n in g.layer_names], state_bytes(spec))
            else:
                lay = layout_for_tensors([kv_caches[n] for n in g.layer_names],
                                         spec.block_size, spec.num_kv_heads, spec.head_size)
            if lay.block_bytes != bb:
                raise KvtierConfigError("kvtier: KV tensors give %d-byte blocks, the namespace "
                                        "%d" % (lay.block_bytes, bb))
            layouts.append(lay)
        tensors = [kv_caches[n] for n in names]
        self._layouts = layouts
        self._layout = next(lay for lay in layouts if not isinstance(lay, StateLayout))
        # the namespace named the scales from the config (kv_variant); scales
        # it did not account for would share other bytes under one name
        odd = scaled_layers(self._vllm, names)
        if odd and self._desc["dtype"].startswith("fp8") and self._desc["variant"] is None:
            raise KvtierConfigError(
                "kvtier: layers %s hold KV scales other than 1.0 that neither a quantization "
                "method nor calculate_kv_scales explains: their FP8 blocks would be shared "
                "with unscaled ones" % odd[:4])
        dev = tensors[0].device
        self._stream_dev = dev if dev.type == "cuda" else None
        if self._async and self._loader is None:
            # the loader has the worker's connection; the saver one of its own,
            # so that saves never wait behind loads, nor loads behind saves
            self._loader = _Mover("load", self._tierd, self._stream_dev, keep=True)
            self._saver = _Mover("save", _Tierd(self._socket, [self._desc], self._retry_s),
                                 self._stream_dev, keep=False)
            if self._loads_auto:
                # loads in the step come from this thread: a kvt_client serves
                # one thread at a time, and the loader's is the loader's
                self._inline = _Tierd(self._socket, [self._desc], self._retry_s)
        log.info("kvtier: %d layers, %d blocks of %s bytes, namespace %s %s %s rank %d/%d "
                 "stage %d/%d%s", len(tensors), self._layout.c.num_blocks,
                 "+".join(str(lay.block_bytes) for lay in layouts) + (
                     " (groups %s)" % ", ".join(k for _, k in self._groups)
                     if self._hybrid else ""),
                 self._desc["model_id"], self._desc["dtype"],
                 self._desc["layout"], self._desc["tp_rank"], self._desc["tp_size"],
                 self._desc["pp_rank"], self._desc["pp_size"],
                 " " + self._desc["variant"].decode() if self._desc["variant"] else "")

    def _stream(self):
        if self._stream_dev is None:
            return None
        return torch.cuda.current_stream(self._stream_dev).cuda_stream

    def _load(self, tierd, ld, stream):
        """Restore load ld's blocks through tierd (a _Tierd) and release this
        worker's pin, whatever happens: how many of them arrived (the
        leading run; hybrid: all or none)."""
        try:
            return self._restore(tierd, ld, stream)
        finally:
            if self._pin_at < len(ld.pins):
                tierd.unpin(ld.pins[self._pin_at:self._pin_at + 1])   # loaded: let go

    def _restore(self, tierd, ld, stream):
        if self._hybrid:
            ok, got = tierd.call("request %s: restore" % ld.req_id,
                                 lambda spaces: self._restore_groups(spaces[0], ld, stream))
        else:
            ok, got = tierd.call(
                "request %s: restore" % ld.req_id,
                lambda spaces: spaces[0].restore(ld.keys, self._layout, ld.block_ids,
                                                 stream=stream))
        got = got if ok else 0
        return got

    def _restore_groups(self, ns, ld, stream):
        """A hybrid load: blocks [ld.first, len(ld.keys)) of every group, or
        none (0). Each KV group fills every block vLLM gave it there but its
        null ones (0: a sliding group's blocks before its window): a block
        vLLM holds as computed and was not given would be read, or served
        to a later prefix hit, with someone else's bytes. A state group
        fills one block: the hit's last, with the state after it."""
        n = len(ld.keys)
        if ns.lookup(ld.keys) < n:
            return 0
        for g, ((_, kind), lay, ids) in enumerate(zip(self._groups, self._layouts,
                                                      ld.group_ids)):
            if kind == "state":
                # the state after the hit's last block, into the block vLLM
                # gave that position: the one its next step continues from
                if ids[n - 1] == 0 or not lay.restore(ns.group(g), ld.keys[n - 1], ids[n - 1]):
                    return 0
                continue
            a = ld.first
            if kind == "sliding":
                while a < n and ids[a] == 0:
                    a += 1
            if a == n:
                continue
            if 0 in ids[a:] or ns.group(g).restore(ld.keys[a:], lay, ids[a:],
                                                   stream=stream) != n - a:
                return 0           # evicted since the lookup, or a hole: recomputed
        return n - ld.first

    def _loaded(self, ld, got):
        if self._hybrid:
            if got < len(ld.keys) - ld.first:
                log.warning("kvtier: request %s: the load of %d blocks failed; vLLM "
                            "recomputes it", ld.req_id, len(ld.keys) - ld.first)
                # whole, even with one group: vLLM would recompute from the
                # first failed block with its window's null blocks before it
                # (and with several groups block ids name nothing)
                self._failed_recving.add(ld.req_id)
            return
        if got < len(ld.keys):
            # not held (tierd away or restarted, a checksum or disk error):
            # vLLM recomputes these blocks (the restore wrote none of them)
            self._load_errors.update(ld.block_ids[got:])
            log.warning("kvtier: request %s: %d of %d blocks restored", ld.req_id, got,
                        len(ld.keys))

    def _save(self, tierd, sv, stream, ready=None):
        """Offload save sv's blocks through tierd, once the step that
        computed them is done on the device (ready: its CUDA event)."""
        if ready is not None:
            ready.synchronize()
        if self._hybrid:
            tierd.call("request %s: offload of %d blocks" % (sv.req_id, len(sv.keys)),
                       lambda spaces: self._offload_groups(spaces[0], sv, stream))
            return
        # a save lost (tierd away, a failure) is a future miss, never a wrong
        # answer
        tierd.call("request %s: offload of %d blocks" % (sv.req_id, len(sv.keys)),
                   lambda spaces: spaces[0].offload(sv.keys, self._layout, sv.block_ids,
                                                    parent=sv.parent, stream=stream))

    def _split_last(self, sv):
        """Whether save sv's last block goes in a batch of its own, so that
        the one before it ends a batch too and has its window stored: vLLM
        computes a prompt's last token itself, so the same prompt again
        (one that ends on a block boundary) asks for a hit one block short
        of it. Only for sliding groups (a state group has only the state
        where the step ended), and only where vLLM still holds the one
        block more that window reads (a save of blocks vLLM's own cache had
        may come after it freed it)."""
        n = len(sv.keys)
        kinds = [kind for _, kind in self._groups]
        if n < 2 or "sliding" not in kinds or "state" in kinds:
            return False
        for (g, kind), ids in zip(self._groups, sv.group_ids):
            if kind != "sliding":
                continue
            first = n - 1 - window_blocks(g.kv_cache_spec.sliding_window, self._block_size)
            if first >= 0 and ids[first] == 0:
                return False
        return True

    def _offload_groups(self, ns, sv, stream):
        """A hybrid save, in batches of BATCH_MAX: each batch stores every
        full group's blocks, each sliding group's window of the batch's
        last block and a state group's state of key sv.state_at
        (kvt_offload_hybrid). A null block where a group would
        read (vLLM freed it) skips the rest: a block never stored is a miss,
        one stored from the null block a wrong answer."""
        stored, n = 0, len(sv.keys)
        starts = set(range(0, n, kvtier.BATCH_MAX))
        if self._split_last(sv):
            starts.add(n - 1)
        starts = sorted(starts)
        for i, j in zip(starts, starts[1:] + [n]):
            keys = sv.keys[i:j]
            ios = []
            for (g, kind), lay, ids in zip(self._groups, self._layouts, sv.group_ids):
                ids = ids[i:j]
                if kind == "state":
                    ios.append(self._state_io(sv, lay, ids, i))
                    continue
                read = ids if kind == "full" else \
                    ids[-window_blocks(g.kv_cache_spec.sliding_window, self._block_size):]
                if 0 in read:
                    log.warning("kvtier: request %s: a block to save is no longer held by "
                                "vLLM; %d blocks not saved", sv.req_id, len(sv.keys) - i)
                    return stored
                ios.append(kvtier.GroupIO(lay, ids))
            stored += ns.offload_groups(keys, ios, parent=sv.keys[i - 1] if i else sv.parent,
                                        stream=stream)
        return stored

    def _state_io(self, sv, lay, ids, at):
        """A state group's GroupIO for the batch of save sv from key at: the
        state of key sv.state_at if the batch has it, else none."""
        states = [None] * len(ids)
        k = None if sv.state_at is None else sv.state_at - at
        if k is not None and 0 <= k < len(ids):
            if ids[k] == 0:     # never read vLLM's null block as a state
                log.warning("kvtier: request %s: the state to save is no longer held by "
                            "vLLM; not saved", sv.req_id)
            else:
                states[k] = lay.gather(ids[k])
        return kvtier.GroupIO(states=[None if t is None else t.data_ptr() for t in states],
                              state_bytes=lay.block_bytes, keep=states)

    def start_load_kv(self, forward_context, **kwargs):
        if not self.has_connector_metadata() or self._layout is None:
            return
        meta = self._get_connector_metadata()
        if self._hybrid and meta.loads:
            # a sliding block vLLM freed since the last step may be one a
            # load now fills: the saves that read it end first
            self._saver.wait()
        for ld in meta.loads:
            if self._async and ld.on_thread:
                def job(tierd, stream, ld=ld):
                    try:
                        got = self._load(tierd, ld,
                                         None if stream is None else stream.cuda_stream)
                        if stream is not None:
                            stream.synchronize()   # in vLLM's blocks before it hears so
                    except Exception:
                        log.exception("kvtier: request %s: restore", ld.req_id)
                        got = 0                    # vLLM recomputes them all
                    return ld, got
                self._loader.submit(ld.req_id, job)
            else:
                tierd = self._tierd if self._inline is None else self._inline
                self._loaded(ld, self._load(tierd, ld, self._stream()))

    def handle_preemptions(self, kv_connector_metadata):
        # vLLM frees a preempted request's blocks at once, and this step may
        # write another request's KV into them: its saves must be done first.
        # A hybrid model's sliding groups free the blocks that left their
        # window at every step, unannounced: all saves end before the next
        # forward pass (they still overlap the scheduling between steps)
        if self._saver is None:
            return
        if kv_connector_metadata.resets > self._resets_seen:
            self._after_reset(kv_connector_metadata.resets)
        if self._fenced or self._hybrid:
            self._saver.wait()     # the fence: see the module's docstring
        elif kv_connector_metadata.preempted:
            self._saver.wait(kv_connector_metadata.preempted)

    def _after_reset(self, resets):
        """The scheduler reset the cache (reset_cache) since the last step:
        saves of old weights' blocks that were in flight then land first,
        then this rank's namespace is purged again, before this step
        computes with the new weights. Synchronous mode has none in flight."""
        self._saver.wait()
        deadline = time.monotonic() + self.RESET_TIMEOUT_S
        ok, _ = self._saver.tierd.call(
            "connector cache reset (purge after the saves in flight)",
            lambda spaces: purge_namespaces(self._saver.tierd.client, spaces, deadline))
        if not ok:
            log.warning("kvtier: after a cache reset, saves of the old weights' blocks may "
                        "remain in tierd (purge this model's namespaces with tierctl)")
        self._resets_seen = resets

    def wait_for_layer_load(self, layer_name):
        return      # start_load_kv restored every layer already

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return      # wait_for_save gathers every layer at once

    def wait_for_save(self):
        if not self.has_connector_metadata() or self._layout is None:
            return
        meta = self._get_connector_metadata()
        if not self._async:
            for sv in meta.saves:
                self._save(self._tierd, sv, self._stream())
            return
        ready = None
        if meta.saves and self._stream_dev is not None:
            # the step's kernels that compute these blocks are queued, not done
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self._stream_dev))
        for sv in meta.saves:
            def job(tierd, stream, sv=sv):
                self._save(tierd, sv, None if stream is None else stream.cuda_stream, ready)
                if stream is not None:
                    stream.synchronize()
            self._saver.submit(sv.req_id, job)

    def get_finished(self, finished_req_ids):
        """Asynchronous: (requests whose blocks vLLM kept for their saves and
        whose saves are done, requests whose load is done, failed or not);
        the blocks a load could not fill go to get_block_ids_with_load_errors,
        which vLLM asks next, in the same step."""
        if not self._async or self._loader is None:
            return None, None
        if self.has_connector_metadata():
            self._finishing.update(self._get_connector_metadata().finished)
        recving = set()
        for req_id, (ld, got) in self._loader.collect():
            recving.add(req_id)
            self._loaded(ld, got)
        sending = {r for r in self._finishing if not self._saver.busy(r)}
        self._finishing -= sending
        return sending or None, recving or None

    def get_transfer_results(self, finished_req_ids):
        """get_finished's sets, and a hybrid model's failed loads
        (failed_recving, also finished: vLLM recomputes the request whole)."""
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorTransferResults)
        sending, recving = self.get_finished(finished_req_ids)
        failed, self._failed_recving = self._failed_recving, set()
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()) | failed,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self):
        errs, self._load_errors = self._load_errors, set()
        return errs

    def shutdown(self):
        movers = [m for m in (getattr(self, "_loader", None), getattr(self, "_saver", None))
                  if m is not None]
        for m in movers:
            m.close(10)       # each closes its connection (the loader's is self._tierd)
        if not movers:
            self._tierd.close()
        if getattr(self, "_inline", None) is not None:
            self._inline.close()

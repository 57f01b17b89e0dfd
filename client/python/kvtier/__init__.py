# SPDX-License-Identifier: MIT
"""kvtier from Python: a thin ctypes layer over libkvtier.so.

No compiled extension. The library is, in this order: $KVTIER_LIB (a path;
one that does not load is an ImportError naming it), else an installed
libkvtier.so.0 on the loader's search path (LD_LIBRARY_PATH, ld.so.cache:
make install, the libkvtier0 package), else, run from a checkout, the
build/ folder of the checkout this package sits in (make); lib_path says
which was loaded. `pip install ./client/python` installs the package.

Every call maps one C call of client/kvtier.h; errors become KvtierError (a
negative code and kvt_strerror's text). Data views are zero copy: put
reservations and get leases hand out memoryviews straight into tierd's
shared warm pool, valid until commit / abort / release, and never past
Client.close(), which releases them (a use then raises).

Threads: libkvtier asks that one thread at a time use a client and its
namespaces; here each Client holds a lock that every call through it takes,
so a Client may be shared between threads (calls are then serialised).
"""
import ctypes
import gc
import os
import threading
import weakref

# libkvtier's version (the Makefile's VERSION); its first number is the
# library's soname, libkvtier.so.0. pyproject.toml reads it from here.
__version__ = "0.2.0"

__all__ = [
    "KEY_BYTES", "BATCH_MAX", "KvtierError", "Client", "Namespace", "Reservation",
    "Lease", "Layout", "ModelDesc", "HybridNamespace", "GroupIO", "hash_prompt", "none_hash", "default_socket",
    "model_from_config", "strerror", "TIER_NONE", "TIER_HOT", "TIER_WARM", "TIER_COLD",
    "lib_path", "EDISCONNECTED",
]

KEY_BYTES = 32
BATCH_MAX = 1024
TIER_NONE, TIER_HOT, TIER_WARM, TIER_COLD = 0, 1, 2, 3
TIER_NAMES = ("none", "hot", "warm", "cold")
LOOKUP_PREFETCH = 0x1
PIN_MAX_MS = 60000  # KVT_PIN_MAX_MS: the longest hold a pin may ask
COMMIT_DURABLE = 0x1
EDISCONNECTED = -4101  # KVT_EDISCONNECTED: tierd closed the connection or died (sticky)
MISS_CAUSES = ("never", "dropped", "evicted", "checksum", "io_error", "removed",
               "aborted", "writing", "broken")
LAYER_KINDS = ("full", "mla", "indexer", "sliding", "state", "none")


# ---- C types (mirrors of client/kvtier.h and kernels/kv_layout.h) ---------

_C_TYPES = {"u8": ctypes.c_uint8, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
            "i64": ctypes.c_int64, "str": ctypes.c_char_p, "ptr": ctypes.c_void_p,
            "size": ctypes.c_size_t}


def _decl(*parts):
    """A ctypes _fields_ list written as C declares it: each part is "type
    name name ..." (a type of _C_TYPES, then the fields of that type, in the
    struct's order) or a (name, ctype) pair for any other type."""
    out = []
    for p in parts:
        if isinstance(p, tuple):
            out.append(p)
            continue
        kind, *names = p.split()
        out.extend((n, _C_TYPES[kind]) for n in names)
    return out

class _Key(ctypes.Structure):
    _fields_ = [("b", ctypes.c_uint8 * KEY_BYTES)]


class _MmItem(ctypes.Structure):
    _fields_ = [("identifier", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("length", ctypes.c_uint64)]


class _HashOpts(ctypes.Structure):
    _fields_ = [("block_tokens", ctypes.c_uint32), ("seed", ctypes.c_char_p),
                ("cache_salt", ctypes.c_char_p), ("lora_name", ctypes.c_char_p),
                ("mm", ctypes.POINTER(_MmItem)), ("n_mm", ctypes.c_size_t),
                ("parent", ctypes.POINTER(_Key)), ("start_token", ctypes.c_uint64),
                ("extra_format", ctypes.c_uint32), ("lora_path", ctypes.c_char_p)]

# kvt_hash_opts.extra_format: how a block's extra keys are written
EXTRA_TAGGED = 0    # vLLM 0.32 and later: ("lora", name, path), ("mm", id, offset), ...
EXTRA_UNTAGGED = 1  # earlier vLLM: bare LoRA name, identifiers, salt


class _Model(ctypes.Structure):
    _fields_ = _decl("str model_id dtype layout", "u32 block_tokens tp_rank tp_size",
                     "u64 block_bytes", "u32 pp_rank pp_size", "ptr variant",
                     "size variant_len")


class _Lease(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("n", ctypes.c_uint32)]


class _Commit(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("n", ctypes.c_uint32), ("client", ctypes.c_uint64)]


class _Pin(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("n", ctypes.c_uint32), ("hold_ms", ctypes.c_uint32)]


class _Layout(ctypes.Structure):
    _fields_ = _decl("u32 n_layers", ("layer_base", ctypes.POINTER(ctypes.c_void_p)),
                     "ptr base", "i64 layer_stride",
                     "u32 elem_bytes block_tokens kv_heads head_dim n_kv",
                     "i64 num_blocks stride_kv stride_block stride_token stride_head stride_dim")


_NS_U64 = ("lookups", "lookup_keys", "hit_keys", "hit_tokens", "put_blocks", "get_blocks",
           "bytes_in", "bytes_out")


class _NsInfo(ctypes.Structure):
    _fields_ = ([("id", ctypes.c_uint32), ("block_tokens", ctypes.c_uint32),
                 ("tp_rank", ctypes.c_uint32), ("tp_size", ctypes.c_uint32),
                 ("block_bytes", ctypes.c_uint64), ("model_id", ctypes.c_char * 128),
                 ("dtype", ctypes.c_char * 16), ("layout", ctypes.c_char * 32)] +
                [(n, ctypes.c_uint64) for n in _NS_U64] +
                [("misses", ctypes.c_uint64 * len(MISS_CAUSES)),
                 ("evicted_age_ms", ctypes.c_uint64), ("deadline_misses", ctypes.c_uint64)])


class _LayerGroup(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("name", ctypes.c_char_p), ("layers", ctypes.c_uint32),
                ("kv_heads", ctypes.c_uint32), ("head_dim", ctypes.c_uint32),
                ("n_kv", ctypes.c_uint32), ("elem_bytes", ctypes.c_uint32),
                ("window", ctypes.c_uint32), ("state_bytes", ctypes.c_uint64)]


class _ModelDesc(ctypes.Structure):
    _fields_ = [("model_type", ctypes.c_char * 48), ("dtype", ctypes.c_char * 16),
                ("config_dtype", ctypes.c_char * 24), ("elem_bytes", ctypes.c_uint32),
                ("num_layers", ctypes.c_uint32), ("max_model_len", ctypes.c_uint32),
                ("notes", ctypes.c_uint), ("n_groups", ctypes.c_uint32),
                ("group", _LayerGroup * len(LAYER_KINDS))]


class _HybridOpts(ctypes.Structure):
    _fields_ = [("block_tokens", ctypes.c_uint32), ("state_every", ctypes.c_uint32),
                ("sliding_all", ctypes.c_uint32)]


class _GroupIO(ctypes.Structure):
    _fields_ = [("layout", ctypes.POINTER(_Layout)), ("block_ids", ctypes.POINTER(ctypes.c_int64)),
                ("states", ctypes.POINTER(ctypes.c_void_p)), ("state_out", ctypes.c_void_p),
                ("state_bytes", ctypes.c_uint64)]


# ---- the library ------------------------------------------------------------

SONAME = "libkvtier.so.%s" % __version__.split(".")[0]


def _load_lib():
    """(the loaded libkvtier, the path or name it was loaded by)."""
    env = os.environ.get("KVTIER_LIB")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError("kvtier: KVTIER_LIB=%s does not load: %s" % (env, e)) from None
    tried = []
    try:
        return ctypes.CDLL(SONAME), SONAME     # installed: the loader's search path
    except OSError as e:
        tried.append(str(e))
    # client/python/kvtier/ in a checkout -> its build/
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "..", "build", SONAME))
    if os.path.exists(built):
        return ctypes.CDLL(built), built
    raise ImportError("kvtier: libkvtier not found: set KVTIER_LIB to its path, install it "
                      "(make install; the libkvtier0 package) or build it (make) in this "
                      "checkout (%s: %s; %s: no such file)" % (SONAME, tried[0], built))


_lib, lib_path = _load_lib()
_P = ctypes.POINTER
_c_int, _c_uint, _sz, _vp = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p
_KP = _P(_Key)


def _proto(name, res, *args):
    f = getattr(_lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_strerror = _proto("kvt_strerror", ctypes.c_char_p, _c_int)
_hash_prompt = _proto("kvt_hash_prompt", ctypes.c_ssize_t, _P(_HashOpts),
                      _P(ctypes.c_uint32), _sz, _KP)
_none_hash = _proto("kvt_none_hash", _c_int, ctypes.c_char_p, _KP)
_default_socket = _proto("kvt_default_socket", ctypes.c_char_p)
_connect = _proto("kvt_connect_timeout", _c_int, ctypes.c_char_p, ctypes.c_uint32, _P(_vp))
_close = _proto("kvt_close", None, _vp)
_ns_open = _proto("kvt_ns_open", _c_int, _vp, _P(_Model), _P(_vp))
_ns_block_bytes = _proto("kvt_ns_block_bytes", ctypes.c_uint64, _vp)
_ns_set_deadline = _proto("kvt_ns_set_deadline", None, _vp, ctypes.c_uint32)
_ns_id = _proto("kvt_ns_id", ctypes.c_uint32, _vp)
_set_timeout = _proto("kvt_set_timeout", None, _vp, ctypes.c_uint32)
_lookup = _proto("kvt_lookup", _c_int, _vp, _KP, _sz, _c_uint, _P(ctypes.c_uint8))
_lookup_pin = _proto("kvt_lookup_pin", _c_int, _vp, _KP, _sz, ctypes.c_uint32, _P(_Pin),
                     _P(ctypes.c_uint8))
_unpin = _proto("kvt_unpin", _c_int, _vp, _P(_Pin))
_reserve = _proto("kvt_put_reserve", _c_int, _vp, _KP, _KP, _sz, _P(_vp))
_commit_flags = _proto("kvt_put_commit_flags", _c_int, _vp, _KP, _sz, _c_uint)
_commit_start = _proto("kvt_put_commit_start", _c_int, _vp, _KP, _sz, _c_uint, _P(_Commit))
_commit_wait = _proto("kvt_put_commit_wait", _c_int, _vp, _P(_Commit))
_abort = _proto("kvt_put_abort", _c_int, _vp, _KP, _sz)
_put = _proto("kvt_put", _c_int, _vp, _KP, _KP, _sz, _P(_vp))
_get_lease = _proto("kvt_get_lease", _c_int, _vp, _KP, _sz, _P(_vp), _P(_Lease))
_release = _proto("kvt_release", _c_int, _vp, _P(_Lease))
_offload = _proto("kvt_offload", _c_int, _vp, _KP, _KP, _sz, _P(_Layout),
                  _P(ctypes.c_int64), _vp)
_restore = _proto("kvt_restore", _c_int, _vp, _KP, _sz, _P(_Layout), _P(ctypes.c_int64), _vp)
_remove = _proto("kvt_remove", _c_int, _vp, _KP, _sz)


class _StatsField(ctypes.Structure):
    _fields_ = _decl("str name type help", "u32 offset bytes")   # kvt_stats_field


_stats_fields = _proto("kvt_stats_fields", _P(_StatsField), _c_int, _P(_sz), _P(_sz))


def _stats_struct(name, of, tier=None):
    """(a ctypes struct laid out as the loaded libkvtier's kvt_stats (of 0,
    KVT_STATS_OF_STATS; tier: the per-tier struct, for its "tier" array) or
    kvt_tier_stats (of 1), its field names in order), from the library's own
    kvt_stats_fields() table: the counters are declared once, in C
    (kvt_stats_list.h), and this struct is never run past by the library."""
    n, size = _sz(), _sz()
    table = _stats_fields(of, ctypes.byref(n), ctypes.byref(size))
    rows = [(table[i].name.decode(), table[i].offset, table[i].bytes) for i in range(n.value)]
    fields = []
    for fname, _, nbytes in rows:
        if fname == "tier" and tier is not None:
            fields.append((fname, tier * (nbytes // ctypes.sizeof(tier))))
        else:
            fields.append((fname, {4: ctypes.c_uint32, 8: ctypes.c_uint64}[nbytes]))
    cls = type(name, (ctypes.Structure,), {"_fields_": fields})
    moved = [f for f, off, _ in rows if getattr(cls, f).offset != off]
    if moved or ctypes.sizeof(cls) != size.value:
        raise ImportError("kvtier: %s from %s's kvt_stats_fields() does not lay out as the "
                          "library says (fields %s, %d bytes, not %d)"
                          % (name, lib_path, moved, ctypes.sizeof(cls), size.value))
    return cls, tuple(f for f, _, _ in rows)


_TierStats, _TIER_STATS = _stats_struct("_TierStats", 1)
_Stats, _STATS = _stats_struct("_Stats", 0, _TierStats)
_stats_get = _proto("kvt_stats_get", _c_int, _vp, _P(_Stats))
_admin_namespaces = _proto("kvt_admin_namespaces", _c_int, _vp, _P(_NsInfo), _sz)
_admin_flush = _proto("kvt_admin_flush", _c_int, _vp)
_admin_purge = _proto("kvt_admin_purge", _c_int, _vp, ctypes.c_uint32)
_model_parse_file = _proto("kvt_model_parse_file", _c_int, ctypes.c_char_p, _P(_ModelDesc),
                           ctypes.c_char_p, _sz)
_model_set_dtype = _proto("kvt_model_set_dtype", _c_int, _P(_ModelDesc), ctypes.c_char_p)
_ns_open_hybrid = _proto("kvt_ns_open_hybrid", _c_int, _vp, _P(_Model), _P(_ModelDesc),
                         _P(_HybridOpts), _P(_vp))
_ns_groups = _proto("kvt_ns_groups", ctypes.c_uint32, _vp)
_ns_group = _proto("kvt_ns_group", _vp, _vp, ctypes.c_uint32)
_ns_group_needs = _proto("kvt_ns_group_needs", None, _vp, ctypes.c_uint32, ctypes.c_uint32,
                         ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32))
_offload_hybrid = _proto("kvt_offload_hybrid", _c_int, _vp, _KP, _KP, _sz, _P(_GroupIO), _vp)
_restore_hybrid = _proto("kvt_restore_hybrid", _c_int, _vp, _KP, _sz, _P(_GroupIO), _vp)
_model_block_bytes = _proto("kvt_model_block_bytes", ctypes.c_uint64, _P(_ModelDesc),
                            ctypes.c_uint32, ctypes.c_uint32)


# ---- errors and keys --------------------------------------------------------

def strerror(code):
    """kvt_strerror(): text for a negative errno or KVT_E* code."""
    return _strerror(code).decode()


class KvtierError(OSError):
    """A libkvtier call failed; .code is the negative error it returned."""

    def __init__(self, code, what):
        super().__init__(-code if -4096 < code < 0 else code,
                         "%s: %s" % (what, strerror(code)))
        self.code = code


def _check_ms(ms):
    """A timeout for libkvtier's uint32_t: refused outside it, not wrapped."""
    if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= 0xffffffff:
        raise ValueError("timeout_ms: a whole number of milliseconds from 0 to 4294967295, "
                         "not %r" % (ms,))


def _check(rc, what):
    if rc < 0:
        raise KvtierError(rc, what)
    return rc


def _b(s):
    return None if s is None else (s.encode() if isinstance(s, str) else bytes(s))


def _key_bytes(k):
    """One key as 32 bytes: bytes-like, or an object that converts with bytes()
    (vLLM's BlockHash is a bytes subclass)."""
    b = k if isinstance(k, bytes) else bytes(k)
    if len(b) != KEY_BYTES:
        raise ValueError("a kvtier key is %d bytes, got %d" % (KEY_BYTES, len(b)))
    return b


def _keys(keys):
    """keys (sequence of 32-byte keys) as a C array and its length."""
    keys = list(keys)
    arr = (_Key * max(1, len(keys)))()
    raw = b"".join(_key_bytes(k) for k in keys)
    ctypes.memmove(arr, raw, len(raw))
    return arr, len(keys)


def _id_batches(keys, block_ids):
    """keys and their engine block ids (as many) in batches of BATCH_MAX:
    (index of the batch's first key, its keys as a C array, their count,
    its ids as a C int64 array) for each."""
    keys, ids = list(keys), list(block_ids)
    if len(ids) != len(keys):
        raise ValueError("%d keys, %d block ids" % (len(keys), len(ids)))
    for i in range(0, len(keys), BATCH_MAX):
        arr, n = _keys(keys[i:i + BATCH_MAX])
        yield i, arr, n, (ctypes.c_int64 * n)(*ids[i:i + BATCH_MAX])


def _parent(parent):
    if parent is None:
        return None
    k = _Key()
    ctypes.memmove(k.b, _key_bytes(parent), KEY_BYTES)
    return ctypes.pointer(k)


def hash_prompt(tokens, block_tokens=16, seed="0", cache_salt=None, lora_name=None, mm=(),
                parent=None, start_token=0, lora_path=None, extra_format=EXTRA_TAGGED):
    """Keys (list of 32-byte bytes) of the full blocks of tokens: vLLM's
    sha256_cbor chain. mm: (identifier, offset, length) items sorted by offset.
    parent / start_token continue a chain from the block before tokens[0].
    extra_format: EXTRA_TAGGED (today's vLLM; a LoRA needs its lora_path) or
    EXTRA_UNTAGGED (earlier vLLM)."""
    toks = list(tokens)
    tarr = (ctypes.c_uint32 * max(1, len(toks)))(*toks)
    items = list(mm or ())
    mm_arr = (_MmItem * max(1, len(items)))()
    for i, (ident, off, length) in enumerate(items):
        mm_arr[i] = _MmItem(_b(ident), off, length)
    o = _HashOpts(block_tokens=block_tokens, seed=_b(seed), cache_salt=_b(cache_salt),
                  lora_name=_b(lora_name), mm=mm_arr if items else None, n_mm=len(items),
                  parent=_parent(parent), start_token=start_token, extra_format=extra_format,
                  lora_path=_b(lora_path))
    out = (_Key * max(1, len(toks) // max(1, block_tokens)))()
    n = _check(_hash_prompt(ctypes.byref(o), tarr, len(toks), out), "kvt_hash_prompt")
    return [bytes(out[i].b) for i in range(n)]


def none_hash(seed="0"):
    """NONE_HASH for a seed: the parent of every prompt's first block."""
    k = _Key()
    _check(_none_hash(_b(seed), ctypes.byref(k)), "kvt_none_hash")
    return bytes(k.b)


def default_socket():
    """The socket a client uses when none is given ($KVTIER_SOCKET or the default)."""
    return _default_socket().decode()


def _view(client, ptr, size, readonly):
    """A memoryview of size bytes at ptr in one of client's pools, which
    Client.close() releases (the pools are unmapped then)."""
    mv = memoryview((ctypes.c_uint8 * size).from_address(ptr)).cast("B")
    if readonly:
        mv = mv.toreadonly()
    client._views[id(mv)] = mv
    return mv


def _others(views):
    """The memoryviews other than views that read their memory: slices (which
    share a view's managed buffer) and views made from any of these (whose
    managed buffer holds the view: memoryview(view), ctypes' from_buffer),
    transitively. Design note: C code may hold such a view only to keep an
    address it reads directly (numpy.frombuffer of a slice does), so
    releasing the view would not stop a read of the unmapped pool: close
    refuses instead. Only gc knows a memoryview's dependents; its
    get_referrers scans the heap, so it runs once per level, and only when a
    client closes with views alive."""
    seen = {id(v) for v in views}
    found, level = [], list(views)
    while level:
        bufs = [b for b in gc.get_referents(*level) if type(b).__name__ == "managedbuffer"]
        bufs += [b for b in gc.get_referrers(*level) if type(b).__name__ == "managedbuffer"]
        level = [o for o in gc.get_referrers(*bufs) if isinstance(o, memoryview)
                 and id(o) not in seen] if bufs else []
        seen.update(id(o) for o in level)
        found += level
    return found


# ---- engine cache layout ------------------------------------------------------

class Layout:
    """A struct kvk_layout: where an engine's paged cache is, for offload and
    restore. Strides count elements. Keeps the pointer array it hands to C.

    layer_ptrs: one address per layer (int), or None with base/layer_stride.
    """

    def __init__(self, layer_ptrs, elem_bytes, block_tokens, kv_heads, head_dim, num_blocks,
                 stride_block, stride_token, stride_head, stride_dim=1, n_kv=2, stride_kv=0,
                 base=None, layer_stride=0, n_layers=None):
        self._ptrs = None
        if layer_ptrs is not None:
            layer_ptrs = [int(p) for p in layer_ptrs]
            self._ptrs = (ctypes.c_void_p * len(layer_ptrs))(*layer_ptrs)
            n_layers = len(layer_ptrs)
        self.c = _Layout(n_layers=n_layers, layer_base=ctypes.cast(self._ptrs, _P(_vp))
                         if self._ptrs is not None else None, base=base,
                         layer_stride=layer_stride, elem_bytes=elem_bytes,
                         block_tokens=block_tokens, kv_heads=kv_heads, head_dim=head_dim,
                         n_kv=n_kv, num_blocks=num_blocks, stride_kv=stride_kv,
                         stride_block=stride_block, stride_token=stride_token,
                         stride_head=stride_head, stride_dim=stride_dim)

    @property
    def block_bytes(self):
        """Bytes of one tier block for this layout."""
        c = self.c
        return c.n_layers * c.n_kv * c.block_tokens * c.kv_heads * c.head_dim * c.elem_bytes

    @classmethod
    def from_tensors(cls, tensors, dims="kbthd"):
        """Describe per-layer tensors (torch tensors or numpy arrays, all of one
        shape, dtype and strides) whose axes are named by dims: k (K/V, absent
        for MLA), b (block), t (token), h (head), d (dim). vLLM's flash-attn
        cache [2, num_blocks, block_size, kv_heads, head_dim] is "kbthd"."""
        tensors = list(tensors)
        if not tensors:
            raise ValueError("no tensors")
        info = [_tensor_info(t) for t in tensors]
        shape, strides, esize = info[0][1:]
        for ptr, s, st, e in info:
            if (s, st, e) != (shape, strides, esize):
                raise ValueError("tensors differ in shape, strides or dtype")
        if len(dims) != len(shape) or sorted(dims) not in (sorted("kbthd"), sorted("bthd")):
            raise ValueError("dims %r do not name the %d axes of %r" % (dims, len(shape), shape))
        ax = {d: i for i, d in enumerate(dims)}
        n_kv = shape[ax["k"]] if "k" in ax else 1
        if n_kv not in (1, 2):
            raise ValueError("the K/V axis has %d entries, expected 1 or 2" % n_kv)
        return cls([p for p, *_ in info], elem_bytes=esize, block_tokens=shape[ax["t"]],
                   kv_heads=shape[ax["h"]], head_dim=shape[ax["d"]],
                   num_blocks=shape[ax["b"]], n_kv=n_kv,
                   stride_kv=strides[ax["k"]] if "k" in ax else 0,
                   stride_block=strides[ax["b"]], stride_token=strides[ax["t"]],
                   stride_head=strides[ax["h"]], stride_dim=strides[ax["d"]])


def _tensor_info(t):
    """(address, shape, strides in elements, element size) of a torch tensor
    or numpy array."""
    if hasattr(t, "data_ptr"):     # torch
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size())
    iface = t.__array_interface__  # numpy and friends
    esize = t.itemsize
    shape = tuple(t.shape)
    if iface.get("strides") is None:
        st, acc = [], 1
        for n in reversed(shape):
            st.append(acc)
            acc *= n
        strides = tuple(reversed(st))
    else:
        if any(s % esize for s in iface["strides"]):
            raise ValueError("strides are not whole elements")
        strides = tuple(s // esize for s in iface["strides"])
    return (iface["data"][0], shape, strides, esize)


# ---- connection, namespaces, blocks --------------------------------------------

class Client:
    """A connection to tierd (kvt_connect). Close it, or use it as a context
    manager: closing invalidates every namespace, reservation and lease, and
    releases every view into the pools they handed out: using one afterwards
    raises ValueError."""

    def __init__(self, socket_path=None, timeout_ms=0):
        """timeout_ms bounds each reply's wait, the handshake's included
        (0: KVTIER_TIMEOUT_MS or 30 s); see set_timeout."""
        self._h = None
        _check_ms(timeout_ms)
        # views into the pools, until close (by id: a memoryview's hash is
        # its bytes', and writable ones have none)
        self._views = weakref.WeakValueDictionary()
        self.lock = threading.RLock()
        h = _vp()
        _check(_connect(_b(socket_path), timeout_ms, ctypes.byref(h)),
               "kvt_connect(%s)" % (socket_path or default_socket()))
        self._h = h

    def close(self):
        """Close the connection, releasing first every view into the pools
        that reservations and leases handed out. Raises BufferError, and
        leaves the client open, while anything else reads their memory (a
        slice of a view, a buffer or array made from one): kvt_close unmaps
        the pools, and that memory would then fault or read another block.
        A numpy.frombuffer() of a view itself keeps its address with no
        trace that anything can see: drop such arrays first, as before
        Lease.release()."""
        with self.lock:
            if not self._h:
                return
            views = list(self._views.values())
            others = _others(views) if views else []
            if others:
                gc.collect()       # dropped ones still held by a reference cycle
                others = _others(views)
            if others:
                raise BufferError(
                    "kvtier: Client.close(): %d slice(s), buffer(s) or array(s) made from "
                    "views of leased or reserved blocks are alive: drop them first"
                    % len(others))
            for v in views:
                v.release()        # BufferError while an export of it is held
            _close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._h:
            raise ValueError("client is closed")
        return self._h

    def ns_open(self, model_id, dtype, layout, block_tokens, block_bytes, tp_rank=0,
                tp_size=1, pp_rank=0, pp_size=1, variant=None):
        """Open (or join) the namespace of a model (kvt_ns_open). pp_rank /
        pp_size: the pipeline stage; variant: bytes of anything else that
        changes the blocks' bytes (KV scales, ...), None for none."""
        m, _keep = _model(model_id, dtype, layout, block_tokens, block_bytes, tp_rank,
                          tp_size, pp_rank, pp_size, variant)
        h = _vp()
        with self.lock:
            _check(_ns_open(self._handle(), ctypes.byref(m), ctypes.byref(h)),
                   "kvt_ns_open(%s)" % model_id)
        return Namespace(self, h)

    def ns_open_hybrid(self, model_id, dtype, layout, groups, block_tokens, tp_rank=0,
                       tp_size=1, pp_rank=0, pp_size=1, variant=None, state_every=1,
                       sliding_all=False):
        """Open (or join) a hybrid model's namespaces, one per layer group
        (kvt_ns_open_hybrid). groups: a ModelDesc, or a list of dicts with
        "kind" (LAYER_KINDS) and the group's shape ("layers", "kv_heads",
        "head_dim", "n_kv", "elem_bytes"; "window" for a sliding group,
        "state_bytes" for a state group), in an order every process of the
        model keeps: a group's index is part of its namespace's identity."""
        if isinstance(groups, ModelDesc):
            desc = groups.c
        else:
            desc = _model_desc(dtype, groups)
        m, _keep = _model(model_id, dtype, layout, block_tokens, 0, tp_rank, tp_size, pp_rank,
                          pp_size, variant)
        o = _HybridOpts(block_tokens, state_every, 1 if sliding_all else 0)
        h = _vp()
        with self.lock:
            _check(_ns_open_hybrid(self._handle(), ctypes.byref(m), ctypes.byref(desc),
                                   ctypes.byref(o), ctypes.byref(h)),
                   "kvt_ns_open_hybrid(%s)" % model_id)
        return HybridNamespace(self, h)

    def unpin(self, pin_id):
        """Release a pin (kvt_unpin) that Namespace.lookup_pin returned, to this
        client or another of the tenant; an expired or released one (or 0) is
        a no-op."""
        pin = _Pin(int(pin_id))
        with self.lock:
            _check(_unpin(self._handle(), ctypes.byref(pin)), "kvt_unpin")

    def stats(self):
        """tierd's counters as a dict; 'tier' is a dict of per-tier dicts."""
        s = _Stats()
        with self.lock:
            _check(_stats_get(self._handle(), ctypes.byref(s)), "kvt_stats_get")
        # every field of kvt_stats (kvt_stats_list.h's list), the head's pad excepted
        d = {n: getattr(s, n) for n in _STATS if n not in ("pad", "tier")}
        d["tier"] = {TIER_NAMES[i]: {n: getattr(s.tier[i], n) for n in _TIER_STATS}
                     for i in range(1, len(TIER_NAMES))}
        return d

    def namespaces(self):
        """The tenant's namespaces and their traffic (kvt_admin_namespaces)."""
        with self.lock:
            n = _check(_admin_namespaces(self._handle(), None, 0), "kvt_admin_namespaces")
            arr = (_NsInfo * max(1, n))()
            n = min(n, _check(_admin_namespaces(self._handle(), arr, n),
                              "kvt_admin_namespaces"))
        out = []
        for i in range(n):
            a = arr[i]
            d = {k: getattr(a, k) for k in ("id", "block_tokens", "tp_rank", "tp_size",
                                            "block_bytes") + _NS_U64}
            for k in ("model_id", "dtype", "layout"):
                d[k] = getattr(a, k).decode()
            d["misses"] = dict(zip(MISS_CAUSES, a.misses))
            out.append(d)
        return out

    def flush(self):
        """Write every warm block without a disk copy to cold and wait."""
        with self.lock:
            _check(_admin_flush(self._handle()), "kvt_admin_flush")

    def purge(self, ns_id):
        """Remove every block of namespace ns_id (Namespace.id) from every
        tier and the disk: the number removed. All or nothing: EBUSY while
        any of its blocks is leased, being written or moving."""
        with self.lock:
            return _check(_admin_purge(self._handle(), ns_id), "kvt_admin_purge")

    def set_timeout(self, ms):
        """Bound each reply's wait to ms (0: KVTIER_TIMEOUT_MS or 30 s); past
        it the call raises ETIMEDOUT and the client is closed for use."""
        _check_ms(ms)
        with self.lock:
            _set_timeout(self._handle(), ms)


class Reservation:
    """Slots reserved by Namespace.reserve(): views[i] is a writable memoryview
    into the warm pool, or None where the key is already stored. commit() or
    abort() ends it; a with-block commits on success and aborts on error."""

    def __init__(self, ns, parent, keys, slots):
        self.ns, self.parent, self.keys = ns, parent, keys
        bb = ns.block_bytes
        self.views = [None if s is None else _view(ns.client, s, bb, False) for s in slots]
        self.reserved = sum(v is not None for v in self.views)
        self.done = False

    def _drop_views(self):
        for v in self.views:
            if v is not None:
                v.release()
        self.views = []
        self.done = True

    def commit(self, durable=False):
        self._drop_views()
        return self.ns.commit(self.keys, durable)

    def commit_start(self, durable=True):
        """Namespace.commit_start of these keys: its handle for commit_wait."""
        self._drop_views()
        return self.ns.commit_start(self.keys, durable)

    def abort(self):
        self._drop_views()
        if not self.ns.client._h:
            return 0          # the closed connection took the reservation with it
        return self.ns.abort(self.keys)

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if self.done:
            return
        if et is None:
            self.commit()
        else:
            self.abort()


class Lease:
    """Blocks leased by Namespace.lease(): views[i] is a read-only memoryview
    of block i (the leading hits only). release() ends it (a with-block does)."""

    def __init__(self, ns, lease, slots):
        self.ns, self._lease = ns, lease
        bb = ns.block_bytes
        self.views = [_view(ns.client, s, bb, True) for s in slots]

    def __len__(self):
        return len(self.views)

    def release(self):
        for v in self.views:
            v.release()
        self.views = []
        if self._lease.id:
            with self.ns.client.lock:
                # a closed connection took the lease with it
                if self.ns.client._h:
                    _check(_release(self.ns._handle(), ctypes.byref(self._lease)),
                           "kvt_release")
            self._lease = _Lease()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _model(model_id, dtype, layout, block_tokens, block_bytes, tp_rank, tp_size, pp_rank,
           pp_size, variant):
    """A kvt_model, and the buffer its variant points into (keep it alive)."""
    var = None if variant is None else ctypes.create_string_buffer(bytes(variant),
                                                                   len(variant))
    m = _Model(_b(model_id), _b(dtype), _b(layout), block_tokens, tp_rank, tp_size,
               block_bytes, pp_rank, pp_size,
               ctypes.cast(var, _vp) if var is not None else None,
               len(variant) if variant is not None else 0)
    return m, var


_GROUP_NAMES = {"full": b"full_attention", "sliding": b"sliding_attention", "mla": b"mla",
                "indexer": b"indexer", "state": b"mamba2", "none": b"mlp"}


def _model_desc(dtype, groups):
    """A kvt_model_desc of groups (dicts, see Client.ns_open_hybrid)."""
    groups = list(groups)
    if not 1 <= len(groups) <= len(LAYER_KINDS):
        raise ValueError("a hybrid namespace has 1 to %d groups, not %d"
                         % (len(LAYER_KINDS), len(groups)))
    d = _ModelDesc()
    d.dtype = _b(dtype)
    d.n_groups = len(groups)
    for i, g in enumerate(groups):
        kind = g["kind"]
        if kind not in LAYER_KINDS:
            raise ValueError("unknown layer group kind %r (one of %s)"
                             % (kind, ", ".join(LAYER_KINDS)))
        d.group[i] = _LayerGroup(LAYER_KINDS.index(kind), _GROUP_NAMES[kind],
                                 g.get("layers", 0), g.get("kv_heads", 0), g.get("head_dim", 0),
                                 g.get("n_kv", 0), g.get("elem_bytes", 0), g.get("window", 0),
                                 g.get("state_bytes", 0))
        d.num_layers += g.get("layers", 0)
    return d


class GroupIO:
    """Where one group of a hybrid namespace's data is in the engine
    (kvt_group_io): a KV group's Layout and block ids (one per key of the
    call), or a state group's buffers: states (offload: one address per key,
    None where the engine has none) or state_out (restore: one address), of
    state_bytes each. keep: whatever those addresses point into, held as long
    as the GroupIO is."""

    def __init__(self, layout=None, block_ids=None, states=None, state_out=None,
                 state_bytes=0, keep=None):
        self.layout, self.block_ids = layout, block_ids
        self.states, self.state_out, self.state_bytes = states, state_out, state_bytes
        self.keep = keep


def _group_ios(ios, n):
    """A ctypes array of kvt_group_io for ios (GroupIO, one per group) over n
    keys, and what it points into (keep it alive)."""
    arr = (_GroupIO * max(1, len(ios)))()
    keep = []
    for i, io in enumerate(ios):
        c = arr[i]
        if io.layout is not None:
            c.layout = ctypes.pointer(io.layout.c)
            keep.append(c.layout)
        if io.block_ids is not None:
            ids = list(io.block_ids)
            if len(ids) != n:
                raise ValueError("group %d: %d block ids for %d keys" % (i, len(ids), n))
            c.block_ids = (ctypes.c_int64 * max(1, n))(*ids)
            keep.append(c.block_ids)
        if io.states is not None:
            st = list(io.states)
            if len(st) != n:
                raise ValueError("group %d: %d states for %d keys" % (i, len(st), n))
            c.states = (_vp * max(1, n))(*st)
            keep.append(c.states)
        c.state_out = io.state_out
        c.state_bytes = io.state_bytes
    return arr, keep


class Namespace:
    """A namespace opened on a Client; valid until the client closes."""

    def __init__(self, client, h):
        self.client, self._h = client, h
        self.block_bytes = _ns_block_bytes(h)
        self.id = _ns_id(h)          # Client.purge's; 0 for a hybrid one

    def _handle(self):
        self.client._handle()
        return self._h

    def set_deadline(self, ms):
        with self.client.lock:
            _ns_set_deadline(self._handle(), ms)

    def lookup(self, keys, prefetch=False, tiers=False):
        """Leading hit count of the chain keys; with tiers=True, (hits, [tier
        of each key]) (TIER_* values)."""
        arr, n = _keys(keys)
        t = (ctypes.c_uint8 * max(1, n))() if tiers else None
        with self.client.lock:
            hit = _check(_lookup(self._handle(), arr, n, LOOKUP_PREFETCH if prefetch else 0, t),
                         "kvt_lookup")
        return (hit, list(t)[:n]) if tiers else hit

    def lookup_pin(self, keys, hold_ms=0, tiers=False):
        """Pinning lookup (kvt_lookup_pin): (hits, pin_id, pinned), the first
        `pinned` hits held for hold_ms (0: 10 s) until Client.unpin(pin_id),
        by this client or another of the tenant (pin_id 0: nothing held);
        with tiers=True a fourth item, the tier of each key (TIER_*)."""
        arr, n = _keys(keys)
        pin = _Pin()
        t = (ctypes.c_uint8 * max(1, n))() if tiers else None
        with self.client.lock:
            hit = _check(_lookup_pin(self._handle(), arr, n, hold_ms, ctypes.byref(pin), t),
                         "kvt_lookup_pin")
        return (hit, pin.id, pin.n, list(t)[:n]) if tiers else (hit, pin.id, pin.n)

    def reserve(self, keys, parent=None):
        """Reserve slots for keys (kvt_put_reserve): a Reservation whose views
        are written in place, then committed."""
        arr, n = _keys(keys)
        slots = (_vp * max(1, n))()
        with self.client.lock:
            _check(_reserve(self._handle(), _parent(parent), arr, n, slots), "kvt_put_reserve")
        return Reservation(self, parent, [_key_bytes(k) for k in keys],
                           [slots[i] for i in range(n)])

    def commit(self, keys, durable=False):
        arr, n = _keys(keys)
        with self.client.lock:
            return _check(_commit_flags(self._handle(), arr, n,
                                        COMMIT_DURABLE if durable else 0), "kvt_put_commit")

    def commit_start(self, keys, durable=True):
        """Start a commit (kvt_put_commit_start) and return at once, so that
        the next batch is filled while this one is written: a handle for
        commit_wait, which returns what commit() would. At most 4 started
        and not waited for (KvtierError -EBUSY beyond)."""
        arr, n = _keys(keys)
        cm = _Commit()
        with self.client.lock:
            _check(_commit_start(self._handle(), arr, n, COMMIT_DURABLE if durable else 0,
                                 ctypes.byref(cm)), "kvt_put_commit_start")
        return cm

    def commit_wait(self, cm):
        """Wait for a commit_start: the blocks newly stored, or KvtierError."""
        with self.client.lock:
            return _check(_commit_wait(self._handle(), ctypes.byref(cm)), "kvt_put_commit_wait")

    def abort(self, keys):
        arr, n = _keys(keys)
        with self.client.lock:
            return _check(_abort(self._handle(), arr, n), "kvt_put_abort")

    def put(self, keys, blocks, parent=None):
        """Copying put of bytes-like blocks (block_bytes each). Returns the
        number newly stored."""
        keys, blocks = list(keys), list(blocks)
        if len(keys) != len(blocks):
            raise ValueError("%d keys, %d blocks" % (len(keys), len(blocks)))
        arr, n = _keys(keys)
        bufs = (_vp * max(1, n))()
        keep = []
        for i, blk in enumerate(blocks):
            mv = memoryview(blk).cast("B")
            if mv.nbytes != self.block_bytes:
                raise ValueError("block %d is %d bytes, the namespace's are %d"
                                 % (i, mv.nbytes, self.block_bytes))
            buf = (ctypes.c_uint8 * mv.nbytes).from_buffer_copy(mv) if mv.readonly else \
                (ctypes.c_uint8 * mv.nbytes).from_buffer(mv)
            keep.append(buf)
            bufs[i] = ctypes.addressof(buf)
        with self.client.lock:
            return _check(_put(self._handle(), _parent(parent), arr, n, bufs), "kvt_put")

    def lease(self, keys):
        """Lease the leading hits of keys (kvt_get_lease): a Lease of
        read-only views, zero copy."""
        arr, n = _keys(keys)
        slots = (_vp * max(1, n))()
        lease = _Lease()
        with self.client.lock:
            hit = _check(_get_lease(self._handle(), arr, n, slots, ctypes.byref(lease)),
                         "kvt_get_lease")
        return Lease(self, lease, [slots[i] for i in range(hit)])

    def get(self, keys):
        """Copies (bytes) of the leading hits of keys."""
        with self.lease(keys) as le:
            return [bytes(v) for v in le.views]

    def offload(self, keys, layout, block_ids, parent=None, stream=None):
        """Gather engine blocks block_ids from the cache layout describes and
        store them as keys (kvt_offload), in batches of BATCH_MAX. stream:
        None for a cache in host memory, else the address of a cudaStream_t
        (CUDA builds of libkvtier). Returns blocks newly stored."""
        keys = list(keys)
        stored = 0
        for i, arr, n, idarr in _id_batches(keys, block_ids):
            par = _parent(keys[i - 1] if i else parent)
            with self.client.lock:
                stored += _check(_offload(self._handle(), par, arr, n, ctypes.byref(layout.c),
                                          idarr, stream), "kvt_offload")
        return stored

    def restore(self, keys, layout, block_ids, stream=None):
        """Scatter the leading cached run of keys into engine blocks block_ids
        (kvt_restore, in batches of BATCH_MAX; stream as for offload).
        Returns the run's length."""
        run = 0
        for _, arr, n, idarr in _id_batches(keys, block_ids):
            with self.client.lock:
                got = _check(_restore(self._handle(), arr, n, ctypes.byref(layout.c), idarr,
                                      stream), "kvt_restore")
            run += got
            if got < n:
                break
        return run

    def remove(self, keys):
        arr, n = _keys(keys)
        with self.client.lock:
            return _check(_remove(self._handle(), arr, n), "kvt_remove")


class HybridNamespace(Namespace):
    """A hybrid model's namespace (Client.ns_open_hybrid): lookup answers the
    longest prefix every group can restore; offload and restore move every
    group's part of a chain at once; group(g) is group g's own plain
    namespace. The plain block calls (put, get, reserve, lease, offload,
    restore) are refused by libkvtier on it."""

    def __init__(self, client, h):
        super().__init__(client, h)
        self.groups = _ns_groups(h)

    def group(self, g):
        if not 0 <= g < self.groups:
            raise IndexError("group %d of %d" % (g, self.groups))
        return Namespace(self.client, _ns_group(self._handle(), g))

    def group_needs(self, g, end):
        """The chain positions (first, last) group g holds to restore the
        prefix of end + 1 blocks (kvt_ns_group_needs)."""
        if not 0 <= g < self.groups:
            raise IndexError("group %d of %d" % (g, self.groups))
        if not 0 <= end < 0xFFFFFFFF:
            raise ValueError("a prefix of %d blocks" % (end + 1))
        first, last = ctypes.c_uint32(), ctypes.c_uint32()
        _ns_group_needs(self._handle(), g, end, ctypes.byref(first), ctypes.byref(last))
        return first.value, last.value

    def _groups_call(self, name, call, keys, ios):
        """call(handle, keys array, n, kvt_group_io array) under the lock,
        after checking ios against the groups."""
        if len(ios) != self.groups:
            raise ValueError("%d group ios for %d groups" % (len(ios), self.groups))
        arr, n = _keys(list(keys))
        io, _keep = _group_ios(ios, n)
        with self.client.lock:
            return _check(call(self._handle(), arr, n, io), name)

    def offload_groups(self, keys, ios, parent=None, stream=None):
        """Store the chain keys from every group's engine data (ios: a GroupIO
        per group, kvt_offload_hybrid), at most BATCH_MAX keys. Returns the
        objects newly stored (all groups)."""
        return self._groups_call(
            "kvt_offload_hybrid",
            lambda h, arr, n, io: _offload_hybrid(h, _parent(parent), arr, n, io, stream),
            keys, ios)

    def restore_groups(self, keys, ios, stream=None):
        """Restore the longest prefix of keys that every group can restore
        into ios (kvt_restore_hybrid), at most BATCH_MAX keys: its length in
        blocks (0: nothing restored, whatever a group may have written)."""
        return self._groups_call(
            "kvt_restore_hybrid",
            lambda h, arr, n, io: _restore_hybrid(h, arr, n, io, stream), keys, ios)


# ---- a model's KV cache from its config.json ------------------------------------

class ModelDesc:
    """kvt_model_parse_file's description of a model's KV cache."""

    def __init__(self, c):
        self.c = c
        self.model_type = c.model_type.decode()
        self.dtype = c.dtype.decode()
        self.elem_bytes = c.elem_bytes
        self.num_layers = c.num_layers
        self.groups = [{"kind": LAYER_KINDS[g.kind], "name": g.name.decode(),
                        "layers": g.layers, "kv_heads": g.kv_heads, "head_dim": g.head_dim,
                        "n_kv": g.n_kv, "elem_bytes": g.elem_bytes, "window": g.window}
                       for g in c.group[:c.n_groups]]

    def set_dtype(self, dtype):
        _check(_model_set_dtype(ctypes.byref(self.c), _b(dtype)), "kvt_model_set_dtype")
        self.__init__(self.c)

    def block_bytes(self, block_tokens, tp_size=1):
        """Bytes of one tier block (0 when no block is possible)."""
        return _model_block_bytes(ctypes.byref(self.c), block_tokens, tp_size)


def model_from_config(path, dtype=None):
    """Read a Hugging Face config.json (kvt_model_parse_file); dtype overrides
    the KV dtype ("bf16", "fp16", "fp32", or an FP8 format: "fp8_e4m3" (or
    "fp8"), "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz")."""
    c = _ModelDesc()
    err = ctypes.create_string_buffer(256)
    rc = _model_parse_file(_b(path), ctypes.byref(c), err, len(err))
    if rc < 0:
        raise KvtierError(rc, "kvt_model_parse_file: " + err.value.decode(errors="replace"))
    m = ModelDesc(c)
    if dtype:
        m.set_dtype(dtype)
    return m

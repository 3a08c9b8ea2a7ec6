"""The codec's Python API against its own C++ paths and against dense attention."""
import math

import pytest
import torch

import varrate
from conftest import DEMO_MODEL, SMALL, synthetic_layer


def test_methods_lists_the_registry():
    names = [m["name"] for m in varrate.methods()]
    assert names[:3] == ["full", "varrate", "flat"]
    assert "snapkv" in names and any(n.startswith("varrate@") for n in names)
    assert varrate.method_info("varrate")["needs_basis"] is True
    assert varrate.method_info("varrate-kvzip")["name"] == "varrate@kvzip"  # an old name, kept as an alias
    assert {m["group"] for m in varrate.methods()} >= {"reference", "low-rank", "eviction"}


def test_settings_are_the_cli_table():
    s = varrate.settings(budget=0.3, r_min=4)
    assert s["budget"] == 0.3 and s["r_min"] == 4 and s["rank"] == 1024  # the paper's defaults otherwise
    keys = {spec["key"] for spec in varrate.setting_specs()}
    assert {"budget", "r_min", "rank", "stride", "anchors", "window", "obs_window", "coef_bits"} <= keys
    demo = varrate.model_settings(DEMO_MODEL)
    assert (demo["budget"], demo["r_min"], demo["rank"], demo["stride"]) == (0.2, 2, 128, 32)


def test_reconstruction_is_the_stores(layer, codec):
    """materialise() (dense, in place) equals the compressed store's own reconstruction (fp32 1e-6), exact tokens
    are the input's, and the footprint is within kappa, resident = accounted."""
    analysis = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"])
    for kappa in (0.25, 0.5):
        alloc = analysis.allocate(kappa)
        k, v = alloc.materialise()
        assert k.shape == layer["keys"].shape and v.shape == layer["values"].shape
        store = alloc.store()
        sk, sv = store.reconstruct()
        for a, b in ((k, sk), (v, sv)):
            assert ((a - b).norm() / b.norm()).item() <= 1e-6
        exact = alloc.exact
        assert torch.equal(v[:, exact], layer["values"][:, exact])
        d = alloc.diagnostics
        assert d["footprint"] <= kappa + 1e-9
        assert store.resident_bytes == d["stored_bytes"]
        assert ((k - layer["keys"]).norm() / layer["keys"].norm()).item() < 0.5


def test_more_budget_more_rank_less_error(layer, codec):
    analysis = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"])
    low, high = analysis.allocate(0.2), analysis.allocate(0.6)
    assert high.ranks.sum() > low.ranks.sum()
    assert high.diagnostics["mean_rel_error"] < low.diagnostics["mean_rel_error"]


def test_store_attention_equals_dense_attention(layer, codec):
    """Attention through the store equals softmax attention over the materialised cache plus the new entries."""
    alloc = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"]).allocate(0.3)
    k, v = alloc.materialise()
    g = torch.Generator().manual_seed(3)
    n_head, d = layer["queries"].shape[0], k.shape[2]
    q = torch.randn(n_head, 1, d, generator=g)
    new_k, new_v = torch.randn(2, 1, d, generator=g), torch.randn(2, 1, d, generator=g)
    out = alloc.store().attend(q, new_k, new_v)
    keys = torch.cat([k, new_k], 1).repeat_interleave(n_head // 2, 0)
    values = torch.cat([v, new_v], 1).repeat_interleave(n_head // 2, 0)
    dense = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(d), -1) @ values
    assert ((out - dense).norm() / dense.norm()).item() <= 1e-5


def test_pre_rope_keys_from_the_tables(layer, codec):
    """Without keys_pre_rope the capture un-rotates the keys: the analysis is the same within rounding."""
    given = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"],
                          keys_pre_rope=layer["keys_pre_rope"]).allocate(0.3)
    derived = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"]).allocate(0.3)
    assert (given.ranks != derived.ranks).float().mean().item() < 0.02
    assert math.isclose(given.diagnostics["mean_rel_error"], derived.diagnostics["mean_rel_error"], rel_tol=1e-3)


def test_calibrated_basis_round_trip(layer, small_basis, tmp_path):
    basis = small_basis
    assert basis.n_layer == 1 and basis.layer(0).shape == (64, 128)
    path = tmp_path / "basis.safetensors"
    basis.save(path)
    again = varrate.Basis.load(path, fingerprint="synthetic", dim=128)
    assert torch.equal(again.layer(0), basis.layer(0))
    codec = varrate.Codec(SMALL, basis=again, fingerprint="synthetic")
    alloc = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"]).allocate(0.2)
    assert alloc.diagnostics["basis_bytes"] == 0  # a basis file is not charged; a self-calibrated one is
    # Self-calibrated (no basis): fitted on the layer itself, its R x D charged to the budget.
    selfcal = varrate.Codec(SMALL, rank=32).analyse(layer["keys"], layer["values"], layer["queries"],
                                                    layer["inv_freq"]).allocate(0.5)
    assert selfcal.diagnostics["basis_bytes"] == 32 * 128 * 4


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_bf16_capture(dtype, codec):
    lay = synthetic_layer(dtype=dtype)
    alloc = codec.analyse(lay["keys"], lay["values"], lay["queries"], lay["inv_freq"]).allocate(0.3)
    k, v = alloc.materialise()
    assert k.dtype == dtype and v.dtype == dtype


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_equals_cpu(layer, codec):
    cpu = codec.analyse(layer["keys"], layer["values"], layer["queries"], layer["inv_freq"]).allocate(0.3)
    cuda = codec.analyse(*(layer[k].cuda() for k in ("keys", "values", "queries", "inv_freq"))).allocate(0.3)
    assert torch.equal(cpu.ranks, cuda.ranks.cpu())
    for a, b in zip(cpu.materialise(), cuda.materialise()):
        assert ((a - b.cpu()).norm() / a.norm()).item() <= 1e-5

"""Shared fixtures: the repository's demo model, the CLI's committed reference (data/compare_demo.json, written by
make_reference.py) and a synthetic layer capture."""
import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL = REPO / "resources/models/varrate-demo"
ORACLE_MODEL = REPO / "tests/data/oracles/llama31-gqa4"  # a tiny random checkpoint of another shape
REFERENCE = Path(__file__).resolve().parent / "data/compare_demo.json"

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def reference():
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="session")
def document():
    return (REPO / "python/examples/needle.txt").read_text()


def synthetic_layer(seed=0, n_kv=2, group=4, length=300, head_dim=32, window=16, dtype=torch.float32):
    """Keys with a shared low-rank structure (as real keys have), values, window queries and RoPE frequencies."""
    basis = torch.randn(8, head_dim, generator=torch.Generator().manual_seed(1234))  # the same for every seed
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(n_kv, length, 8, generator=g) @ basis + 0.1 * torch.randn(n_kv, length, head_dim, generator=g)
    values = torch.randn(n_kv, length, 8, generator=g) @ basis + 0.1 * torch.randn(n_kv, length, head_dim,
                                                                                   generator=g)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    import varrate
    cos, sin = varrate.rope_tables(inv_freq, length)
    keys = pre * cos + torch.cat([-pre[..., head_dim // 2:], pre[..., :head_dim // 2]], -1) * sin
    q_pre = torch.randn(n_kv * group, window, head_dim, generator=g)
    c, s = cos[-window:], sin[-window:]
    queries = q_pre * c + torch.cat([-q_pre[..., head_dim // 2:], q_pre[..., :head_dim // 2]], -1) * s
    return dict(keys=keys.to(dtype), values=values.to(dtype), queries=queries.to(dtype), inv_freq=inv_freq,
                keys_pre_rope=pre.to(dtype))


@pytest.fixture
def layer():
    return synthetic_layer()


SMALL = dict(r_min=2, rank=64, stride=32, anchors=4, window=16, obs_window=16)


@pytest.fixture(scope="session")
def small_basis():
    """A basis calibrated on other synthetic layers (seeds 1-4), as a basis file is on other texts."""
    import varrate
    captures = []
    for seed in range(1, 5):
        lay = synthetic_layer(seed)
        captures.append(varrate.capture(lay["keys"], lay["values"], rope=lay["inv_freq"], layer=0, n_layers=1))
    return varrate.calibrate_basis(captures, 1, SMALL, fingerprint="synthetic")


@pytest.fixture
def codec(small_basis):
    import varrate
    return varrate.Codec(SMALL, basis=small_basis, fingerprint="synthetic")

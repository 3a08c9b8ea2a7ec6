"""Bad inputs raise one clear Python exception (varrate.VarRateError, a ValueError) naming what is wrong."""
import pytest
import torch

import varrate
from conftest import DEMO_MODEL, ORACLE_MODEL

SMALL = dict(r_min=2, rank=64, stride=32, anchors=4, window=16, obs_window=16)


def analyse(**kw):
    from conftest import synthetic_layer
    lay = synthetic_layer()
    args = dict(keys=lay["keys"], values=lay["values"], queries=lay["queries"], rope=lay["inv_freq"])
    args.update(kw)
    basis = varrate.calibrate_basis([varrate.capture(lay["keys"], lay["values"], rope=lay["inv_freq"])], 1, SMALL)
    return varrate.Codec(SMALL, basis=basis).analyse(**args)


def test_wrong_shapes():
    with pytest.raises(varrate.VarRateError, match=r"keys must be \[heads, tokens, head_dim\]"):
        analyse(keys=torch.zeros(300, 32))
    with pytest.raises(varrate.VarRateError, match="values .* must have the shape of keys"):
        analyse(values=torch.zeros(2, 299, 32))
    with pytest.raises(varrate.VarRateError, match="queries .* multiple of the 2 KV heads"):
        analyse(queries=torch.zeros(3, 16, 32))
    with pytest.raises(varrate.VarRateError, match="inv_freq must be"):
        analyse(rope=torch.ones(8))
    with pytest.raises(varrate.VarRateError, match="batch 1"):
        analyse(keys=torch.zeros(2, 2, 300, 32))


def test_wrong_dtypes():
    with pytest.raises(varrate.VarRateError, match="keys must be float32, bfloat16 or float16, got torch.int64"):
        analyse(keys=torch.zeros(2, 300, 32, dtype=torch.int64))
    with pytest.raises(varrate.VarRateError, match="values is torch.bfloat16, keys are torch.float32"):
        from conftest import synthetic_layer
        analyse(values=synthetic_layer()["values"].bfloat16())


def test_bad_settings_and_names():
    with pytest.raises(varrate.VarRateError, match="unknown compression method 'nosuchpress'"):
        varrate.Codec(method="nosuchpress")
    with pytest.raises(varrate.VarRateError, match="nonsense"):
        varrate.settings(nonsense=1)
    with pytest.raises(varrate.VarRateError, match="budget"):
        varrate.settings(budget=1.5)
    with pytest.raises(varrate.VarRateError, match="kappa must be a number"):
        analyse().allocate(float("nan"))
    with pytest.raises(varrate.InfeasibleBudgetError):
        analyse().allocate(0.01)
    assert issubclass(varrate.InfeasibleBudgetError, varrate.VarRateError)
    assert issubclass(varrate.VarRateError, ValueError)


def test_basis_of_another_model():
    """The demo model's basis, loaded for another checkpoint, is refused naming the file and the field."""
    with pytest.raises(varrate.VarRateError, match="varrate-basis.safetensors.*(model|dim)"):
        varrate.Basis.load(DEMO_MODEL / "varrate-basis.safetensors", ORACLE_MODEL)
    with pytest.raises(varrate.VarRateError, match="varrate-basis.safetensors"):
        varrate.Codec.for_model(ORACLE_MODEL, basis=DEMO_MODEL / "varrate-basis.safetensors")


def test_press_refuses_what_it_cannot_run():
    pytest.importorskip("kvpress")
    from varrate.kvpress import VarRatePress
    with pytest.raises(varrate.VarRateError, match="not a low-rank method"):
        VarRatePress(method="snapkv")
    with pytest.raises(varrate.VarRateError, match="not both"):
        VarRatePress(kappa=0.2, compression_ratio=0.8)

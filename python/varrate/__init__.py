"""VarRate: variable-rate low-rank KV-cache compression on torch tensors.

The same C++ codec as VarRate Studio's CLI and app (codec/, built against the installed torch), so settings,
basis files and results are the CLI's. See python/README.md, or the project README's "From Python".

    import varrate
    codec = varrate.Codec(settings={"budget": 0.2})              # or Codec.for_model("path/to/model")
    layer = codec.analyse(keys, values, queries, rope=inv_freq)  # one layer's capture: [n_kv_head, L, head_dim]
    alloc = layer.allocate(kappa=0.2)                            # ranks and diagnostics, no reconstruction
    keys_hat, values_hat = alloc.materialise()                   # reconstructed in place (same shape)
    store = alloc.store(); store.resident_bytes; store.attend(q, k_new, v_new)

kvpress: varrate.kvpress.VarRatePress, FlatPress and press("varrate@<signal>").
"""
import torch  # noqa: F401  (loads LibTorch before the extension that links it)

try:
    from ._build_info import torch_version as _built_with_torch
except ImportError:  # a source tree without a build
    _built_with_torch = None
if _built_with_torch is not None and _built_with_torch != torch.__version__:
    raise ImportError(f"varrate was built against torch {_built_with_torch}, but this environment has torch "
                      f"{torch.__version__} (LibTorch's C++ ABI differs between them): reinstall it against this "
                      "torch, e.g. pip install --force-reinstall --no-deps ./python")

from . import _varrate
from ._codec import (Allocation, Basis, Codec, LayerAnalysis, Store, apply_rope, calibrate_basis, capture,
                     inverse_rope, method_info, methods, model_fingerprint, model_settings, rope_tables,
                     setting_specs, settings)
from ._varrate import InfeasibleBudgetError, VarRateError

__version__ = "0.1.0"
__all__ = ["Allocation", "Basis", "Codec", "InfeasibleBudgetError", "LayerAnalysis", "Store", "VarRateError",
           "apply_rope", "calibrate_basis", "capture", "inverse_rope", "method_info", "methods", "model_fingerprint",
           "model_settings", "rope_tables", "setting_specs", "settings", "_varrate"]

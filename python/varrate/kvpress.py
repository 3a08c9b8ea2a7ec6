"""VarRate as kvpress presses, in reconstruct-in-place mode (as the paper ran it): during prefill each layer's
cache is replaced by its reconstruction from the codec (same length; coded tokens carry their rank-r_t
approximation), so kvpress's pipeline and evaluation decode from it unchanged.

    from kvpress import KVPressTextGenerationPipeline  # registers "kv-press-text-generation"
    from varrate.kvpress import VarRatePress
    press = VarRatePress(kappa=0.2)                     # or compression_ratio=0.8, kvpress's convention
    answer = pipe(context, question=question, press=press)["answer"]
    press.layers     # per layer: the CLI's diagnostics (sum_ranks, footprint, mean_rel_error, ...)
    press.ranks      # per layer: [L] ranks (D for exact tokens)

Settings and basis are the CLI's: MODEL/varrate-codec.json (else width-based defaults) with `settings` over
them, and MODEL/varrate-basis.safetensors when present (basis="auto"), else calibrated on each layer's own
context (basis="self"), or a basis file's path.
"""
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Optional

import json

import torch

try:
    from kvpress.presses.base_press import BasePress
except ImportError as e:  # pragma: no cover
    raise ImportError("varrate.kvpress needs kvpress: pip install kvpress") from e

from . import _varrate
from ._codec import BASIS_FILE, Basis, Codec, VarRateError, method_info, methods, model_fingerprint, settings
from ._hf import hf_layer_capture

__all__ = ["VarRatePress", "FlatPress", "press", "press_names", "registry_presses"]


def _language_model(model):
    """The decoder stack (multimodal models wrap it as model.model.language_model, as kvpress's hooks assume)."""
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


def _model_dir(model) -> Optional[Path]:
    name = getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "")
    return Path(name) if name and Path(name, "config.json").exists() else None


@dataclass
class VarRatePress(BasePress):
    """VarRate (or any low-rank method of the registry: `method`) as a kvpress press.

    compression_ratio: kvpress's, 1 - kappa; or give kappa. Neither: the model's default kappa.
    settings: codec settings over the model's defaults (keys of varrate.setting_specs()).
    basis: "auto", "self", a basis file's path or a varrate.Basis."""

    compression_ratio: Optional[float] = None
    kappa: InitVar[Optional[float]] = None
    method: str = "varrate"
    settings: dict = field(default_factory=dict)
    basis: object = "auto"
    record: bool = True  # keep each layer's diagnostics and ranks (press.layers, press.ranks)

    def __post_init__(self, kappa):
        if kappa is not None:
            if self.compression_ratio is not None:
                raise VarRateError("VarRatePress: give kappa or compression_ratio (1 - kappa), not both")
            self.compression_ratio = 1.0 - float(kappa)
        info = method_info(self.method)
        if info["family"] != "low-rank" or info["probe"]:
            names = ", ".join(press_names())
            raise VarRateError(f"VarRatePress: {self.method} is not a low-rank method that a press can run "
                               f"(one prefill, no extra pass); these are: {names}")
        self.method = info["name"]
        self._needs = tuple(info["capture_needs"])
        self.layers, self.ranks = [], []
        self._codec = None
        self._token_ids = None
        self._pending = []

    @property
    def budget(self) -> Optional[float]:
        """kappa: the fraction of the cache kept (1 - compression_ratio)."""
        return None if self.compression_ratio is None else 1.0 - self.compression_ratio

    def post_init_from_model(self, model):
        cfg = model.config
        n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        model_dir = _model_dir(model)
        if model_dir is not None:
            base = json.loads(_varrate.model_settings_json(str(model_dir)))
            fingerprint = model_fingerprint(model_dir)
        else:
            base = json.loads(_varrate.width_settings_json(2 * n_kv * head_dim))
            fingerprint = ""
        overrides = dict(self.settings)
        if self.budget is not None:
            if not 0.0 < self.budget <= 1.0:
                raise VarRateError(f"VarRatePress: compression_ratio must be in [0, 1), got {self.compression_ratio}")
            overrides["budget"] = self.budget
        s = settings(base, **overrides)
        basis = self.basis
        if isinstance(basis, str) and basis == "auto":
            basis = model_dir / BASIS_FILE if model_dir is not None and (model_dir / BASIS_FILE).exists() else None
        elif isinstance(basis, str) and basis == "self":
            basis = None
        if isinstance(basis, (str, Path)):
            basis = Basis.load(basis, fingerprint=fingerprint, dim=2 * n_kv * head_dim, stride=s["stride"],
                               anchors=s["anchors"])
        if basis is not None and basis.n_layer != cfg.num_hidden_layers:
            raise VarRateError(f"VarRatePress: the basis has {basis.n_layer} layers, the model "
                               f"{cfg.num_hidden_layers}")
        self._codec = Codec(s, self.method, basis, fingerprint=fingerprint)
        self._inv_freq = _language_model(model).rotary_emb.inv_freq.float()
        self._n_layers = cfg.num_hidden_layers

    @contextmanager
    def __call__(self, model):
        # A method that reads the context's ids (varrate-rare) gets them from the embedding's input.
        handle = None
        if "token_ids" in self._needs:
            handle = _language_model(model).embed_tokens.register_forward_pre_hook(self._record_ids)
        try:
            with super().__call__(model):
                yield
        finally:
            if handle is not None:
                handle.remove()

    def _record_ids(self, module, args):
        self._token_ids = args[0] if args else None

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self._codec is None:
            raise VarRateError("VarRatePress: use it as kvpress does (with press(model): ...)")
        layer = module.layer_idx
        if layer == 0:
            self.layers, self.ranks, self._pending = [], [], []
        analyses = []
        for b in range(keys.shape[0]):
            cap = hf_layer_capture(module, hidden_states, keys, values, kwargs["position_embeddings"], batch=b,
                                   n_layers=self._n_layers, inv_freq=self._inv_freq.to(keys.device),
                                   obs_window=self._codec.settings["obs_window"], needs=self._needs,
                                   token_ids=self._token_ids)
            analyses.append(self._codec.analyse(cap))
        if "all_layers" not in self._needs:
            return self._apply([[a.allocate()] for a in analyses], keys, values)[0]
        # kappa shared across layers: allocate once every layer is analysed. Nothing reads a layer's cache
        # again during the prefill, so the earlier layers' caches are replaced at the last one.
        self._pending.append((kwargs["past_key_values"], layer, analyses))
        if layer != self._n_layers - 1:
            return keys, values
        per_sequence = [self._codec.allocate_layers([p[2][b] for p in self._pending])
                        for b in range(keys.shape[0])]
        out = self._apply(per_sequence, keys, values)
        for (cache, l, _), (k, v) in zip(self._pending[:-1], out[:-1]):
            cache.layers[l].keys, cache.layers[l].values = k, v
        self._pending = []
        return out[-1]

    def _apply(self, per_sequence, keys, values):
        """Reconstructs each sequence's allocations (per layer) and stacks them: [(keys, values)] per layer."""
        layers = []
        for i in range(len(per_sequence[0])):
            ks, vs = [], []
            for b, allocs in enumerate(per_sequence):
                k, v = allocs[i].materialise()
                if k.shape != keys.shape[1:]:
                    raise VarRateError(f"VarRatePress: {self.method} changed the cache's shape")
                ks.append(k)
                vs.append(v)
                if self.record and b == 0:
                    self.layers.append(allocs[i].diagnostics)
                    self.ranks.append(allocs[i].ranks.clone())
            layers.append((torch.stack(ks).to(keys.dtype), torch.stack(vs).to(values.dtype)))
        return layers

    @property
    def footprint(self) -> float:
        """The accounted footprint of the last compressed context: stored bytes over full bytes, all layers."""
        if not self.layers:
            raise VarRateError("VarRatePress: nothing was compressed yet")
        return sum(d["stored_bytes"] for d in self.layers) / sum(d["full_bytes"] for d in self.layers)


@dataclass
class FlatPress(VarRatePress):
    """Flat low-rank coding (VarRate's ablation: the same rank for every coded token)."""

    method: str = "flat"


def press_names() -> list:
    """The methods a press can run: the registry's low-rank family that needs nothing beyond one prefill
    (varrate, flat, their ablations, varrate@<signal> for every signal computed from the prefill)."""
    return [m["name"] for m in methods() if m["family"] == "low-rank" and not m["probe"]]


def press(name: str, **kwargs) -> VarRatePress:
    """press("varrate@tova", kappa=0.2): a press for any name of press_names()."""
    return VarRatePress(method=name, **kwargs)


def registry_presses() -> dict:
    """{name: press} for every name of press_names(), at the model's default kappa until kvpress's evaluation sets
    compression_ratio: `PRESS_REGISTRY.update(registry_presses())` in its evaluation/evaluate_registry.py makes
    `--press_name varrate` (and flat, varrate@tova, ...) available there."""
    return {name: press(name) for name in press_names()}

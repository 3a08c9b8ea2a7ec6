"""The codec on torch tensors: settings, the method registry, bases, captures, and the three steps every method
takes (analyse, allocate, materialise or store). Thin over the C++ extension; inputs are checked here so that a
wrong shape, dtype or device is one VarRateError naming the argument."""
import json
import math
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import torch

from . import _varrate
from ._varrate import VarRateError

BASIS_FILE = "varrate-basis.safetensors"  # beside a model's weights, as the CLI and the app look for it
CODEC_FILE = "varrate-codec.json"  # a model's codec defaults
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


# ----------------------------------------------------------------------------------------------------------------
# Registry and settings


def methods(group: Optional[str] = None) -> list:
    """The registered methods in registry order, each a dict: name, description, family, group, needs_basis,
    budget_rule, probe (the extra pass it needs: "" for none), signal_of (varrate@<signal>), reads (the settings it
    reads). `group` keeps one group ("low-rank", "VarRate by signal", "eviction", ...)."""
    out = json.loads(_varrate.methods_json())
    return [m for m in out if group is None or m["group"] == group]


def method_info(name: str) -> dict:
    """One method's entry (an old alias gives the method it now is)."""
    registered = _varrate.registered_method_name(name)
    return next(m for m in methods() if m["name"] == registered)


def setting_specs() -> list:
    """The codec's settings table: key, flag (the CLI's), help, kind, min, max, default, choices."""
    return json.loads(_varrate.setting_specs_json())


def _settings_dict(value, where: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, (str, Path)):
        path = Path(value)
        try:
            value = json.loads(path.read_text())
        except OSError as e:
            raise VarRateError(f"{where}: cannot read {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise VarRateError(f"{where}: {path} is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise VarRateError(f"{where}: {path} must hold a JSON object of codec settings")
        value = {k: v for k, v in value.items() if k != "why"}  # varrate-codec.json's explanation
    if not isinstance(value, dict):
        raise VarRateError(f"{where}: settings must be a dict, a JSON file's path or None, got {type(value).__name__}")
    return dict(value)


def settings(base: Optional[dict] = None, **overrides) -> dict:
    """Every codec setting, checked: `overrides` over `base` (a dict from settings() or model_settings()) over the
    paper's defaults. Unknown keys and values out of range raise VarRateError naming them."""
    base_json = json.dumps(_settings_dict(base, "settings")) if base is not None else ""
    return json.loads(_varrate.settings_json(json.dumps(overrides), base_json, "settings"))


def model_settings(model_dir: Union[str, Path], **overrides) -> dict:
    """The settings a run on this model starts from, as the CLI and the app choose them: MODEL/varrate-codec.json
    when present, else defaults scaled to the model's width; `overrides` over them."""
    base = json.loads(_varrate.model_settings_json(str(model_dir)))
    return settings(base, **overrides) if overrides else base


def model_fingerprint(model_dir: Union[str, Path]) -> str:
    """The identity a basis file records (config and weights of a Hugging Face model directory)."""
    return _varrate.model_fingerprint(str(model_dir))


# ----------------------------------------------------------------------------------------------------------------
# Basis


class Basis:
    """Per-layer residual basis V [R, D] (fp32), as `varrate calibrate` writes it (varrate-basis.safetensors)."""

    def __init__(self, handle):
        self._handle = handle

    @classmethod
    def load(cls, path: Union[str, Path], model_dir: Union[str, Path, None] = None, *, fingerprint: str = "",
             dim: int = 0, stride: int = 0, anchors: int = 0) -> "Basis":
        """Loads a basis file. With `model_dir` (or `fingerprint`/`dim`), a basis of another model, width, stride or
        anchor count is refused with VarRateError naming the file and the field."""
        if model_dir is not None:
            fingerprint = fingerprint or model_fingerprint(model_dir)
            dim = dim or _varrate.model_joint_dim(str(model_dir))
        return cls(_varrate.Basis.load(str(path), fingerprint, int(dim), int(stride), int(anchors)))

    @classmethod
    def from_tensors(cls, layers: Sequence[torch.Tensor], *, stride: int, anchors: int, window: int,
                     fingerprint: str = "", calibration_tokens: int = 0) -> "Basis":
        """A basis from [R, D] tensors, one per layer (rows: directions by decreasing energy)."""
        if not layers or any(not isinstance(t, torch.Tensor) or t.dim() != 2 for t in layers):
            raise VarRateError("basis layers must be a non-empty list of [R, D] tensors")
        info = {"model_fingerprint": fingerprint, "rank": layers[0].shape[0], "dim": layers[0].shape[1],
                "stride": stride, "anchors": anchors, "window": window, "calibration_tokens": calibration_tokens}
        return cls(_varrate.Basis(json.dumps(info), [t.detach().float().cpu() for t in layers]))

    def save(self, path: Union[str, Path]) -> None:
        self._handle.save(str(path))

    @property
    def info(self) -> dict:
        return json.loads(self._handle.info_json)

    @property
    def n_layer(self) -> int:
        return self._handle.n_layer

    def layer(self, i: int) -> torch.Tensor:
        return self._handle.layer(i)

    def __repr__(self):
        i = self.info
        return (f"Basis({self.n_layer} layers, R={i['rank']}, D={i['dim']}, stride {i['stride']}, "
                f"c {i['anchors']}, model {i['model_fingerprint'] or '?'})")


def calibrate_basis(captures: Iterable, n_layers: int, settings_: Optional[dict] = None, rank: Optional[int] = None,
                    fingerprint: str = "") -> Basis:
    """Calibrates a basis from captures (varrate.capture(...), any number per layer, each with its `layer`): the
    top-`rank` principal directions of the anchor residuals of every coded token, per layer, with the codec's own
    anchor code (settings' stride, anchors and window). rank: default min(R, D)."""
    s = settings(settings_ or {})
    calibrator = _varrate.BasisCalibrator(json.dumps(s), int(n_layers))
    dim = None
    for c in captures:
        if not isinstance(c, _varrate.LayerCapture):
            raise VarRateError("calibrate_basis: captures must be varrate.capture(...) objects")
        calibrator.add(c)
        dim = 2 * c.keys.shape[0] * c.keys.shape[2]
    if dim is None:
        raise VarRateError("calibrate_basis: no captures were given")
    return Basis(calibrator.finish(int(rank or min(s["rank"], dim)), fingerprint, False))


# ----------------------------------------------------------------------------------------------------------------
# RoPE and captures


def rope_tables(inv_freq: torch.Tensor, n: int, offset: int = 0) -> tuple:
    """cos, sin [n, head_dim] (fp32) of positions offset..offset+n-1, in Hugging Face's layout (the frequencies
    repeated over both halves, rotate_half)."""
    pos = torch.arange(offset, offset + n, dtype=torch.float32, device=inv_freq.device)
    freqs = torch.outer(pos, inv_freq.float())
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates [.., n, head_dim] by the tables of their positions [n, head_dim] (Hugging Face's rotate_half)."""
    return x * cos + _rotate_half(x) * sin


def inverse_rope(keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Pre-RoPE keys from post-RoPE ones [.., L, head_dim] and the tables that rotated them [L, head_dim]."""
    return keys * cos - _rotate_half(keys) * sin


def _as_heads(t, name: str, batch_ok: bool = True) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise VarRateError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if batch_ok and t.dim() == 4:
        if t.shape[0] != 1:
            raise VarRateError(f"{name} {list(t.shape)}: one sequence at a time (batch 1), got batch {t.shape[0]}")
        t = t[0]
    if t.dim() != 3:
        raise VarRateError(f"{name} must be [heads, tokens, head_dim] (or [1, heads, tokens, head_dim]), "
                           f"got {list(t.shape)}")
    if t.dtype not in _FLOATS:
        raise VarRateError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
    return t


def capture(keys: torch.Tensor, values: torch.Tensor, queries: Optional[torch.Tensor] = None, rope=None, *,
            keys_pre_rope: Optional[torch.Tensor] = None, layer: int = 0, n_layers: Optional[int] = None,
            o_proj: Optional[torch.Tensor] = None, obs_window: Optional[int] = None,
            query_stats: Optional[tuple] = None, token_ids: Optional[torch.Tensor] = None):
    """One layer's end-of-prefill capture, what every method analyses.

    keys, values  [n_kv_head, L, head_dim] (or with a leading batch of 1): keys post-RoPE, as a cache holds them
    queries       [n_head, n, head_dim] post-RoPE queries of the last n tokens (the observation window; the last
                  obs_window of them are used); n_head a multiple of n_kv_head
    rope          the frequencies inv_freq [head_dim / 2] (tables of positions 0..L-1 are made from them), or
                  (cos, sin) [L, head_dim], or (cos, sin, inv_freq)
    keys_pre_rope the keys before RoPE; default: un-rotated from `keys` with the tables
    query_stats   (mean [n_head, head_dim], centred covariance [n_head, head_dim, head_dim]) of the pre-RoPE
                  queries of positions >= 4, for the methods whose info lists "query_stats" in capture_needs
    token_ids     [L] the context's ids, for those listing "token_ids"
    """
    keys = _as_heads(keys, "keys")
    values = _as_heads(values, "values")
    if values.shape != keys.shape:
        raise VarRateError(f"values {list(values.shape)} must have the shape of keys {list(keys.shape)}")
    G, L, d = keys.shape
    if L == 0:
        raise VarRateError("keys hold no tokens")
    for name, t in (("values", values), ("queries", queries), ("keys_pre_rope", keys_pre_rope)):
        if isinstance(t, torch.Tensor) and t.device != keys.device:
            raise VarRateError(f"{name} is on {t.device}, keys on {keys.device}: put them on one device")
        if isinstance(t, torch.Tensor) and t.dtype != keys.dtype:
            raise VarRateError(f"{name} is {t.dtype}, keys are {keys.dtype}: give them one dtype")
    if queries is not None:
        queries = _as_heads(queries, "queries")
        if queries.shape[2] != d or queries.shape[0] % G != 0:
            raise VarRateError(f"queries {list(queries.shape)} must be [n_head, n, {d}] with n_head a multiple of "
                               f"the {G} KV heads")
        if obs_window is not None:
            queries = queries[:, -obs_window:]
        queries = queries.contiguous()
    cos = sin = inv_freq = None
    if isinstance(rope, torch.Tensor):
        if rope.dim() != 1 or rope.shape[0] * 2 != d:
            raise VarRateError(f"rope: inv_freq must be [head_dim / 2 = {d // 2}], got {list(rope.shape)}")
        inv_freq = rope.float()
        cos, sin = rope_tables(inv_freq, L)
    elif isinstance(rope, (tuple, list)) and len(rope) in (2, 3):
        cos, sin = rope[0], rope[1]
        inv_freq = rope[2].float() if len(rope) == 3 and rope[2] is not None else None
        for name, t in (("cos", cos), ("sin", sin)):
            if not isinstance(t, torch.Tensor):
                raise VarRateError(f"rope: {name} must be a tensor")
        cos, sin = (t[0] if t.dim() == 3 and t.shape[0] == 1 else t for t in (cos, sin))
        if cos.shape != (L, d) or sin.shape != (L, d):
            raise VarRateError(f"rope: cos and sin must be [L={L}, head_dim={d}], got {list(cos.shape)} and "
                               f"{list(sin.shape)}")
    elif rope is not None:
        raise VarRateError("rope must be inv_freq [head_dim / 2], (cos, sin) or (cos, sin, inv_freq)")
    if keys_pre_rope is None:
        if cos is None:
            raise VarRateError("keys_pre_rope or rope is needed: the codec works on the keys before RoPE")
        keys_pre_rope = inverse_rope(keys.float(), cos.to(keys.device).float(), sin.to(keys.device).float())
        keys_pre_rope = keys_pre_rope.to(keys.dtype)
    else:
        keys_pre_rope = _as_heads(keys_pre_rope, "keys_pre_rope")
        if keys_pre_rope.shape != keys.shape:
            raise VarRateError(f"keys_pre_rope {list(keys_pre_rope.shape)} must have the shape of keys "
                               f"{list(keys.shape)}")
    query_mean = query_cov = None
    if query_stats is not None:
        query_mean, query_cov = (t.float().to(keys.device).contiguous() for t in query_stats)
        n_head = query_mean.shape[0]
        if query_mean.shape != (n_head, d) or query_cov.shape != (n_head, d, d):
            raise VarRateError(f"query_stats must be (mean [n_head, {d}], cov [n_head, {d}, {d}]), got "
                               f"{list(query_mean.shape)} and {list(query_cov.shape)}")
    if token_ids is not None:
        token_ids = token_ids.reshape(-1)
        if token_ids.dtype not in (torch.int64, torch.int32) or token_ids.shape[0] != L:
            raise VarRateError(f"token_ids must be [L={L}] integers, got {list(token_ids.shape)} {token_ids.dtype}")
        token_ids = token_ids.long().cpu().contiguous()
    n_layers = n_layers if n_layers is not None else layer + 1
    if not 0 <= layer < n_layers:
        raise VarRateError(f"layer {layer} is outside 0..{n_layers - 1}")
    dev = keys.device
    return _varrate.LayerCapture(
        layer=int(layer), n_layers=int(n_layers), keys=keys.contiguous(), values=values.contiguous(),
        keys_pre_rope=keys_pre_rope.contiguous(), window_queries=queries,
        rope_cos=None if cos is None else cos.to(dev).contiguous(),
        rope_sin=None if sin is None else sin.to(dev).contiguous(),
        rope_inv_freq=None if inv_freq is None else inv_freq.to(dev).contiguous(),
        o_proj=None if o_proj is None else o_proj.detach(), query_mean=query_mean, query_cov=query_cov,
        token_ids=token_ids)


# ----------------------------------------------------------------------------------------------------------------
# The codec


class Codec:
    """A compression method (VarRate by default) with its settings and basis, applied layer by layer.

    settings: a dict (keys of varrate.setting_specs()), a varrate-codec.json path, or None (the paper's defaults).
    basis: a Basis, a basis file's path, or None: methods that need one calibrate it on each layer's own capture
    (self-calibrated, its bytes charged to the budget as the CLI does)."""

    def __init__(self, settings_=None, method: str = "varrate", basis=None, *, fingerprint: str = "", **overrides):
        self.method = _varrate.registered_method_name(method)
        self.info = method_info(self.method)
        self.settings = settings(_settings_dict(settings_, "Codec settings"), **overrides)
        self.fingerprint = fingerprint
        if isinstance(basis, (str, Path)):
            basis = Basis.load(basis, fingerprint=fingerprint, stride=self.settings["stride"],
                               anchors=self.settings["anchors"])
        if basis is not None and not isinstance(basis, Basis):
            raise VarRateError(f"basis must be a varrate.Basis, a file's path or None, got {type(basis).__name__}")
        self.basis = basis
        self._shared = None  # the method made with the given basis (or none needed), made on first use

    @classmethod
    def for_model(cls, model_dir: Union[str, Path], method: str = "varrate", basis="auto", **overrides) -> "Codec":
        """The codec the CLI runs on this model: its varrate-codec.json (or width-based) defaults, `overrides` over
        them, and basis "auto" (MODEL/varrate-basis.safetensors when present, checked against the model, else
        self-calibrated), "self", a path or a Basis."""
        model_dir = Path(model_dir)
        s = model_settings(model_dir, **overrides)
        fingerprint = model_fingerprint(model_dir)
        if basis == "auto":
            basis = model_dir / BASIS_FILE if (model_dir / BASIS_FILE).exists() else None
        elif basis == "self":
            basis = None
        if isinstance(basis, (str, Path)):
            basis = Basis.load(basis, model_dir, stride=s["stride"], anchors=s["anchors"])
        return cls(s, method, basis, fingerprint=fingerprint)

    def capture(self, keys, values, queries=None, rope=None, **kw):
        """varrate.capture() with this codec's observation window."""
        kw.setdefault("obs_window", self.settings["obs_window"])
        return capture(keys, values, queries, rope, **kw)

    def _method_for(self, cap):
        if not self.info["needs_basis"] or self.basis is not None:
            if self.basis is not None:
                dim = 2 * cap.keys.shape[0] * cap.keys.shape[2]
                self.basis._handle.check(self.fingerprint, dim, self.settings["stride"], self.settings["anchors"],
                                         "basis")
                if cap.layer >= self.basis.n_layer:
                    raise VarRateError(f"basis has {self.basis.n_layer} layers, layer {cap.layer} was given")
            if self._shared is None:
                self._shared = _varrate.Method(self.method, json.dumps(self.settings),
                                               self.basis._handle if self.basis else None)
            return self._shared, None
        basis = self_calibrated_basis(cap, self.settings, self.fingerprint)
        return _varrate.Method(self.method, json.dumps(self.settings), basis._handle), basis

    def analyse(self, keys, values=None, queries=None, rope=None, **kw) -> "LayerAnalysis":
        """Analyses one layer (budget-independent work: anchors, residuals, salience, coefficients). Pass tensors
        as varrate.capture() takes them, or a capture as `keys`."""
        cap = keys if isinstance(keys, _varrate.LayerCapture) else self.capture(keys, values, queries, rope, **kw)
        method, basis = self._method_for(cap)
        return LayerAnalysis(self, cap, method, method.analyse(cap), basis)


    def allocate_layers(self, analyses: Sequence["LayerAnalysis"], kappa: Optional[float] = None,
                        **settings_) -> list:
        """Allocates every layer of a model at once: for methods that share kappa across layers (their info lists
        "all_layers" in capture_needs: varrate-layers, varrate-layers@<signal>) each layer's budget comes from
        all the analyses (given in layer order); for the others this is allocate() on each."""
        if kappa is not None:
            settings_["budget"] = kappa
        budget = json.dumps(settings_)
        handles = [a._analysis for a in analyses]
        per_layer = list(analyses[0]._method.layer_budgets(handles, budget)) if analyses else []
        out = []
        for i, a in enumerate(analyses):
            s = dict(settings_)
            if per_layer:
                s["budget"] = per_layer[i]
            out.append(a.allocate(**s))
        return out


def self_calibrated_basis(cap, settings_: dict, fingerprint: str = "") -> Basis:
    """The basis the CLI calibrates on a context when none is given, for the capture's layer: its own residuals,
    min(R, D) directions (the other layers' rows are zeros: a basis per layer, as calibration is)."""
    one = _varrate.LayerCapture(layer=0, n_layers=1, keys=cap.keys, values=cap.values,
                                keys_pre_rope=cap.keys_pre_rope, rope_cos=cap.rope_cos, rope_sin=cap.rope_sin)
    calibrator = _varrate.BasisCalibrator(json.dumps(settings_), 1)
    calibrator.add(one)
    dim = 2 * cap.keys.shape[0] * cap.keys.shape[2]
    fitted = Basis(calibrator.finish(min(settings_["rank"], dim), fingerprint, True))
    zero = torch.zeros_like(fitted.layer(0))  # one tensor for every other layer (the basis keeps it, no copy)
    layers = [zero] * cap.n_layers
    layers[cap.layer] = fitted.layer(0)
    info = fitted.info
    info["self_calibrated"] = True
    return Basis(_varrate.Basis(json.dumps(info), layers))


class LayerAnalysis:
    """One layer analysed; allocate() any number of budgets on it."""

    def __init__(self, codec, cap, method, analysis, basis):
        self.codec, self.capture, self._method, self._analysis, self.basis = codec, cap, method, analysis, basis

    @property
    def layer(self) -> int:
        return self._analysis.layer

    @property
    def n_tokens(self) -> int:
        return self._analysis.n_tokens

    def allocate(self, kappa: Optional[float] = None, **settings_) -> "Allocation":
        """Ranks (or kept positions) for budget kappa (default: the codec's), with any allocation setting
        (r_min, coef_bits, ...) over the codec's. Raises InfeasibleBudgetError when this L cannot meet it."""
        if kappa is None and "budget" in settings_:
            kappa = settings_.pop("budget")
        if kappa is not None:
            if not isinstance(kappa, (int, float)) or isinstance(kappa, bool) or not math.isfinite(kappa):
                raise VarRateError(f"kappa must be a number in (0, 1], got {kappa!r}")
            settings_["budget"] = float(kappa)
        return Allocation(self, self._analysis.allocate(json.dumps(settings_)))


class Allocation:
    """A budget's choice on one analysed layer: ranks, diagnostics, and the layer's cache for it."""

    def __init__(self, analysis: LayerAnalysis, handle):
        self.analysis, self._handle = analysis, handle

    @property
    def diagnostics(self) -> dict:
        """Counts, bytes and errors, the CLI's JSON fields (budget_B, sum_ranks, footprint, mean_rel_error, ...)."""
        return json.loads(self._handle.diagnostics_json(False))

    @property
    def ranks(self) -> torch.Tensor:
        """[L] int64: each token's rank (D for exact tokens, 0 for evicted ones)."""
        return self._handle.rank

    @property
    def exact(self) -> torch.Tensor:
        return self._handle.exact

    @property
    def salience(self) -> torch.Tensor:
        return self._handle.salience

    @property
    def rel_error(self) -> torch.Tensor:
        """[L] ||z - z^|| / ||z|| per token in the pre-RoPE joint space."""
        return self._handle.rel_error

    @property
    def kept(self) -> torch.Tensor:
        """[n_kv_head, kept] positions (eviction methods)."""
        return self._handle.kept

    @property
    def footprint(self) -> float:
        return self.diagnostics["footprint"]

    def materialise(self) -> tuple:
        """The layer's cache for decoding: keys (post-RoPE) and values, [n_kv_head, L, head_dim] each,
        reconstructed in place (eviction methods: the kept entries)."""
        return self._handle.materialise(self.analysis.capture)

    def store(self) -> Optional["Store"]:
        """The layer held compressed at its accounted size (VarRate, flat, KIVI, ThinK), or None for methods whose
        cache is dense (eviction)."""
        s = self._handle.store(self.analysis.capture)
        return None if s is None else Store(s)


class Store:
    """A compressed layer that decoding attends through without reconstructing it."""

    def __init__(self, handle):
        self._handle = handle

    @property
    def resident_bytes(self) -> int:
        return self._handle.resident_bytes

    @property
    def length(self) -> int:
        return self._handle.length

    def describe(self) -> str:
        return self._handle.describe()

    def reconstruct(self) -> tuple:
        return self._handle.reconstruct()

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               scale: Optional[float] = None) -> torch.Tensor:
        """Attention of post-RoPE queries q [n_head, n, head_dim] over the store followed by the new entries keys,
        values [n_kv_head, n_new >= n, head_dim] (the queries' own are the last n, causal among themselves).
        Returns [n_head, n, head_dim]; scale default 1 / sqrt(head_dim)."""
        q = _as_heads(q, "q")
        keys = _as_heads(keys, "keys")
        values = _as_heads(values, "values")
        if keys.shape != values.shape or keys.shape[1] < q.shape[1] or keys.shape[2] != q.shape[2] \
                or q.shape[0] % keys.shape[0] != 0:
            raise VarRateError(f"attend: q {list(q.shape)}, keys {list(keys.shape)}, values {list(values.shape)}: "
                               "keys and values [n_kv_head, n_new >= n, head_dim], n_head a multiple of n_kv_head")
        scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)
        return self._handle.attend(q.contiguous(), keys.contiguous(), values.contiguous(), scale)

"""One layer's capture from a Hugging Face attention module during prefill (what kvpress's hooks see): the keys
before RoPE and the observation window's queries are recomputed from the layer's input with the module's own
projections (and Qwen3's q_norm / k_norm), as the model computed them."""
import torch

from ._codec import capture

__all__ = ["hf_layer_capture"]


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def _heads(module, proj, norm, hidden_states):
    """[b, n, hidden] -> [b, heads, n, head_dim] through `proj` (and `norm`), as the attention layer does."""
    b, n, _ = hidden_states.shape
    x = proj(hidden_states).view(b, n, -1, module.head_dim)
    if norm is not None:
        x = norm(x)
    return x.transpose(1, 2)


@torch.no_grad()
def hf_layer_capture(module, hidden_states, keys, values, position_embeddings, *, batch: int, n_layers: int,
                     inv_freq, obs_window: int):
    """The capture of sequence `batch` of a prefill: keys/values [b, n_kv_head, L, head_dim] as the cache holds
    them (post-RoPE), hidden_states [b, L, hidden] the layer's input, position_embeddings (cos, sin) [b, L, d]."""
    cos, sin = position_embeddings
    h = hidden_states[batch:batch + 1]
    keys_pre = _heads(module, module.k_proj, getattr(module, "k_norm", None), h)[0]  # [G, L, d]
    w = min(obs_window, h.shape[1])
    q = _heads(module, module.q_proj, getattr(module, "q_norm", None), h[:, -w:])[0]  # [H, w, d]
    c, s = cos[batch, -w:].unsqueeze(0), sin[batch, -w:].unsqueeze(0)
    q = (q * c) + (_rotate_half(q) * s)
    return capture(keys[batch], values[batch], q, (cos[batch], sin[batch], inv_freq),
                   keys_pre_rope=keys_pre.to(keys.dtype), layer=module.layer_idx, n_layers=n_layers,
                   o_proj=module.o_proj.weight)

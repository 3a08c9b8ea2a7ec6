"""One layer's capture from a Hugging Face attention module during prefill (what kvpress's hooks see): the keys
before RoPE and the observation window's queries are recomputed from the layer's input with the module's own
projections (and Qwen3's q_norm / k_norm), as the model computed them."""
import torch

from ._codec import VarRateError, apply_rope, capture

__all__ = ["hf_layer_capture"]


def _heads(module, proj, norm, hidden_states):
    """[b, n, hidden] -> [b, heads, n, head_dim] through `proj` (and `norm`), as the attention layer does."""
    b, n, _ = hidden_states.shape
    x = proj(hidden_states).view(b, n, -1, module.head_dim)
    if norm is not None:
        x = norm(x)
    return x.transpose(1, 2)


QUERY_STATS_SKIP = 4  # the runtime's kQueryStatsSkip: the first positions' queries are left out of the statistics


def query_statistics(module, h):
    """Mean and centred covariance (over the count) of the pre-RoPE queries of positions >= QUERY_STATS_SKIP,
    per head, in float64: what the runtime's prefill gives Expected Attention. None for shorter inputs."""
    if h.shape[1] <= QUERY_STATS_SKIP:
        return None
    q = _heads(module, module.q_proj, getattr(module, "q_norm", None), h[:, QUERY_STATS_SKIP:])[0].double()
    mean = q.mean(1)  # [H, d]
    centred = q - mean.unsqueeze(1)
    return mean, centred.transpose(1, 2) @ centred / q.shape[1]  # [H, d, d]


@torch.no_grad()
def hf_layer_capture(module, hidden_states, keys, values, position_embeddings, *, batch: int, n_layers: int,
                     inv_freq, obs_window: int, needs=(), token_ids=None):
    """The capture of sequence `batch` of a prefill: keys/values [b, n_kv_head, L, head_dim] as the cache holds
    them (post-RoPE), hidden_states [b, L, hidden] the layer's input, position_embeddings (cos, sin) [b, L, d].
    needs: the method's capture_needs ("query_stats", "token_ids": then token_ids [b, L] are the input ids)."""
    cos, sin = position_embeddings
    h = hidden_states[batch:batch + 1]
    keys_pre = _heads(module, module.k_proj, getattr(module, "k_norm", None), h)[0]  # [G, L, d]
    w = min(obs_window, h.shape[1])
    q = _heads(module, module.q_proj, getattr(module, "q_norm", None), h[:, -w:])[0]  # [H, w, d]
    q = apply_rope(q, cos[batch, -w:], sin[batch, -w:])
    stats = query_statistics(module, h) if "query_stats" in needs else None
    ids = None
    if "token_ids" in needs:
        if token_ids is None or token_ids.shape[-1] != keys.shape[2]:
            raise VarRateError("this method reads the context's token ids: a prefill of the whole context from an "
                               "empty cache is needed")
        ids = token_ids[batch]
    return capture(keys[batch], values[batch], q, (cos[batch], sin[batch], inv_freq),
                   keys_pre_rope=keys_pre.to(keys.dtype), layer=module.layer_idx, n_layers=n_layers,
                   o_proj=module.o_proj.weight, query_stats=stats, token_ids=ids)

#pragma once
// A layer held KIVI-quantized (Liu et al. 2024), at the size its bits account for, attended block by block:
//   quantized tokens [0, n_quant)   keys per channel (each channel's groups of 32 consecutive tokens share a
//                                   scale and minimum), values per token (groups of 32 channels of a head, or
//                                   the whole head when head_dim is not a multiple of 32); b-bit codes packed
//                                   (codec/quantize.h), scales and minima fp16; keys post-RoPE as KIVI does;
//   residual tokens [n_quant, L)     the most recent ones (at least 128), keys and values at cache precision.
// Codes are token-group major (keys [n_quant / 32, n_kv_head, head_dim, 32], values [n_quant, n_kv_head,
// head_dim]) so that a block of tokens is one contiguous range of each stream: attend() dequantizes a bounded
// block into scratch, scores it and accumulates its values, as the compressed VarRate layer does.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"

namespace varrate {

class QuantizedLayer : public LayerPrefix {
  public:
    struct Parts {
        int64_t layer = 0, n_tokens = 0, n_kv_head = 0, head_dim = 0;
        int64_t bits = 2;
        int64_t n_quant = 0;                // quantized tokens, a multiple of 32
        at::Tensor key_codes, value_codes;  // packed uint8
        at::Tensor key_scale, key_min;      // [n_quant / 32, n_kv_head, head_dim] fp16
        at::Tensor value_scale, value_min;  // [n_quant, n_kv_head, head_dim / value_group] fp16
        at::Tensor residual_keys;           // [n_kv_head, L - n_quant, head_dim] post-RoPE, cache dtype
        at::Tensor residual_values;         // [n_kv_head, L - n_quant, head_dim]
    };
    static constexpr int64_t kTokenGroup = 32;  // tokens per key group
    static constexpr int64_t kBlock = 1024;     // tokens dequantized at once (a multiple of kTokenGroup)
    // Values per value group for a head width: 32 when it divides head_dim, else the whole head.
    static int64_t value_group(int64_t head_dim);

    // Quantizes post-RoPE keys and values [n_kv_head, L, head_dim] to `bits`, keeping the last `residual`
    // tokens (and enough before them to make the quantized part whole groups) at their precision.
    static Parts quantize(const at::Tensor& keys, const at::Tensor& values, int64_t bits, int64_t residual,
                          int64_t layer);
    // Checks shapes; throws Error naming what does not match.
    explicit QuantizedLayer(Parts parts);

    int64_t length() const override { return p_.n_tokens; }
    const Parts& parts() const { return p_; }
    int64_t resident_bytes() const override;
    // The most scratch attend() allocates at once for n_q queries of n_head heads and n_tail tail entries.
    int64_t scratch_bytes(int64_t n_head, int64_t n_q, int64_t n_tail) const;
    at::Tensor attend(const at::Tensor& q, const at::Tensor& tail_keys, const at::Tensor& tail_values,
                      double scale) const override;
    LayerKV reconstruct() const override;

  private:
    // Tokens [begin, begin + count) of the quantized part, dequantized: [n_kv_head, count, head_dim] fp32.
    at::Tensor keys_block(int64_t begin, int64_t count) const;
    at::Tensor values_block(int64_t begin, int64_t count) const;
    Parts p_;
};

}  // namespace varrate

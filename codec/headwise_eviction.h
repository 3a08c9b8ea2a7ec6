#pragma once
// Head-wise (ragged) eviction: each KV head of a layer keeps its own set of positions, and the heads keep
// different numbers of them (Ada-KV; later Expected Attention inside Ada-KV, KVzip). A dense [n_kv_head, n,
// head_dim] cache cannot hold that exactly, so the layer is held by a store that pads every head to the
// longest head's count and masks the padding out of attention (HeadwiseEvictedLayer, a LayerPrefix):
// decoding reads that store (CompressionMethod::store), and materialise() gives the padded entries with
// their positions and validity in the allocation, which the distortion measures read (core/capture.h's
// add_distortion).
//
// A method calls, with its keep mask [n_kv_head, L] bool (true: the head keeps the position):
//   allocate     headwise_allocation   -> LayerAllocation: kept (padded positions), kept_valid, diagnostics
//   materialise  headwise_materialise  -> the padded entries (padding zero), for the distortion measures
//   store        headwise_store        -> the store decoding attends through
// A method that has per-head scores and per-head counts gets its mask from headwise_mask_from_order.
#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "codec/method.h"
#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace varrate {

// A keep mask's positions, each KV head's row ascending and padded to the longest row.
struct HeadwiseKeep {
    at::Tensor positions;  // [G, n_max] int64: a head's kept positions ascending, then padding (L - 1)
    at::Tensor valid;      // [G, n_max] bool: false marks padding
};
// Throws Error for a mask that is not [G, L] bool or that keeps nothing at all.
HeadwiseKeep headwise_keep(const at::Tensor& keep_mask);

// Each head's first counts[g] entries of its row of `order` ([G, n] int64 positions in [0, L), by
// decreasing preference) kept: [G, L] bool. counts: [G] int64, each in [0, n].
at::Tensor headwise_mask_from_order(const at::Tensor& order, const at::Tensor& counts, int64_t n_tokens);

// Counts, accounted footprint, per-token rank, error and kept mask of an eviction given as a keep mask
// [G, L] bool (the heads may keep different numbers). kv_sq [G, L] fp32 is each head's ||k||^2 + ||v||^2
// of every token (eviction_kv_sq). Per token:
//   rel_error = sqrt(sum over the heads that evicted it of ||k||^2 + ||v||^2 / the same sum over all heads)
// (1 for a token no head keeps, 0 for one every head keeps, partial otherwise); rank = the kept heads'
// share of D (2 * head_dim per head); exact = kept by every head. The footprint counts kept entries only:
// kept entries / (G * L); stored_bytes = kept entries * 2 * head_dim * element_size; n_exact is the mean
// count per head (rounded down).
LayerDiagnostics mask_eviction_diagnostics(const std::string& method, int64_t layer,
                                           const at::Tensor& keep_mask, const at::Tensor& kv_sq,
                                           int64_t head_dim, int64_t element_size);

// The allocation of a head-wise eviction: kept = the padded positions [G, n_max] and kept_valid [G, n_max]
// (headwise_keep), diagnostics = mask_eviction_diagnostics.
LayerAllocation headwise_allocation(const std::string& method, int64_t layer, const at::Tensor& keep_mask,
                                    const at::Tensor& kv_sq, int64_t head_dim, int64_t element_size);

// The padded entries of a head-wise allocation: keys (post-RoPE) and values [G, n_max, head_dim], zero in
// the padding. Not a cache to decode from (attention would see the padding): the distortion measures read it
// with the allocation's kept and kept_valid; decoding reads headwise_store.
LayerKV headwise_materialise(const LayerCapture& capture, const LayerAllocation& allocation);

// A layer held by a head-wise eviction: each KV head's kept keys (post-RoPE) and values at cache precision,
// padded to the longest head's count, with the validity mask. Attention is exact: a query attends to its
// KV head's valid entries (the padding's scores are -inf) and to the dense tail after the store
// (mask_future_tail), one softmax over both, in fp32.
class HeadwiseEvictedLayer : public LayerPrefix {
  public:
    struct Parts {
        int64_t layer = 0;
        int64_t n_context = 0;  // L: the positions the kept ones were chosen from
        at::Tensor keys;        // [G, n_max, head_dim] post-RoPE, cache dtype
        at::Tensor values;      // [G, n_max, head_dim]
        at::Tensor valid;       // [G, n_max] bool, the same device
    };
    // Checks shapes and dtypes; throws Error naming what does not match.
    explicit HeadwiseEvictedLayer(Parts parts);

    // The padded width n_max (the longest head's count): entries in the layout, not per head.
    int64_t length() const override { return p_.keys.size(1); }
    const Parts& parts() const { return p_; }
    // The kept entries per KV head: [G] int64 CPU.
    at::Tensor counts() const;
    // What the store holds: keys and values padded to n_max for every head, plus the validity mask (one
    // byte per slot). The padding costs (G * n_max - kept entries) * 2 * head_dim * element size +
    // G * n_max bytes beyond the accounted footprint (diagnostics' stored_bytes, the kept entries only).
    int64_t resident_bytes() const override;
    at::Tensor attend(const at::Tensor& q, const at::Tensor& tail_keys, const at::Tensor& tail_values,
                      double scale) const override;
    // The dense entries the store stands for, [G, n, head_dim] each, when every head keeps the same number
    // n (each head's valid entries in their stored order); a store whose heads keep different numbers has
    // no dense equivalent (no dense cache attends to different sets per head) and throws Error saying so:
    // decode through attend() (KVCache's default) instead of densifying.
    LayerKV reconstruct() const override;

  private:
    Parts p_;
};

// The store of a head-wise allocation (headwise_allocation's kept and kept_valid over the capture).
std::shared_ptr<const LayerPrefix> headwise_store(const LayerCapture& capture,
                                                  const LayerAllocation& allocation);

// A method whose allocations are head-wise (Ada-KV, Expected Attention, KVzip, CriticalAdaKV), on Base:
// materialise() gives the padded entries (for the distortion measures), store() the store decoding reads.
template <class Base>
class HeadwiseMethod : public Base {
  public:
    using Base::Base;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis&,
                        const LayerAllocation& allocation) override {
        LayerKV kv = headwise_materialise(capture, allocation);
        sync_for_timing(kv.values, this->settings().precise_timing);
        return kv;
    }
    std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture, const LayerAnalysis&,
                                             const LayerAllocation& allocation) override {
        return headwise_store(capture, allocation);
    }
};

}  // namespace varrate

#pragma once
// The one place where a layer's compressed store (a LayerPrefix, models/kv_cache.h) becomes named tensors
// plus JSON scalars, and back: cache files (core/cache_file.h) save and load stores only through these two
// functions. Each store kind is one branch in to_tensors (chosen by the store's C++ type) and one in
// prefix_from_tensors (chosen by the "kind" field to_tensors wrote), so that a new kind (a quantized store, a
// KIVI store) adds one of each and nothing else changes.
//
// Kinds:
//   "compressed_layer"  codec/compressed_layer.h (VarRate, flat). Tensors <prefix>exact_keys, exact_values,
//                       nearest, ranks, coefficients, basis (only the rows the ranks reach), inv_freq;
//                       scalars layer, n_tokens, n_kv_head, head_dim, stride, window, rope_dtype, basis_rows
//                       (the rows of the basis the store was made with: the saved rows are zero-padded back
//                       to it, so that attention runs the same arithmetic as before saving); with
//                       selective attention also <prefix>landmarks and scalars landmark_chunk, select_tokens.
//   "quantized_layer"   codec/quantized_layer.h (KIVI).
//   "headwise_eviction" codec/headwise_eviction.h (Ada-KV). Tensors <prefix>keys, values ([n_kv_head,
//                       n_tokens, head_dim], each head padded to the longest), valid ([n_kv_head, n_tokens]
//                       uint8 0/1: safetensors has no bool); scalars layer, n_tokens (the padded width),
//                       n_context, n_kv_head, head_dim.
//   "channel_pruned"    codec/channel_pruned_layer.h (ThinK). Tensors <prefix>keys ([n_kv_head, n_tokens,
//                       kept_channels]), channels ([n_kv_head, kept_channels] uint8), values; scalars layer,
//                       n_tokens, n_kv_head, head_dim, kept_channels.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "models/kv_cache.h"

namespace varrate {

struct PrefixTensors {
    // {"kind": ..., the kind's scalars}; every kind writes "n_tokens" (its entries), which cache files check
    // against their per-layer counts before reading the tensors.
    nlohmann::json meta;
    std::vector<std::pair<std::string, at::Tensor>> tensors;  // each name begins with the given prefix
    // Bytes of the saved tensors that are model-level data rather than the store's own (a basis, RoPE
    // frequencies): a file reports them apart from the store's resident bytes.
    int64_t shared_bytes = 0;
};

// The store as tensors named `name_prefix` + field (e.g. "layers.3." + "ranks"). Throws Error for a store
// kind that cannot be saved yet.
PrefixTensors to_tensors(const LayerPrefix& prefix, const std::string& name_prefix);

// What the reader expects of every store, whatever its kind: the layer's entries, the model's KV shape and
// the cache dtype.
struct PrefixExpectation {
    int64_t n_tokens = 0;
    int64_t n_kv_head = 0;
    int64_t head_dim = 0;
    at::ScalarType dtype = at::kFloat;
};

// Returns the tensor saved under a full name; throws Error naming a missing one.
using TensorSource = std::function<at::Tensor(const std::string& name)>;

// Rebuilds a store from what to_tensors wrote: `meta` (its "kind" chooses the branch), tensors read through
// `tensors` under `name_prefix`. Every scalar, dtype and shape is checked (against `expect` too), index
// values included, so that a store that loads never fails later in attention; throws Error "<where>: ..."
// naming what does not match.
std::shared_ptr<const LayerPrefix> prefix_from_tensors(const nlohmann::json& meta,
                                                       const std::string& name_prefix,
                                                       const TensorSource& tensors,
                                                       const PrefixExpectation& expect,
                                                       const std::string& where);

// The kinds prefix_from_tensors reads, for messages.
std::vector<std::string> prefix_kinds();

}  // namespace varrate

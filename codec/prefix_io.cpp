#include "codec/prefix_io.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <tuple>
#include <typeinfo>

#include "base/error.h"
#include "codec/channel_pruned_layer.h"
#include "codec/compressed_layer.h"
#include "codec/headwise_eviction.h"
#include "codec/method.h"
#include "codec/quantized_layer.h"
#include "models/device.h"

namespace varrate {

namespace {

constexpr const char* kCompressedLayer = "compressed_layer";
constexpr const char* kQuantizedLayer = "quantized_layer";
constexpr const char* kHeadwiseEviction = "headwise_eviction";
constexpr const char* kChannelPruned = "channel_pruned";

int64_t bytes_of(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// A required integer field of a store's metadata.
int64_t integer(const nlohmann::json& meta, const char* key, const std::string& where) {
    const auto it = meta.find(key);
    if (it == meta.end()) throw Error(fmt::format("{}: the metadata has no '{}'", where, key));
    if (!it->is_number_integer())
        throw Error(fmt::format("{}: '{}' must be an integer, got {}", where, key, it->dump()));
    return it->get<int64_t>();
}

std::string string_field(const nlohmann::json& meta, const char* key, const std::string& where) {
    const auto it = meta.find(key);
    if (it == meta.end()) throw Error(fmt::format("{}: the metadata has no '{}'", where, key));
    if (!it->is_string())
        throw Error(fmt::format("{}: '{}' must be a string, got {}", where, key, it->dump()));
    return it->get<std::string>();
}

at::ScalarType float_dtype(const std::string& name, const std::string& where) {
    for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kHalf})
        if (dtype_name(t) == name) return t;
    throw Error(fmt::format("{}: unknown floating dtype '{}' (fp32, bf16, fp16)", where, name));
}

// The tensor `field` of a store, checked to have one of `dtypes`.
at::Tensor typed(const TensorSource& tensors, const std::string& name,
                 std::initializer_list<at::ScalarType> dtypes, const std::string& where) {
    at::Tensor t = tensors(name);
    for (at::ScalarType d : dtypes)
        if (t.scalar_type() == d) return t;
    std::vector<std::string> names;
    for (at::ScalarType d : dtypes) names.emplace_back(c10::toString(d));
    throw Error(fmt::format("{}: tensor '{}' is {}, expected {}", where, name, c10::toString(t.scalar_type()),
                            fmt::join(names, " or ")));
}

// The store's scalars against what the model expects of a layer; throws Error naming the first that differs.
void check_expected_shape(int64_t n_tokens, int64_t n_kv_head, int64_t head_dim,
                          const PrefixExpectation& expect, const std::string& where) {
    for (auto [what, got, want] :
         {std::tuple<const char*, int64_t, int64_t>{"n_tokens", n_tokens, expect.n_tokens},
          {"n_kv_head", n_kv_head, expect.n_kv_head},
          {"head_dim", head_dim, expect.head_dim}})
        if (got != want) throw Error(fmt::format("{}: {} is {}, expected {}", where, what, got, want));
}

// The store made from its parts (whose constructor checks them), its errors prefixed with `where`.
template <typename Store>
std::shared_ptr<const LayerPrefix> make_store(typename Store::Parts parts, const std::string& where) {
    try {
        return std::make_shared<const Store>(std::move(parts));
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    } catch (const c10::Error& e) {
        throw Error(where + ": " + describe_exception(e));
    }
}

PrefixTensors compressed_layer_tensors(const CompressedLayer& c, const std::string& prefix) {
    const CompressedLayer::Parts& p = c.parts();
    // Only the rows the ranks reach: the rest of the basis is never read for this layer's tokens.
    const int64_t used_rows = c.n_coded() > 0 ? c.ranks(0, c.n_coded()).max().item<int64_t>() : 0;
    const at::Tensor basis = p.basis.narrow(0, 0, used_rows);
    PrefixTensors out;
    out.meta = {{"kind", kCompressedLayer},
                {"layer", p.layer},
                {"n_tokens", p.n_tokens},
                {"n_kv_head", p.n_kv_head},
                {"head_dim", p.head_dim},
                {"stride", p.stride},
                {"window", p.window},
                {"rope_dtype", dtype_name(p.rope_dtype)},
                {"basis_rows", p.basis.size(0)},
                {"coef_bits", p.coef_bits},
                {"anchors", p.anchors},
                {"index_bits", p.index_bits},
                {"set_bits", p.set_bits},
                {"rank_bits", p.rank_bits},
                {"rank_total", p.rank_total}};
    out.tensors = {{prefix + "exact_keys", p.exact_keys},
                   {prefix + "exact_values", p.exact_values},
                   {prefix + "nearest", p.nearest},
                   {prefix + "ranks", p.ranks},
                   {prefix + "basis", basis},
                   {prefix + "inv_freq", p.inv_freq}};
    if (c.quantized()) {
        out.tensors.push_back({prefix + "codes", p.codes});
        out.tensors.push_back({prefix + "group_scale", p.group_scale});
        out.tensors.push_back({prefix + "group_min", p.group_min});
    } else {
        out.tensors.push_back({prefix + "coefficients", p.coefficients});
    }
    if (p.landmark_chunk >
        0) {  // selective attention's landmarks (written only then: older files read the same)
        out.meta["landmark_chunk"] = p.landmark_chunk;
        out.meta["select_tokens"] = p.select_tokens;
        out.tensors.push_back({prefix + "landmarks", p.landmarks});
    }
    out.shared_bytes = bytes_of(basis) + bytes_of(p.inv_freq);
    return out;
}

std::shared_ptr<const LayerPrefix> compressed_layer_from_tensors(const nlohmann::json& meta,
                                                                 const std::string& prefix,
                                                                 const TensorSource& tensors,
                                                                 const PrefixExpectation& expect,
                                                                 const std::string& where) {
    CompressedLayer::Parts p;
    p.layer = integer(meta, "layer", where);
    p.n_tokens = integer(meta, "n_tokens", where);
    p.n_kv_head = integer(meta, "n_kv_head", where);
    p.head_dim = integer(meta, "head_dim", where);
    p.stride = integer(meta, "stride", where);
    p.window = integer(meta, "window", where);
    p.rope_dtype = float_dtype(string_field(meta, "rope_dtype", where), where);
    const int64_t basis_rows = integer(meta, "basis_rows", where);
    check_expected_shape(p.n_tokens, p.n_kv_head, p.head_dim, expect, where);
    if (p.stride < 1 || p.window < 0)
        throw Error(fmt::format("{}: bad layout stride={} window={}", where, p.stride, p.window));

    p.exact_keys = typed(tensors, prefix + "exact_keys", {expect.dtype}, where);
    p.exact_values = typed(tensors, prefix + "exact_values", {expect.dtype}, where);
    const bool packed = meta.contains("index_bits");
    if (packed) {
        p.anchors = integer(meta, "anchors", where);
        p.index_bits = integer(meta, "index_bits", where);
        p.rank_bits = integer(meta, "rank_bits", where);
        // Format 2 stored c ordinals and every rank; format 3 may store sets and leave uniform ranks out.
        p.set_bits = meta.contains("set_bits") ? integer(meta, "set_bits", where) : 0;
        p.rank_total = meta.contains("rank_total") ? integer(meta, "rank_total", where) : 0;
        p.nearest = typed(tensors, prefix + "nearest", {at::kByte}, where);
        p.ranks = typed(tensors, prefix + "ranks", {at::kByte}, where);
    }
    // Files written before quantized coefficients existed hold them at cache precision.
    p.coef_bits = meta.contains("coef_bits") ? integer(meta, "coef_bits", where) : 16;
    if (p.coef_bits < 16) {
        p.codes = typed(tensors, prefix + "codes", {at::kByte}, where);
        p.group_scale = typed(tensors, prefix + "group_scale", {at::kHalf}, where);
        p.group_min = typed(tensors, prefix + "group_min", {at::kHalf}, where);
    } else {
        p.coefficients = typed(tensors, prefix + "coefficients", {expect.dtype}, where);
    }
    if (meta.contains("landmark_chunk")) {
        p.landmark_chunk = integer(meta, "landmark_chunk", where);
        p.select_tokens = integer(meta, "select_tokens", where);
        p.landmarks = typed(tensors, prefix + "landmarks", {expect.dtype}, where);
    }
    const at::Tensor basis = typed(tensors, prefix + "basis", {at::kFloat}, where);
    p.inv_freq = typed(tensors, prefix + "inv_freq", {at::kFloat}, where);
    if (basis.dim() != 2 || basis.size(0) > basis_rows)
        throw Error(fmt::format("{}: basis has shape {}, expected at most {} rows", where, shape_str(basis),
                                basis_rows));
    // The rows past those saved were multiplied by zero coefficient sums only; zeros give the same sums.
    p.basis = basis.size(0) == basis_rows
                  ? basis
                  : at::cat({basis, at::zeros({basis_rows - basis.size(0), basis.size(1)}, basis.options())});
    if (!packed) {
        // Files written before the indices and ranks were packed (format version 1) hold them as [n_coded, c]
        // int16 / int32 and [n_coded] int16: range-checked, then packed as this build stores them.
        const at::Tensor nearest = typed(tensors, prefix + "nearest", {at::kShort, at::kInt}, where);
        const at::Tensor ranks = typed(tensors, prefix + "ranks", {at::kShort}, where);
        const int64_t n_anchors = (p.n_tokens + p.stride - 1) / p.stride;
        if (nearest.dim() != 2 || ranks.dim() != 1 || nearest.size(0) != ranks.size(0))
            throw Error(fmt::format("{}: anchor indices {} and ranks {} do not match", where,
                                    shape_str(nearest), shape_str(ranks)));
        if (nearest.numel() > 0) {
            const int64_t lo = nearest.min().item<int64_t>(), hi = nearest.max().item<int64_t>();
            if (lo < 0 || hi >= n_anchors)
                throw Error(fmt::format("{}: anchor indices span [{}, {}], the layer has {} anchors", where,
                                        lo, hi, n_anchors));
        }
        if (ranks.numel() > 0 &&
            (ranks.min().item<int64_t>() < 0 || ranks.max().item<int64_t>() > basis_rows))
            throw Error(fmt::format("{}: ranks span [{}, {}], the basis has {} rows", where,
                                    ranks.min().item<int64_t>(), ranks.max().item<int64_t>(), basis_rows));
        CompressedLayer::pack_metadata(p, nearest, ranks, n_anchors, basis_rows);
    }
    return make_store<CompressedLayer>(std::move(p), where);  // checks every shape and the layout
}

PrefixTensors quantized_layer_tensors(const QuantizedLayer& q, const std::string& prefix) {
    const QuantizedLayer::Parts& p = q.parts();
    PrefixTensors out;
    out.meta = {{"kind", kQuantizedLayer},  {"layer", p.layer},       {"n_tokens", p.n_tokens},
                {"n_kv_head", p.n_kv_head}, {"head_dim", p.head_dim}, {"bits", p.bits},
                {"n_quant", p.n_quant}};
    out.tensors = {
        {prefix + "key_codes", p.key_codes},         {prefix + "value_codes", p.value_codes},
        {prefix + "key_scale", p.key_scale},         {prefix + "key_min", p.key_min},
        {prefix + "value_scale", p.value_scale},     {prefix + "value_min", p.value_min},
        {prefix + "residual_keys", p.residual_keys}, {prefix + "residual_values", p.residual_values}};
    return out;
}

std::shared_ptr<const LayerPrefix> quantized_layer_from_tensors(const nlohmann::json& meta,
                                                                const std::string& prefix,
                                                                const TensorSource& tensors,
                                                                const PrefixExpectation& expect,
                                                                const std::string& where) {
    QuantizedLayer::Parts p;
    p.layer = integer(meta, "layer", where);
    p.n_tokens = integer(meta, "n_tokens", where);
    p.n_kv_head = integer(meta, "n_kv_head", where);
    p.head_dim = integer(meta, "head_dim", where);
    p.bits = integer(meta, "bits", where);
    p.n_quant = integer(meta, "n_quant", where);
    check_expected_shape(p.n_tokens, p.n_kv_head, p.head_dim, expect, where);
    p.key_codes = typed(tensors, prefix + "key_codes", {at::kByte}, where);
    p.value_codes = typed(tensors, prefix + "value_codes", {at::kByte}, where);
    p.key_scale = typed(tensors, prefix + "key_scale", {at::kHalf}, where);
    p.key_min = typed(tensors, prefix + "key_min", {at::kHalf}, where);
    p.value_scale = typed(tensors, prefix + "value_scale", {at::kHalf}, where);
    p.value_min = typed(tensors, prefix + "value_min", {at::kHalf}, where);
    p.residual_keys = typed(tensors, prefix + "residual_keys", {expect.dtype}, where);
    p.residual_values = typed(tensors, prefix + "residual_values", {expect.dtype}, where);
    return make_store<QuantizedLayer>(std::move(p), where);  // checks every shape
}

PrefixTensors headwise_tensors(const HeadwiseEvictedLayer& h, const std::string& prefix) {
    const HeadwiseEvictedLayer::Parts& p = h.parts();
    PrefixTensors out;
    out.meta = {{"kind", kHeadwiseEviction},   {"layer", p.layer},
                {"n_tokens", h.length()},      {"n_context", p.n_context},
                {"n_kv_head", p.keys.size(0)}, {"head_dim", p.keys.size(2)}};
    // safetensors has no bool: the validity mask is saved as uint8 (0 / 1).
    out.tensors = {
        {prefix + "keys", p.keys}, {prefix + "values", p.values}, {prefix + "valid", p.valid.to(at::kByte)}};
    return out;
}

std::shared_ptr<const LayerPrefix> headwise_from_tensors(const nlohmann::json& meta,
                                                         const std::string& prefix,
                                                         const TensorSource& tensors,
                                                         const PrefixExpectation& expect,
                                                         const std::string& where) {
    HeadwiseEvictedLayer::Parts p;
    p.layer = integer(meta, "layer", where);
    p.n_context = integer(meta, "n_context", where);
    const int64_t n_tokens = integer(meta, "n_tokens", where);
    check_expected_shape(n_tokens, integer(meta, "n_kv_head", where), integer(meta, "head_dim", where),
                         expect, where);
    p.keys = typed(tensors, prefix + "keys", {expect.dtype}, where);
    p.values = typed(tensors, prefix + "values", {expect.dtype}, where);
    const at::Tensor valid = typed(tensors, prefix + "valid", {at::kByte}, where);
    if (valid.numel() > 0 && valid.max().item<int64_t>() > 1)
        throw Error(fmt::format("{}: the validity mask holds values other than 0 and 1", where));
    p.valid = valid.to(at::kBool);
    const std::vector<int64_t> shape{expect.n_kv_head, n_tokens, expect.head_dim};
    if (p.keys.sizes().vec() != shape)
        throw Error(fmt::format("{}: keys have shape {}, expected [{}]", where, shape_str(p.keys),
                                fmt::join(shape, ", ")));
    return make_store<HeadwiseEvictedLayer>(std::move(p), where);  // checks values and the mask
}

PrefixTensors channel_pruned_tensors(const ChannelPrunedLayer& c, const std::string& prefix) {
    const ChannelPrunedLayer::Parts& p = c.parts();
    PrefixTensors out;
    out.meta = {{"kind", kChannelPruned}, {"layer", p.layer},
                {"n_tokens", c.length()}, {"n_kv_head", p.values.size(0)},
                {"head_dim", p.head_dim}, {"kept_channels", c.kept_channels()}};
    out.tensors = {
        {prefix + "keys", p.keys}, {prefix + "channels", p.channels}, {prefix + "values", p.values}};
    return out;
}

std::shared_ptr<const LayerPrefix> channel_pruned_from_tensors(const nlohmann::json& meta,
                                                               const std::string& prefix,
                                                               const TensorSource& tensors,
                                                               const PrefixExpectation& expect,
                                                               const std::string& where) {
    ChannelPrunedLayer::Parts p;
    p.layer = integer(meta, "layer", where);
    const int64_t n_tokens = integer(meta, "n_tokens", where);
    p.head_dim = integer(meta, "head_dim", where);
    check_expected_shape(n_tokens, integer(meta, "n_kv_head", where), p.head_dim, expect, where);
    const int64_t kept = integer(meta, "kept_channels", where);
    p.keys = typed(tensors, prefix + "keys", {expect.dtype}, where);
    p.channels = typed(tensors, prefix + "channels", {at::kByte}, where);
    p.values = typed(tensors, prefix + "values", {expect.dtype}, where);
    if (p.keys.dim() != 3 || p.keys.size(2) != kept)
        throw Error(
            fmt::format("{}: keys have shape {}, expected {} kept channels", where, shape_str(p.keys), kept));
    return make_store<ChannelPrunedLayer>(std::move(p), where);  // checks shapes and the channel lists
}

}  // namespace

PrefixTensors to_tensors(const LayerPrefix& prefix, const std::string& name_prefix) {
    if (const auto* c = dynamic_cast<const CompressedLayer*>(&prefix))
        return compressed_layer_tensors(*c, name_prefix);
    if (const auto* q = dynamic_cast<const QuantizedLayer*>(&prefix))
        return quantized_layer_tensors(*q, name_prefix);
    if (const auto* h = dynamic_cast<const HeadwiseEvictedLayer*>(&prefix))
        return headwise_tensors(*h, name_prefix);
    if (const auto* c = dynamic_cast<const ChannelPrunedLayer*>(&prefix))
        return channel_pruned_tensors(*c, name_prefix);
    throw Error(fmt::format("cannot save a compressed store of type {}: prefix_io knows {}",
                            typeid(prefix).name(), fmt::join(prefix_kinds(), ", ")));
}

std::shared_ptr<const LayerPrefix> prefix_from_tensors(const nlohmann::json& meta,
                                                       const std::string& name_prefix,
                                                       const TensorSource& tensors,
                                                       const PrefixExpectation& expect,
                                                       const std::string& where) {
    if (!meta.is_object()) throw Error(where + ": the store's metadata is not an object");
    const std::string kind = string_field(meta, "kind", where);
    if (kind == kCompressedLayer)
        return compressed_layer_from_tensors(meta, name_prefix, tensors, expect, where);
    if (kind == kQuantizedLayer)
        return quantized_layer_from_tensors(meta, name_prefix, tensors, expect, where);
    if (kind == kHeadwiseEviction) return headwise_from_tensors(meta, name_prefix, tensors, expect, where);
    if (kind == kChannelPruned) return channel_pruned_from_tensors(meta, name_prefix, tensors, expect, where);
    throw Error(fmt::format("{}: unknown store kind '{}' (this build reads {})", where, kind,
                            fmt::join(prefix_kinds(), ", ")));
}

std::vector<std::string> prefix_kinds() {
    return {kCompressedLayer, kQuantizedLayer, kHeadwiseEviction, kChannelPruned};
}

}  // namespace varrate

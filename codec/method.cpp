#include "codec/method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/base/error.h"

namespace varrate {

namespace {

template <typename T>
nlohmann::json vector_json(const at::Tensor& t) {
    if (!t.defined()) return nullptr;
    at::Tensor c = t.to(at::kCPU).contiguous();
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
}

std::string shape_str(const at::Tensor& t) {
    if (!t.defined()) return "undefined";
    return fmt::format("[{}]", fmt::join(t.sizes().vec(), ", "));
}

}  // namespace

nlohmann::json to_json(const LayerDiagnostics& d, bool per_token) {
    nlohmann::json j = {
        {"layer", d.layer},
        {"method", d.method},
        {"n_tokens", d.n_tokens},
        {"dim", d.dim},
        {"budget_B", d.budget_B},
        {"sum_ranks", d.sum_ranks},
        {"n_exact", d.n_exact},
        {"n_coded", d.n_coded},
        {"min_rank", d.min_rank},
        {"max_rank", d.max_rank},
        {"mean_rank", d.mean_rank},
        {"floor_share", d.floor_share},
        {"index_bytes", d.index_bytes},
        {"basis_bytes", d.basis_bytes},
        {"stored_bytes", d.stored_bytes},
        {"full_bytes", d.full_bytes},
        {"footprint", d.footprint},
        {"mean_rel_error", d.mean_rel_error},
        {"timing_ms",
         {{"anchor_search", d.timing.anchor_search},
          {"salience", d.timing.salience},
          {"water_filling", d.timing.water_filling},
          {"projection", d.timing.projection},
          {"reconstruction", d.timing.reconstruction},
          {"total", d.timing.total()}}},
    };
    if (per_token) {
        j["salience"] = vector_json<float>(d.salience);
        j["salience_norm"] = vector_json<float>(d.salience_norm);
        j["rank"] = vector_json<int64_t>(d.rank);
        j["exact"] =
            d.exact.defined() ? vector_json<int64_t>(d.exact.to(at::kLong)) : nlohmann::json(nullptr);
        j["rel_error"] = vector_json<float>(d.rel_error);
    }
    return j;
}

int64_t element_size(at::ScalarType t) {
    switch (t) {
        case at::kFloat:
            return 4;
        case at::kBFloat16:
        case at::kHalf:
            return 2;
        case at::kDouble:
            return 8;
        default:
            throw Error(fmt::format("KV cache dtype {} is not supported by the codec", c10::toString(t)));
    }
}

CaptureShape check_capture(const LayerCapture& c, const std::string& who, bool needs_pre_rope) {
    const std::string where = fmt::format("{}: layer {} capture", who, c.layer);
    if (!c.keys.defined() || c.keys.dim() != 3)
        throw Error(
            fmt::format("{}: keys must be [n_kv_head, L, head_dim], got {}", where, shape_str(c.keys)));
    CaptureShape s{c.keys.size(0), c.keys.size(1), c.keys.size(2)};
    if (!c.values.defined() || c.values.sizes() != c.keys.sizes())
        throw Error(
            fmt::format("{}: values {} do not match keys {}", where, shape_str(c.values), shape_str(c.keys)));
    if (needs_pre_rope) {
        if (!c.keys_pre_rope.defined() || c.keys_pre_rope.sizes() != c.keys.sizes())
            throw Error(fmt::format("{}: keys_pre_rope {} do not match keys {}", where,
                                    shape_str(c.keys_pre_rope), shape_str(c.keys)));
        for (const at::Tensor* t : {&c.rope_cos, &c.rope_sin}) {
            if (!t->defined() || t->dim() != 2 || t->size(0) != s.n_tokens || t->size(1) != s.head_dim)
                throw Error(fmt::format("{}: RoPE tables must be [L={}, head_dim={}], got {}", where,
                                        s.n_tokens, s.head_dim, shape_str(*t)));
        }
    }
    return s;
}

void sync_for_timing(const at::Tensor& t, bool enabled) {
    // Copying one element to the host waits for every kernel queued before it on the stream.
    if (enabled && t.defined() && t.numel() > 0 && !t.is_cpu()) (void)t.reshape({-1})[0].to(at::kCPU);
}

}  // namespace varrate

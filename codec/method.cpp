#include "codec/method.h"

#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/settings_table.h"
#include "models/host_read.h"

namespace varrate {

std::string shape_str(const at::Tensor& t) {
    if (!t.defined()) return "undefined";
    return fmt::format("[{}]", fmt::join(t.sizes().vec(), ", "));
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

LayerResult CompressionMethod::compress(const LayerCapture& capture) {
    const std::shared_ptr<const LayerAnalysis> analysis = analyse(capture);
    LayerAllocation allocation = allocate(*analysis, settings());
    const auto t0 = std::chrono::steady_clock::now();
    LayerResult out;
    out.kv = materialise(capture, *analysis, allocation);
    out.diagnostics = std::move(allocation.diagnostics);
    out.diagnostics.timing.reconstruction =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

std::string structural_difference(const CodecSettings& a, const CodecSettings& b) {
    return setting_difference(a, b, SettingTier::Structural);
}

void sync_for_timing(const at::Tensor& t, bool enabled) {
    // Copying one element to the host waits for every kernel queued before it on the stream.
    if (enabled && t.defined() && t.numel() > 0 && !t.is_cpu()) (void)to_host(t.reshape({-1})[0]);
}

}  // namespace varrate

#include "codec/methods/kivi_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/quantize.h"
#include "codec/quantized_layer.h"

namespace varrate {

namespace {

struct KiviAnalysis : LayerAnalysis {
    std::shared_ptr<const QuantizedLayer> store;
    LayerDiagnostics diagnostics;  // everything but the method's budget fields
};

}  // namespace

KiviMethod::KiviMethod(const CodecSettings& settings, int64_t bits) : settings_(settings), bits_(bits) {
    if (!is_supported_bits(bits))
        throw Error(fmt::format("kivi: {} bits is not a supported width (2, 3, 4 or 8)", bits));
}

std::shared_ptr<const LayerAnalysis> KiviMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t L = shape.n_tokens, G = shape.n_kv_head, hd = shape.head_dim, dim = 2 * G * hd;
    auto a = std::make_shared<KiviAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = L;
    a->store = std::make_shared<const QuantizedLayer>(
        QuantizedLayer::quantize(capture.keys, capture.values, bits_, kResidual, capture.layer));
    const int64_t nq = a->store->parts().n_quant;
    // Per-token error: keys post-RoPE have the norms of pre-RoPE ones (RoPE rotates), so this is the error
    // in the joint space the other methods report.
    const LayerKV r = a->store->reconstruct();
    const at::Tensor err_sq =
        ((r.keys.to(at::kFloat) - capture.keys.to(at::kFloat)).square().sum(at::IntArrayRef{0, 2}) +
         (r.values.to(at::kFloat) - capture.values.to(at::kFloat)).square().sum(at::IntArrayRef{0, 2}));
    const at::Tensor z_sq = capture.keys.to(at::kFloat).square().sum(at::IntArrayRef{0, 2}) +
                            capture.values.to(at::kFloat).square().sum(at::IntArrayRef{0, 2});
    const at::Tensor rel = (err_sq.sqrt() / z_sq.sqrt().clamp_min(1e-30)).to(at::kCPU);  // [L]

    LayerDiagnostics& d = a->diagnostics;
    d.method = name();
    d.layer = capture.layer;
    d.n_tokens = L;
    d.dim = dim;
    d.n_exact = L - nq;
    d.n_coded = nq;
    d.min_rank = d.max_rank = dim;
    d.mean_rank = static_cast<double>(dim);
    d.coef_bits = bits_;
    d.stored_bytes = a->store->resident_bytes();
    d.full_bytes = L * dim * element_size(capture.keys.scalar_type());
    d.footprint = static_cast<double>(d.stored_bytes) / static_cast<double>(d.full_bytes);
    d.rel_error = rel.to(at::kFloat);
    d.mean_rel_error = d.mean_quant_error = rel.to(at::kDouble).mean().item<double>();
    d.rank = at::full({L}, dim, at::TensorOptions().dtype(at::kLong));
    d.exact = at::arange(L, at::TensorOptions().dtype(at::kLong)) >= nq;
    a->timing.projection = lap_ms(t);
    return a;
}

LayerAllocation KiviMethod::allocate(const LayerAnalysis& analysis, const CodecSettings&) {
    const auto& a = dynamic_cast<const KiviAnalysis&>(analysis);
    LayerAllocation out;
    out.diagnostics = a.diagnostics;
    out.diagnostics.timing = a.timing;
    out.coef_bits = bits_;
    return out;
}

LayerKV KiviMethod::materialise(const LayerCapture&, const LayerAnalysis& analysis, const LayerAllocation&) {
    return dynamic_cast<const KiviAnalysis&>(analysis).store->reconstruct();
}

std::shared_ptr<const LayerPrefix> KiviMethod::store(const LayerCapture&, const LayerAnalysis& analysis,
                                                     const LayerAllocation&) {
    return dynamic_cast<const KiviAnalysis&>(analysis).store;
}

}  // namespace varrate

#include "codec/methods/full_method.h"

#include <ATen/ATen.h>

namespace varrate {

namespace {

struct FullAnalysis : LayerAnalysis {
    int64_t dim = 0, element_size = 0;
};

}  // namespace

std::shared_ptr<const LayerAnalysis> FullMethod::analyse(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    auto a = std::make_shared<FullAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->dim = 2 * shape.n_kv_head * shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    return a;
}

LayerAllocation FullMethod::allocate(const LayerAnalysis& analysis, const CodecSettings&) {
    const auto& a = dynamic_cast<const FullAnalysis&>(analysis);
    const int64_t n_tok = a.n_tokens, dim = a.dim;
    LayerAllocation out;
    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.layer = a.layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.budget_B = n_tok * dim;
    d.sum_ranks = n_tok * dim;
    d.n_exact = n_tok;
    d.min_rank = d.max_rank = dim;
    d.mean_rank = static_cast<double>(dim);
    d.full_bytes = d.stored_bytes = n_tok * dim * a.element_size;
    d.footprint = 1.0;
    d.rank = at::full({n_tok}, dim, at::TensorOptions().dtype(at::kLong));
    d.exact = at::ones({n_tok}, at::TensorOptions().dtype(at::kBool));
    d.rel_error = at::zeros({n_tok}, at::TensorOptions().dtype(at::kFloat));
    return out;
}

LayerKV FullMethod::materialise(const LayerCapture& capture, const LayerAnalysis&, const LayerAllocation&) {
    return LayerKV{capture.keys, capture.values};
}

}  // namespace varrate

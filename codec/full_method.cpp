#include "codec/full_method.h"

#include <ATen/ATen.h>

namespace varrate {

LayerResult FullMethod::compress(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t n_tok = shape.n_tokens, dim = 2 * shape.n_kv_head * shape.head_dim;
    LayerResult out;
    out.kv.keys = capture.keys;
    out.kv.values = capture.values;
    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.layer = capture.layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.budget_B = n_tok * dim;
    d.sum_ranks = n_tok * dim;
    d.n_exact = n_tok;
    d.min_rank = d.max_rank = dim;
    d.mean_rank = static_cast<double>(dim);
    d.full_bytes = d.stored_bytes = n_tok * dim * element_size(capture.keys.scalar_type());
    d.footprint = 1.0;
    d.rank = at::full({n_tok}, dim, at::TensorOptions().dtype(at::kLong));
    d.exact = at::ones({n_tok}, at::TensorOptions().dtype(at::kBool));
    d.rel_error = at::zeros({n_tok}, at::TensorOptions().dtype(at::kFloat));
    return out;
}

}  // namespace varrate

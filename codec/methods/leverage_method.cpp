#include "codec/methods/leverage_method.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

namespace {

// Lower Cholesky factor of g [G, k, k] + jitter I, the jitter raised as kvpress's chol_with_jitter does
// (1e-2, then x10) until every head factors; throws after five tries.
at::Tensor cholesky_with_jitter(const at::Tensor& g) {
    const at::Tensor eye = at::eye(g.size(-1), g.options());
    double jitter = 1e-2;
    for (int attempt = 0; attempt < 5; ++attempt) {
        const auto [factor, info] = at::linalg_cholesky_ex(g + jitter * eye, /*upper=*/false);
        if (info.eq(0).all().item<bool>()) return factor;  // one host read per try, per layer
        jitter = std::max(1e-8, 10.0 * jitter);
    }
    throw Error("leverage: the sketched Gram matrix did not factor after five jitters");
}

}  // namespace

at::Tensor LeverageMethod::scores(const LayerCapture& capture) const {
    const at::Tensor& k = capture.keys_pre_rope;  // [G, L, hd]
    if (!k.defined() || k.sizes() != capture.keys.sizes())
        throw Error(fmt::format("leverage: layer {} needs the pre-RoPE keys, the capture has {}",
                                capture.layer, shape_str(k)));
    return leverage_scores(k);
}

at::Tensor leverage_scores(const at::Tensor& k) {
    const int64_t G = k.size(0), hd = k.size(2);
    // torch.randn(1, G, hd, kSketch) after manual_seed(kSeed), in the keys' dtype: the same stream as torch.
    at::Generator gen = at::detail::createCPUGenerator(LeverageMethod::kSeed);
    const at::Tensor phi =
        (at::randn({1, G, hd, LeverageMethod::kSketch}, gen, at::TensorOptions().dtype(k.scalar_type())) *
         (1.0 / std::sqrt(static_cast<double>(LeverageMethod::kSketch))))
            .squeeze(0)
            .to(k.device());                                                               // [G, hd, k]
    const at::Tensor x = at::matmul(k - k.mean(1, /*keepdim=*/true), phi).to(at::kFloat);  // [G, L, k]
    const at::Tensor xt = x.transpose(1, 2);                                               // [G, k, L]
    const at::Tensor gram = at::matmul(xt, x);
    const at::Tensor factor = cholesky_with_jitter(0.5 * (gram + gram.transpose(1, 2)));
    const at::Tensor solved = at::cholesky_solve(xt, factor, /*upper=*/false);  // (X^T X)^-1 X^T [G, k, L]
    return (x * solved.transpose(1, 2)).sum(-1).clamp_min(0);                   // [G, L]
}

}  // namespace varrate

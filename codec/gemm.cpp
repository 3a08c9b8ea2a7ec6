#include "codec/gemm.h"

#include <cstdint>

#include <dlfcn.h>

#include <ATen/ATen.h>

namespace varrate {

namespace {

// oneDNN's public C API (dnnl.h), row-major; declared here because Debian ships libdnnl.so.2 without its
// headers unless libdnnl-dev is installed, and found at run time so that a LibTorch without it still works.
using SgemmFn = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                        int64_t ldc);

SgemmFn onednn_sgemm() {
    static const SgemmFn fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
    return fn;
}

// 'N' with its leading dimension for a row-major matrix, 'T' for a transposed one; 0 when neither.
char layout_of(const at::Tensor& t, int64_t& ld) {
    if (t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, t.size(1))) {
        ld = t.stride(0);
        return 'N';
    }
    if (t.stride(0) == 1 && t.stride(1) >= std::max<int64_t>(1, t.size(0))) {
        ld = t.stride(1);
        return 'T';
    }
    return 0;
}

}  // namespace

bool onednn_sgemm_available() {
    return onednn_sgemm() != nullptr;
}

at::Tensor& gemm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double beta, double alpha,
                     bool onednn) {
    int64_t lda = 0, ldb = 0;
    const char ta = onednn ? layout_of(a, lda) : 0, tb = onednn ? layout_of(b, ldb) : 0;
    const bool direct = onednn && ta && tb && onednn_sgemm() && a.device().is_cpu() &&
                        a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
                        out.scalar_type() == at::kFloat && out.is_contiguous() && a.size(1) > 0;
    if (!direct) return at::addmm_out(out, out, a, b, beta, alpha);
    const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    const int status = onednn_sgemm()(ta, tb, m, n, k, static_cast<float>(alpha), a.data_ptr<float>(), lda,
                                      b.data_ptr<float>(), ldb, static_cast<float>(beta),
                                      out.data_ptr<float>(), std::max<int64_t>(1, n));
    if (status != 0) return at::addmm_out(out, out, a, b, beta, alpha);  // dnnl_success is 0
    return out;
}

}  // namespace varrate

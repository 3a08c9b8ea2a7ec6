#pragma once
// fp32 GEMMs of a bf16 runtime on oneDNN, as the model's bf16 GEMMs are. LibTorch sends fp32 CPU GEMMs to
// its BLAS (OpenBLAS on Debian, whose kernel the environment may pin to AVX2), while its oneDNN has AVX-512
// fp32 kernels that run the codec's GEMM shapes about twice as fast. Results are fp32-accurate but not bit
// for bit OpenBLAS's (another summation order), so fp32 runtimes keep at::mm and their reference results.
#include <ATen/core/Tensor.h>

namespace varrate {

// Whether LibTorch's oneDNN exports its sgemm (Debian's libtorch links libdnnl.so.2); looked up once.
bool onednn_sgemm_available();

// out = beta * out + alpha * a b for fp32 a [m, k], b [k, n] and a contiguous fp32 out [m, n]: oneDNN's
// sgemm when `onednn` is set, the tensors are on the CPU with unit stride in one dimension and it is
// available, else at::addmm_out. Returns out.
at::Tensor& gemm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double beta, double alpha,
                     bool onednn);

}  // namespace varrate

#pragma once
// Device, dtype and thread selection shared by the CLI, the session and the tests.
#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace varrate {

struct RuntimeOptions {
    c10::Device device = c10::Device(c10::kCPU);
    c10::ScalarType dtype = c10::kFloat;  // fp32, bf16, or fp16 (CUDA only)
    int threads = 0;                      // 0 = all cores
    std::string dtype_reason;             // what chose the dtype (choose_dtype), for logs and status bars
};

// "cpu", "cuda", "cuda:1". Throws Error when CUDA is asked for but not available.
c10::Device parse_device(const std::string& name);
// The dtype policy, the one place it is decided: "auto" (the default of every command and of the app) is bf16
// on CUDA and on a CPU with bf16 matmul (what GPU users and such CPUs run), fp32 on other CPUs (where bf16
// matmuls are emulated, slower than fp32). Explicit names: "fp32"/"float32", "bf16"/"bfloat16",
// "fp16"/"float16" (CUDA only: no CPU fp16 matmul). `reason` says what was chosen and why, for the log line
// every command and the app's status bar show.
struct DtypeChoice {
    c10::ScalarType dtype = c10::kFloat;
    std::string reason;  // e.g. "fp32 (auto: this CPU has no bf16 matmul, bf16 would be emulated)"
};
DtypeChoice choose_dtype(const std::string& name, const c10::Device& device);
c10::ScalarType parse_dtype(const std::string& name, const c10::Device& device);  // choose_dtype().dtype
// The device and dtype of one command or app run, by the policy above (logged at info level); threads are
// left to configure_threads.
RuntimeOptions resolve_runtime(const std::string& device, const std::string& dtype);
// Whether the CPU multiplies bf16 natively (AVX-512 BF16 or AMX-BF16 among /proc/cpuinfo's flags). Where it
// does, bf16 halves the memory traffic of weights and cache, and the demo model answers as in fp32
// (docs/PREFILL.md); elsewhere LibTorch emulates bf16 matmuls, slower than fp32. VARRATE_CPU_BF16=0 or 1
// overrides the detection (the tests pin it).
bool cpu_has_bf16_matmul();
std::string dtype_name(c10::ScalarType t);  // "fp32", "bf16", "fp16"
// Sets LibTorch's intra-op threads (0 = hardware concurrency) and returns the number used.
int configure_threads(int threads);
bool cuda_available();
// Bytes that can still be allocated on `device`: MemAvailable of /proc/meminfo on the CPU (or less, what the
// process's cgroup v2 memory.max still allows: Slurm's --mem), the free memory the driver reports on CUDA;
// at most VARRATE_MEMORY_LIMIT ("8G", "512MiB", bytes) when set; -1 when unknown. Throws Error naming
// VARRATE_MEMORY_LIMIT when it is not a size.
int64_t available_memory_bytes(const c10::Device& device);

}  // namespace varrate

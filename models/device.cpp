#include "models/device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(VARRATE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <spdlog/spdlog.h>

#include "base/error.h"

namespace varrate {

namespace {

std::string normalized(const std::string& s) {
    std::string out;
    for (char c : s)
        if (!std::isspace(static_cast<unsigned char>(c)))
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// The first number in a file such as /sys/fs/cgroup/memory.max ("max" or absent: -1).
int64_t read_cgroup_number(const std::string& path) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word) || word.empty() || !std::isdigit(static_cast<unsigned char>(word[0]))) return -1;
    try {
        return static_cast<int64_t>(std::stoll(word));
    } catch (const std::exception&) {
        return -1;
    }
}

// What this process's cgroup (v2: Slurm's --mem, a container's limit) still allows; -1 when unlimited.
int64_t cgroup_headroom() {
    std::ifstream self("/proc/self/cgroup");
    std::string line, rel;
    while (std::getline(self, line))
        if (line.rfind("0::", 0) == 0) rel = line.substr(3);
    if (rel.empty()) return -1;
    const std::string dir = "/sys/fs/cgroup" + (rel == "/" ? std::string() : rel);
    const int64_t max = read_cgroup_number(dir + "/memory.max");
    if (max < 0) return -1;
    const int64_t current = std::max<int64_t>(0, read_cgroup_number(dir + "/memory.current"));
    return std::max<int64_t>(0, max - current);
}

// VARRATE_MEMORY_LIMIT ("8G", "512MiB", "1000000"): what the user lets one process plan to use; -1 unset.
int64_t user_memory_limit() {
    const char* env = std::getenv("VARRATE_MEMORY_LIMIT");
    if (!env || !*env) return -1;
    const std::string text = normalized(env);
    size_t end = 0;
    double value = -1;
    try {
        value = std::stod(text, &end);
    } catch (const std::exception&) {
        end = 0;
    }
    std::string unit = text.substr(end);
    if (!unit.empty() && unit.back() == 'b') unit.pop_back();  // "GB", "GiB" -> "g", "gi"
    if (!unit.empty() && unit.back() == 'i') unit.pop_back();
    const double scale = unit.empty()  ? 1.0
                         : unit == "k" ? 1024.0
                         : unit == "m" ? 1024.0 * 1024
                         : unit == "g" ? 1024.0 * 1024 * 1024
                         : unit == "t" ? 1024.0 * 1024 * 1024 * 1024
                                       : -1.0;
    if (end == 0 || scale < 0 || !(value >= 0) || value * scale > 9.0e18)
        throw Error(std::string("VARRATE_MEMORY_LIMIT: '") + env +
                    "' is not a size (bytes, or a number with K, M, G or T)");
    return static_cast<int64_t>(value * scale);
}

int64_t min_known(int64_t a, int64_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return std::min(a, b);
}

}  // namespace

bool cuda_available() {
    return at::hasCUDA() && at::getNumGPUs() > 0;
}

int64_t available_memory_bytes(const c10::Device& device) {
    const int64_t user = user_memory_limit();
    if (device.is_cuda()) {
#if defined(VARRATE_WITH_CUDA)
        int previous = 0;
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaGetDevice(&previous) != cudaSuccess) return user;
        const bool ok = cudaSetDevice(device.has_index() ? device.index() : 0) == cudaSuccess &&
                        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
        cudaSetDevice(previous);
        return min_known(ok ? static_cast<int64_t>(free_bytes) : -1, user);
#else
        return user;
#endif
    }
    int64_t host = -1;
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemAvailable:", 0) != 0) continue;
        std::istringstream fields(line.substr(13));
        int64_t kib = -1;
        fields >> kib;
        host = kib >= 0 ? kib * 1024 : -1;
        break;
    }
    return min_known(min_known(host, cgroup_headroom()), user);
}

c10::Device parse_device(const std::string& name) {
    const std::string n = normalized(name);
    if (n == "cpu") return c10::Device(c10::kCPU);
    int index = 0;
    if (n == "cuda") {
        index = 0;
    } else if (n.rfind("cuda:", 0) == 0 && n.size() > 5 && n.size() <= 8 &&
               std::all_of(n.begin() + 5, n.end(),
                           [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        index = std::stoi(n.substr(5));
    } else {
        throw Error("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
    }
    if (!at::hasCUDA())
        throw Error("device '" + name +
                    "' requested but CUDA is not available (LibTorch without CUDA or no GPU visible)");
    const auto gpus = static_cast<int>(at::getNumGPUs());
    if (index >= gpus) {
        throw Error("device '" + name + "' requested but only " + std::to_string(gpus) +
                    " CUDA device(s) are visible");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

DtypeChoice choose_dtype(const std::string& name, const c10::Device& device) {
    const std::string n = normalized(name);
    if (n == "fp32" || n == "float32" || n == "float") return {c10::kFloat, "fp32 (--dtype " + name + ")"};
    if (n == "bf16" || n == "bfloat16") {
        const bool emulated = device.is_cpu() && !cpu_has_bf16_matmul();
        return {c10::kBFloat16,
                std::string("bf16 (--dtype ") + name + ")" +
                    (emulated ? "; this CPU has no bf16 matmul: emulated, slower than fp32" : "")};
    }
    if (n == "auto") {
        const bool forced = std::getenv("VARRATE_CPU_BF16") && *std::getenv("VARRATE_CPU_BF16");
        if (!device.is_cpu()) return {c10::kBFloat16, "bf16 (auto: " + device.str() + ")"};
        if (cpu_has_bf16_matmul())
            return {c10::kBFloat16,
                    forced ? "bf16 (auto: VARRATE_CPU_BF16=1)"
                           : "bf16 (auto: this CPU multiplies bf16 natively, AVX-512 BF16 or AMX)"};
        return {c10::kFloat, forced ? "fp32 (auto: VARRATE_CPU_BF16=0)"
                                    : "fp32 (auto: this CPU has no bf16 matmul, bf16 would be emulated)"};
    }
    if (n == "fp16" || n == "float16" || n == "half") {
        if (device.is_cpu())
            throw Error("dtype '" + name +
                        "' is not supported on CPU (LibTorch has no CPU fp16 matmul); use bf16 or fp32");
        return {c10::kHalf, "fp16 (--dtype " + name + ")"};
    }
    throw Error("unknown dtype '" + name + "' (expected auto, fp32, bf16 or fp16)");
}

c10::ScalarType parse_dtype(const std::string& name, const c10::Device& device) {
    return choose_dtype(name, device).dtype;
}

RuntimeOptions resolve_runtime(const std::string& device, const std::string& dtype) {
    RuntimeOptions o;
    o.device = parse_device(device);
    const DtypeChoice d = choose_dtype(dtype, o.device);
    o.dtype = d.dtype;
    o.dtype_reason = d.reason;
    spdlog::info("{}: {}", o.device.str(), d.reason);
    return o;
}

bool cpu_has_bf16_matmul() {
    if (const char* forced = std::getenv("VARRATE_CPU_BF16"); forced && *forced)
        return std::string(forced) != "0";
    static const bool has = [] {
        std::ifstream cpuinfo("/proc/cpuinfo");
        std::string line;
        while (std::getline(cpuinfo, line)) {
            if (line.rfind("flags", 0) != 0) continue;
            std::istringstream flags(line.substr(line.find(':') + 1));
            std::string flag;
            while (flags >> flag)
                if (flag == "avx512_bf16" || flag == "amx_bf16") return true;
            return false;  // the first CPU's flags stand for all
        }
        return false;
    }();
    return has;
}

std::string dtype_name(c10::ScalarType t) {
    switch (t) {
        case c10::kFloat:
            return "fp32";
        case c10::kBFloat16:
            return "bf16";
        case c10::kHalf:
            return "fp16";
        default:
            return c10::toString(t);
    }
}

int configure_threads(int threads) {
    if (threads < 0)
        throw Error("thread count must be 0 (all cores) or positive, got " + std::to_string(threads));
    int n = threads;
    if (n == 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(n);
    return at::get_num_threads();
}

}  // namespace varrate

#include "models/host_read.h"

#include <atomic>

namespace varrate {

namespace {
std::atomic<int64_t> g_host_reads{0};
}  // namespace

at::Tensor to_host(const at::Tensor& t) {
    g_host_reads.fetch_add(1, std::memory_order_relaxed);
    return t.to(at::kCPU);
}

int64_t host_reads() {
    return g_host_reads.load(std::memory_order_relaxed);
}

}  // namespace varrate

#include "models/op_profile.h"

#include <ATen/ATen.h>

namespace varrate {

void OpProfile::add(const char* op, double ms) {
    for (Entry& e : entries_)
        if (e.op == op) {
            e.ms += ms;
            ++e.calls;
            return;
        }
    entries_.push_back({op, ms, 1});
}

double OpProfile::total_ms() const {
    double total = 0;
    for (const Entry& e : entries_) total += e.ms;
    return total;
}

void OpTimer::stop() {
    if (!profile_) return;
    synchronize_device(device_);
    profile_->add(
        op_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin_).count());
    profile_ = nullptr;
}

void synchronize_device(const c10::Device& device) {
    // A one-element device->host copy waits for the queued work without CUDA headers.
    if (!device.is_cpu()) at::zeros({1}, at::TensorOptions().device(device)).cpu();
}

}  // namespace varrate

#pragma once
// Per-op wall time of forward passes (`varrate bench prefill --profile`). The runtime times its sections
// when ForwardOptions::profile is set, waiting for the device at each section's end so that a section's time
// is its own ops' time; without a profile nothing is timed and nothing waits.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace varrate {

class OpProfile {
  public:
    struct Entry {
        std::string op;
        double ms = 0;
        int64_t calls = 0;
    };
    void add(const char* op, double ms);
    // In the order the ops first ran.
    const std::vector<Entry>& entries() const { return entries_; }
    double total_ms() const;
    void clear() { entries_.clear(); }

  private:
    std::vector<Entry> entries_;
};

// Times one section into `profile` (a no-op when it is null).
class OpTimer {
  public:
    OpTimer(OpProfile* profile, const char* op, const c10::Device& device)
        : profile_(profile), op_(op), device_(device) {
        if (profile_) begin_ = std::chrono::steady_clock::now();
    }
    ~OpTimer() { stop(); }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;
    // Ends the section early (once).
    void stop();

  private:
    OpProfile* profile_;
    const char* op_;
    c10::Device device_;
    std::chrono::steady_clock::time_point begin_;
};

// Waits for the work queued on `device` (nothing to wait for on the CPU).
void synchronize_device(const c10::Device& device);

}  // namespace varrate

#pragma once
// What every long job takes from its caller: a progress callback and a cancel flag. Jobs call
// check_cancel() between steps (layers, chunks, documents) and unwind with Cancelled, which the one boundary
// of each program (CLI main, the app's worker thread, the trainer) catches.
#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace varrate {

// (stage, done, total): "prefill", "decode", "calibrate", ... Called between steps, on the job's thread.
using ProgressFn = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// Thrown when a cancel flag was raised; not an error to report, but it unwinds the same way.
class Cancelled : public std::runtime_error {
  public:
    Cancelled() : std::runtime_error("cancelled") {}
};

struct JobControl {
    ProgressFn progress;                        // optional
    const std::atomic<bool>* cancel = nullptr;  // raised by the caller; jobs throw Cancelled promptly

    void report(const std::string& stage, int64_t done, int64_t total) const {
        if (progress) progress(stage, done, total);
    }
};

// Throws Cancelled when the flag is raised.
inline void check_cancel(const std::atomic<bool>* cancel) {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
}
inline void check_cancel(const JobControl& job) {
    check_cancel(job.cancel);
}

}  // namespace varrate

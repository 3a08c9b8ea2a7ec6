#pragma once
// Wall-clock milliseconds for stage timings (one steady clock for the whole project).
#include <chrono>

namespace varrate {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds since t0.
inline double ms_since(SteadyClock::time_point t0) {
    return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

// Milliseconds since t, and t moved to now: consecutive stages timed with one variable.
inline double lap_ms(SteadyClock::time_point& t) {
    const auto now = SteadyClock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
    return ms;
}

}  // namespace varrate

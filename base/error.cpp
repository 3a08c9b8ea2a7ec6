#include "base/error.h"

#include <new>

namespace varrate {

namespace {

std::string first_line(std::string s) {
    if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s.empty() ? "unknown error" : s;
}

}  // namespace

std::string describe_exception(const std::exception& e) {
    if (dynamic_cast<const std::bad_alloc*>(&e))
        return "out of memory (try a shorter document, a smaller model or bf16)";
    std::string msg = first_line(e.what());
    // LibTorch's allocator failures (CPU and CUDA) arrive as c10::Error; say what to do about them.
    if (msg.find("out of memory") != std::string::npos ||
        msg.find("DefaultCPUAllocator") != std::string::npos)
        msg = "out of memory: " + msg + " (try a shorter document, bf16, or the CPU)";
    return msg;
}

std::string describe_current_exception() {
    try {
        throw;
    } catch (const std::exception& e) {
        return describe_exception(e);
    } catch (...) {
        return "unknown error";
    }
}

}  // namespace varrate

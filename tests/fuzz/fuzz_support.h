#pragma once
// Shared by the fuzz targets (one file per parser of outside data, each defining LLVMFuzzerTestOneInput). A
// target feeds the bytes to the project's own entry point; varrate::Error is how a parser rejects bad input,
// so it is caught and the input counts as handled. Anything else (a crash, a sanitizer report, another
// exception type escaping) is a finding: libFuzzer reports an escaping exception as a deadly signal, and the
// replay driver (replay_main.cpp) fails the ctest on it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace varrate::fuzz {

inline std::string text(const uint8_t* data, size_t size) {
    return std::string(reinterpret_cast<const char*>(data), size);
}

// The bytes as JSON, or nullopt when they are not JSON: the project's readers parse with
// nlohmann::json::parse and turn its parse_error into an Error (base/file_io.cpp), so a target that
// hands parsed JSON to an entry point starts the same way.
inline std::optional<nlohmann::json> parse_json(const uint8_t* data, size_t size) {
    nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

// A directory of this process (created once, removed at exit) for the parsers that read paths.
const std::filesystem::path& scratch_dir();
// Writes the bytes to scratch_dir()/name (replacing it) and returns the path.
std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size);
std::filesystem::path write_input(const std::string& name, const std::string& bytes);

// The source tree (resources/ holds the fixed inputs some targets parse the fuzzed bytes against).
std::filesystem::path source_dir();

// Runs f, treating varrate::Error as the parser's rejection of the input. Returns 0, as libFuzzer expects.
// VARRATE_FUZZ_VERBOSE=1 prints each rejection (to see whether seeds get past the first checks).
template <typename F>
int run(F&& f) {
    static const bool verbose = std::getenv("VARRATE_FUZZ_VERBOSE") != nullptr;
    try {
        f();
    } catch (const varrate::Error& e) {
        if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
    }
    return 0;
}

}  // namespace varrate::fuzz

#pragma once
// Whole-file reads with clear errors, and atomic writes (write a temporary beside the target, then rename),
// so that nothing is ever left half-written.
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

std::string read_text_file(const std::filesystem::path& path);
nlohmann::json read_json_file(const std::filesystem::path& path);
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

}  // namespace varrate

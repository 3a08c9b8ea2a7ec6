#include "tests/test_support.h"

#include <cstdlib>
#include <fstream>
#include <random>

namespace varrate::test {

std::filesystem::path shared_dir() {
    if (const char* env = std::getenv("VARRATE_SHARED"); env && *env) return env;
    return VARRATE_SHARED_DIR;
}

std::filesystem::path fixture(const std::string& rel) {
    auto p = shared_dir() / "fixtures" / rel;
    return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::filesystem::path source_dir() {
    return VARRATE_SOURCE_DIR;
}
std::filesystem::path bin_dir() {
    return VARRATE_BIN_DIR;
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> rows;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    }
    return rows;
}

std::filesystem::path temp_dir(const std::string& tag) {
    std::random_device rd;
    auto p = std::filesystem::temp_directory_path() / ("varrate-" + tag + "-" + std::to_string(rd()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p;
}

}  // namespace varrate::test

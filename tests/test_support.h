#pragma once
// Helpers shared by the Qt Test suites: where the reference fixtures are, and a skip when they are absent.
#include <QtTest/QtTest>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace varrate::test {

// VARRATE_SHARED_DIR (CMake cache variable, default ../shared), overridable by the VARRATE_SHARED env var.
std::filesystem::path shared_dir();
// shared_dir()/fixtures/<rel>, or "" when absent.
std::filesystem::path fixture(const std::string& rel);
std::filesystem::path source_dir();
std::filesystem::path bin_dir();
// Reads a .jsonl file into one json per line.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);
// A fresh empty directory under the system temp dir.
std::filesystem::path temp_dir(const std::string& tag);

}  // namespace varrate::test

// Skips the current test function with a clear message when a fixture is missing.
#define VARRATE_REQUIRE_FIXTURE(var, rel)                                                          \
    const std::filesystem::path var = varrate::test::fixture(rel);                                 \
    if (var.empty())                                                                               \
    QSKIP(qPrintable(QString("reference fixture '%1' not found under %2 (set VARRATE_SHARED_DIR)") \
                         .arg(QString::fromStdString(rel))                                         \
                         .arg(QString::fromStdString(varrate::test::shared_dir().string()))))

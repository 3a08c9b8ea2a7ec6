#include "core/base/file_io.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <system_error>

#include "core/base/error.h"

namespace varrate {

std::string read_text_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw Error(path.string() + ": file not found");
    if (std::filesystem::is_directory(path, ec))
        throw Error(path.string() + ": is a directory, expected a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path.string() + ": cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(path.string() + ": read error");
    return ss.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_text_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(path.string() + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {  // out_of_range: a number beyond double (1e999)
        throw Error(path.string() + ": invalid JSON: " + e.what());
    }
}

void write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
    std::error_code ec;
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(dir, ec)) throw Error(path.string() + ": directory does not exist");
    std::random_device rd;
    const auto tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(rd() % 1000000));
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw Error(path.string() + ": cannot open for writing");
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.flush();
        if (!out) {
            out.close();
            std::filesystem::remove(tmp, ec);
            throw Error(path.string() + ": write failed (disk full?)");
        }
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        throw Error(path.string() + ": cannot replace file: " + ec.message());
    }
}

}  // namespace varrate

#include "base/file_io.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <unistd.h>

#include "base/error.h"

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

namespace {

// Offset of the first byte that is not part of well-formed UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF), or npos.
size_t invalid_utf8_at(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        int len = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07;
        } else {
            return i;
        }
        if (i + static_cast<size_t>(len) > s.size()) return i;
        for (int k = 1; k < len; ++k) {
            const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
            if ((b & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (b & 0x3F);
        }
        const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += static_cast<size_t>(len);
    }
    return std::string::npos;
}

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "host";
    std::string h(buf);
    for (char& c : h)  // the name is one field of the temporary's name
        if (c == '-' || c == '/' || c == '.') c = '_';
    return h.empty() ? "host" : h;
}

constexpr const char* kTempMark = ".tmp-";

}  // namespace

std::string read_document_file(const std::filesystem::path& path) {
    std::string text = read_text_file(path);
    if (text.empty()) throw Error(path.string() + ": the document is empty (0 bytes)");
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
        throw Error(path.string() + ": not a text document (a NUL byte at offset " + std::to_string(nul) +
                    "; binary files cannot be tokenized)");
    if (const size_t bad = invalid_utf8_at(text); bad != std::string::npos)
        throw Error(path.string() + ": not UTF-8 text (invalid byte 0x" +
                    fmt::format("{:02X}", static_cast<unsigned char>(text[bad])) + " at offset " +
                    std::to_string(bad) + "); convert it to UTF-8 first");
    if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
        throw Error(path.string() + ": the document is empty (only white space)");
    return text;
}

std::filesystem::path atomic_temporary_for(const std::filesystem::path& path) {
    static std::atomic<int> counter{0};
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    return dir / fmt::format(".{}{}{}-{}-{}", path.filename().string(), kTempMark, host_name(),
                             static_cast<long>(getpid()), counter++);
}

void write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
    std::error_code ec;
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(dir, ec)) throw Error(path.string() + ": directory does not exist");
    const auto tmp = atomic_temporary_for(path);
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

bool is_atomic_temporary(const std::filesystem::path& path) {
    const std::string name = path.filename().string();
    return name.size() > 1 && name[0] == '.' && name.find(kTempMark) != std::string::npos;
}

int remove_stale_temporaries(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return 0;
    const std::string host = host_name();
    const auto now = std::filesystem::file_time_type::clock::now();
    int removed = 0;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code entry_ec;
        if (!it->is_regular_file(entry_ec) || !is_atomic_temporary(it->path())) continue;
        // ".<name>.tmp-<host>-<pid>-<n>": the writer's host and process.
        const std::string name = it->path().filename().string();
        const std::string tail =
            name.substr(name.rfind(kTempMark) + std::char_traits<char>::length(kTempMark));
        const size_t dash2 = tail.rfind('-'),
                     dash1 = dash2 == std::string::npos ? dash2 : tail.rfind('-', dash2 - 1);
        bool stale = false;
        if (dash1 != std::string::npos && tail.substr(0, dash1) == host) {
            const long pid = std::strtol(tail.c_str() + dash1 + 1, nullptr, 10);
            stale = pid <= 0 || (pid != static_cast<long>(getpid()) &&
                                 kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
        }
        const auto written = std::filesystem::last_write_time(it->path(), entry_ec);
        if (!entry_ec && now - written > std::chrono::hours(1)) stale = true;
        if (stale && std::filesystem::remove(it->path(), entry_ec)) ++removed;
    }
    return removed;
}

}  // namespace varrate

#include "core/suites/sweep_files.h"

#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/settings_table.h"
#include "core/session.h"

namespace varrate {

namespace {

nlohmann::json parse_sweep_file(const std::filesystem::path& path, const char* hint) {
    try {
        return nlohmann::json::parse(read_text_file(path));
    } catch (const nlohmann::json::exception& e) {
        throw Error(path.string() + ": not valid JSON (" + e.what() + ")" + hint);
    }
}

}  // namespace

void SweepProgress::estimate(double elapsed_seconds) {
    elapsed_s = elapsed_seconds;
    const int64_t left = total - done;
    eta_s = computed > 0 ? elapsed_s / static_cast<double>(computed) * static_cast<double>(left)
                         : (left == 0 ? 0 : -1);
}

void write_sweep_file(const std::filesystem::path& out_dir, const nlohmann::json& grid,
                      const nlohmann::json& identity) {
    const nlohmann::json file = {{"grid", grid}, {"identity", identity}};
    const std::filesystem::path path = out_dir / kSweepFile;
    if (std::filesystem::exists(path)) {
        const nlohmann::json old = parse_sweep_file(path, "; remove it or use another --out");
        const nlohmann::json theirs =
            old.is_object() ? old.value("identity", nlohmann::json()) : nlohmann::json();
        for (const auto& [key, value] : identity.items())
            if (!theirs.is_object() || !theirs.contains(key) || theirs[key] != value)
                throw Error(fmt::format(
                    "{}: written by a different sweep ({} was {}, now {}); use another --out or remove the "
                    "old sweep",
                    path.string(), key,
                    theirs.is_object() && theirs.contains(key) ? theirs[key].dump() : "absent",
                    value.dump()));
        if (old == file) return;
    }
    write_file_atomic(path, file.dump(2) + "\n");
}

nlohmann::json read_sweep_file(const std::filesystem::path& out_dir) {
    const std::filesystem::path path = out_dir / kSweepFile;
    if (!std::filesystem::exists(path))
        throw Error(path.string() + ": no sweep file here (is this the --out folder of a sweep?)");
    const nlohmann::json j = parse_sweep_file(path, "");
    if (!j.is_object() || !j.contains("grid") || !j["grid"].is_object() || !j["grid"].contains("kind") ||
        !j["grid"]["kind"].is_string())
        throw Error(path.string() + ": not a sweep file (no \"grid\" object with a \"kind\")");
    return j;
}

nlohmann::json identity_settings(nlohmann::json settings) {
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (spec.tier < SettingTier::Allocation) settings.erase(spec.key);
    return settings;
}

std::string utc_timestamp() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string model_name(const Session& s) {
    std::filesystem::path dir = s.model_dir();
    if (dir.filename().empty()) dir = dir.parent_path();
    return dir.filename().string();
}

}  // namespace varrate

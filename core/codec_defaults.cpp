#include "core/codec_defaults.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace varrate {

std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base) {
    const std::filesystem::path path = model_dir / kCodecDefaultsFile;
    if (!std::filesystem::exists(path)) return std::nullopt;
    const nlohmann::json j = read_json_file(path);
    if (!j.is_object()) throw Error(path.string() + ": expected a JSON object of codec settings");
    CodecSettings s = base;
    auto integer = [&](const std::string& key, int64_t& field, int64_t min) {
        const auto& v = j.at(key);
        if (!v.is_number_integer() || v.get<int64_t>() < min)
            throw Error(fmt::format("{}: \"{}\" must be an integer >= {}, got {}", path.string(), key, min,
                                    v.dump()));
        field = v.get<int64_t>();
    };
    for (const auto& [key, value] : j.items()) {
        if (key == "budget") {
            if (!value.is_number() || !(value.get<double>() > 0.0 && value.get<double>() <= 1.0))
                throw Error(fmt::format("{}: \"budget\" must be a number in (0, 1], got {}", path.string(),
                                        value.dump()));
            s.budget = value.get<double>();
        } else if (key == "r_min") {
            integer(key, s.r_min, 0);
        } else if (key == "rank") {
            integer(key, s.rank, 1);
        } else if (key == "stride") {
            integer(key, s.stride, 1);
        } else if (key == "anchors") {
            integer(key, s.anchors, 1);
        } else if (key == "window") {
            integer(key, s.window, 0);
        } else if (key == "obs_window") {
            integer(key, s.obs_window, 1);
        } else if (key != "why") {
            throw Error(
                fmt::format("{}: unknown field \"{}\" (known: budget, r_min, rank, stride, anchors, "
                            "window, obs_window, why)",
                            path.string(), key));
        }
    }
    return s;
}

}  // namespace varrate

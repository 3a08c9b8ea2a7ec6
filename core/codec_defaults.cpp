#include "core/codec_defaults.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/base/file_io.h"

namespace varrate {

std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base) {
    const std::filesystem::path path = model_dir / kCodecDefaultsFile;
    if (!std::filesystem::exists(path)) return std::nullopt;
    const nlohmann::json j = read_json_file(path);
    if (!j.is_object()) throw Error(path.string() + ": expected a JSON object of codec settings");
    CodecSettings s = base;
    struct IntegerField {
        const char* key;
        int64_t CodecSettings::*field;
        int64_t min;
    };
    static const IntegerField kIntegers[] = {
        {"r_min", &CodecSettings::r_min, 0},   {"rank", &CodecSettings::rank, 1},
        {"stride", &CodecSettings::stride, 1}, {"anchors", &CodecSettings::anchors, 1},
        {"window", &CodecSettings::window, 0}, {"obs_window", &CodecSettings::obs_window, 1}};
    for (const auto& [key, value] : j.items()) {
        if (key == "why") continue;
        if (key == "budget") {
            if (!value.is_number() || !(value.get<double>() > 0.0 && value.get<double>() <= 1.0))
                throw Error(fmt::format("{}: \"budget\" must be a number in (0, 1], got {}", path.string(),
                                        value.dump()));
            s.budget = value.get<double>();
            continue;
        }
        const IntegerField* f = nullptr;
        for (const auto& candidate : kIntegers)
            if (key == candidate.key) f = &candidate;
        if (!f)
            throw Error(
                fmt::format("{}: unknown field \"{}\" (known: budget, r_min, rank, stride, anchors, "
                            "window, obs_window, why)",
                            path.string(), key));
        if (!value.is_number_integer() || value.get<int64_t>() < f->min)
            throw Error(fmt::format("{}: \"{}\" must be an integer >= {}, got {}", path.string(), key, f->min,
                                    value.dump()));
        s.*(f->field) = value.get<int64_t>();
    }
    return s;
}

}  // namespace varrate

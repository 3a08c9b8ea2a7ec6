#include "core/codec_defaults.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/base/file_io.h"

namespace varrate {

int64_t joint_dim(const ModelConfig& cfg) {
    return 2 * cfg.num_kv_heads * cfg.head_dim;
}

CodecSettings width_codec_defaults(int64_t joint_dim) {
    CodecSettings s;  // the paper's
    if (joint_dim <= 0 || joint_dim >= 1024) return s;
    // A narrow model cannot hold the paper's rank 1024 / r_min 16 / 64-token windows: scale them down so
    // the budget stays feasible on short documents (as the pipeline tests do for D = 64).
    s.budget = 0.3;
    s.rank = joint_dim;
    s.r_min = std::max<int64_t>(2, joint_dim / 16);
    s.stride = 32;
    s.window = 16;
    s.obs_window = 16;
    return s;
}

CodecSettings default_codec_settings(const ModelConfig& cfg, const std::optional<CodecSettings>& recorded) {
    return recorded ? *recorded : width_codec_defaults(joint_dim(cfg));
}

CodecSettings default_codec_settings(const std::filesystem::path& model_dir) {
    const ModelConfig cfg = ModelConfig::load(model_dir);
    return default_codec_settings(cfg, read_codec_defaults(model_dir, width_codec_defaults(joint_dim(cfg))));
}

std::string describe_codec_defaults(int64_t joint_dim, const std::optional<CodecSettings>& recorded) {
    const CodecSettings s = recorded ? *recorded : width_codec_defaults(joint_dim);
    if (recorded)
        return fmt::format(
            "This model's defaults ({}, D = {}): budget {:g}, r_min {}, rank {}, stride {}, anchors {}, "
            "window "
            "{}, obs window {}",
            kCodecDefaultsFile, joint_dim, s.budget, s.r_min, s.rank, s.stride, s.anchors, s.window,
            s.obs_window);
    const std::string values =
        fmt::format("budget {:g}, r_min {}, rank {}, stride {}, window {}, obs window {}", s.budget, s.r_min,
                    s.rank, s.stride, s.window, s.obs_window);
    if (joint_dim <= 0) return "Paper defaults (no model loaded): " + values;
    if (joint_dim >= 1024) return fmt::format("Paper defaults for D = {}: {}", joint_dim, values);
    return fmt::format("Small-model defaults for D = {} (< 1024, paper defaults infeasible): {}", joint_dim,
                       values);
}

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

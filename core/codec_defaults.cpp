#include "core/codec_defaults.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/file_io.h"
#include "codec/codec_json.h"
#include "codec/settings_table.h"

namespace varrate {

int64_t joint_dim(const ModelConfig& cfg) {
    return 2 * cfg.n_kv_head * cfg.head_dim;
}

CodecSettings width_codec_defaults(int64_t joint_dim) {
    CodecSettings s;  // the paper's
    if (joint_dim <= 0 || joint_dim >= 1024) return s;
    // A narrow model cannot hold the paper's rank 1024 / r_min 16 / 64-token windows: scale them down so
    // the budget stays feasible on short documents (as the pipeline tests do for D = 64), a self-calibrated
    // basis (R x D, charged) included: it needs about 0.32 on the default ~400-token document at D = 64.
    s.budget = 0.4;
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
    std::vector<std::string> values;  // the settings a model's defaults set, as the table names them
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (spec.model_default) values.push_back(fmt::format("{} {}", spec.key, format_setting(spec, s)));
    const std::string list = fmt::format("{}", fmt::join(values, ", "));
    if (recorded)
        return fmt::format("This model's defaults ({}, D = {}): {}", kCodecDefaultsFile, joint_dim, list);
    if (joint_dim <= 0) return "Paper defaults (no model loaded): " + list;
    if (joint_dim >= 1024) return fmt::format("Paper defaults for D = {}: {}", joint_dim, list);
    return fmt::format("Small-model defaults for D = {} (< 1024, paper defaults infeasible): {}", joint_dim,
                       list);
}

std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base) {
    const std::filesystem::path path = model_dir / kCodecDefaultsFile;
    if (!std::filesystem::exists(path)) return std::nullopt;
    return codec_settings_from_json(read_json_file(path), path.string(), base, {"why"});
}

}  // namespace varrate

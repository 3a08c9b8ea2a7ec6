#pragma once
// A model's codec defaults, one policy for the CLI and the desktop app. The paper's defaults (r_min 16,
// R 1024, w 64) are meant for D = 1024-2048; a narrower model gets a scaled-down feasible set, and a model
// may record its own beside its weights (DIR/varrate-codec.json), which then wins:
//   {"budget": 0.2, "r_min": 4, "rank": 256, "stride": 16, "anchors": 4, "window": 16, "obs_window": 16,
//    "why": "..."}   (every field optional; the fields not given keep the width-based defaults)
// Settings the user gives (CLI flags, the run panel) are applied over these.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "codec/method.h"
#include "models/model_config.h"

namespace varrate {

inline constexpr const char* kCodecDefaultsFile = "varrate-codec.json";

// D = 2 * n_kv_head * head_dim: the width of one token's key and value in one layer.
int64_t joint_dim(const ModelConfig& cfg);

// The paper's settings when D >= 1024 (or D unknown, <= 0); else budget 0.3, rank D, r_min max(2, D/16),
// stride 32, window and observation window 16 (feasible on short documents, as the pipeline tests use).
CodecSettings width_codec_defaults(int64_t joint_dim);

// The settings of DIR/varrate-codec.json applied over `base`; nullopt when the file does not exist.
// Throws Error naming the file and the field on bad JSON, an unknown field or a value out of range.
std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base = {});

// The defaults a run on this model starts from: `recorded` (read_codec_defaults over the width-based
// defaults, as Session::codec_defaults() holds it) when the model has one, else width_codec_defaults.
CodecSettings default_codec_settings(const ModelConfig& cfg, const std::optional<CodecSettings>& recorded);
// The same from a model directory alone (config.json + varrate-codec.json), for callers without a Session.
CodecSettings default_codec_settings(const std::filesystem::path& model_dir);

// One line naming the defaults in force and where they come from, e.g. "Small-model defaults for D = 64
// (< 1024, paper defaults infeasible): budget 0.3, r_min 4, ...". joint_dim <= 0: no model loaded.
std::string describe_codec_defaults(int64_t joint_dim, const std::optional<CodecSettings>& recorded);

}  // namespace varrate

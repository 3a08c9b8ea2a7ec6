#pragma once
// Codec settings recorded beside a model (DIR/varrate-codec.json): the defaults that suit its width. The
// paper's defaults (r_min 16, R 1024, w 64) are meant for D = 1024-2048; a small model needs its own, and the
// CLI and the app start from them when the user does not set a value.
//   {"budget": 0.2, "r_min": 4, "rank": 256, "stride": 16, "anchors": 4, "window": 16, "obs_window": 16,
//    "why": "..."}   (every field optional)
#include <filesystem>
#include <optional>

#include "codec/method.h"

namespace varrate {

inline constexpr const char* kCodecDefaultsFile = "varrate-codec.json";

// The settings of DIR/varrate-codec.json applied over `base`; nullopt when the file does not exist.
// Throws Error naming the file and the field on bad JSON, an unknown field or a value out of range.
std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base = {});

}  // namespace varrate

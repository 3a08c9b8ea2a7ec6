#include "core/codec_defaults.h"

#include "codec/codec_json.h"
#include "core/base/file_io.h"

namespace varrate {

std::optional<CodecSettings> read_codec_defaults(const std::filesystem::path& model_dir,
                                                 const CodecSettings& base) {
    const std::filesystem::path path = model_dir / kCodecDefaultsFile;
    if (!std::filesystem::exists(path)) return std::nullopt;
    return codec_settings_from_json(read_json_file(path), path.string(), base, {"why"});
}

}  // namespace varrate

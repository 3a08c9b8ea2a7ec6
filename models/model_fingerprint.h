#pragma once
// A model directory's identity: what a basis file and a cache file record, so that they are refused on
// another model. Cheap for any size (config, every tensor's name, dtype, shape and first bytes).
#include <filesystem>
#include <string>

#include "models/model_config.h"

namespace varrate {

// "llama-4x256-0123456789abcdef": model type, layers x hidden size, and a hash of the config and the weights.
std::string model_fingerprint(const ModelConfig& config, const std::filesystem::path& model_dir);
// The same, reading DIR/config.json first. Throws Error naming the file on a bad config or weights.
std::string model_fingerprint(const std::filesystem::path& model_dir);

}  // namespace varrate

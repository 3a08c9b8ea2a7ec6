#include "models/model_fingerprint.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/hash.h"
#include "models/safetensors.h"

namespace varrate {

// Two checkpoints of the same architecture with different weights differ in their tensors' first bytes.
std::string model_fingerprint(const ModelConfig& config, const std::filesystem::path& model_dir) {
    uint64_t h = kFingerprintSeed;
    const std::string c = config.to_json().dump();
    h = fnv1a(h, c.data(), c.size());
    const SafetensorsArchive archive = SafetensorsArchive::open(model_dir);
    for (const std::string& name : archive.names()) {
        const TensorInfo& info = archive.info(name);
        h = fnv1a(h, name.data(), name.size());
        h = fnv1a(h, info.dtype.data(), info.dtype.size());
        h = fnv1a(h, info.shape.data(), info.shape.size() * sizeof(int64_t));
        const at::Tensor t = archive.tensor(name);
        const size_t n = std::min<size_t>(64, static_cast<size_t>(t.numel() * t.element_size()));
        h = fnv1a(h, t.data_ptr(), n);
    }
    return fmt::format("{}-{}x{}-{:016x}", config.model_type, config.n_layer, config.hidden_size, h);
}

std::string model_fingerprint(const std::filesystem::path& model_dir) {
    return model_fingerprint(ModelConfig::load(model_dir), model_dir);
}

}  // namespace varrate

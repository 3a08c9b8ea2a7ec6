#pragma once
// Writes a Hugging Face model directory with random weights of a config's exact shapes, for speed work at
// real model sizes without downloading checkpoints: config.json, generation_config.json and the weights
// (model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json above 2 GB).
#include <cstdint>
#include <filesystem>

#include <c10/core/ScalarType.h>

#include "models/model_config.h"

namespace varrate {

// Projections, embeddings and biases ~ N(0, init_std^2) (HF's initializer_range, 0.02 by default), norm
// weights = 1 except Qwen3's per-head q_norm/k_norm ~ 1 + N(0, kHeadNormStd^2). The values depend only on
// `seed`, `init_std` and the tensor name. Memory stays at about one tensor; everything is written into a
// temporary directory first and then moved into `out_dir` (created if needed; older weight files there are
// replaced). dtype: float32, bfloat16 or float16. Above max_shard_bytes the weights are split into shards.
constexpr uint64_t kDefaultMaxShardBytes = 2'000'000'000ull;
constexpr double kDefaultInitStd = 0.02;
constexpr double kHeadNormStd = 0.1;
void write_random_model(const ModelConfig& config, const std::filesystem::path& out_dir, uint64_t seed,
                        c10::ScalarType dtype, uint64_t max_shard_bytes = kDefaultMaxShardBytes,
                        double init_std = kDefaultInitStd);

}  // namespace varrate

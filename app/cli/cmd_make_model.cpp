// varrate make-model: a model directory with random weights of a real config's shapes, for speed work at
// full size without downloading checkpoints (the shipped shapes are in resources/configs/).
#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "base/error.h"
#include "base/file_io.h"
#include "models/model_config.h"
#include "models/random_model.h"

namespace varrate::cli {

namespace {

struct MakeModelArgs {
    std::string config;
    std::string out;
    uint64_t seed = 0;
    std::string dtype = "bf16";
    double init_std = kDefaultInitStd;
};

// A storage dtype only (nothing is computed), so fp16 is fine here even without a GPU.
c10::ScalarType storage_dtype(const std::string& name) {
    if (name == "bf16" || name == "bfloat16") return c10::kBFloat16;
    if (name == "fp32" || name == "float32") return c10::kFloat;
    if (name == "fp16" || name == "float16") return c10::kHalf;
    throw Error("make-model: unknown --dtype '" + name + "' (expected bf16, fp32 or fp16)");
}

int run_make_model(const MakeModelArgs& a) {
    const c10::ScalarType dtype = storage_dtype(a.dtype);
    std::filesystem::path config_path = a.config;
    std::error_code ec;
    if (std::filesystem::is_directory(config_path, ec)) config_path /= "config.json";
    const ModelConfig cfg = ModelConfig::from_json(read_json_file(config_path), config_path.string());

    const auto t0 = std::chrono::steady_clock::now();
    write_random_model(cfg, a.out, a.seed, dtype, kDefaultMaxShardBytes, a.init_std);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gb = double(cfg.parameter_count()) * double(c10::elementSize(dtype)) / 1e9;
    std::cout << fmt::format(
        "wrote {}: {} {} with {} parameters ({:.2f} GB of {} weights, seed {}) in {:.1f} s\n", a.out,
        cfg.architecture, config_path.filename().string(), cfg.parameter_count(), gb, a.dtype, a.seed,
        seconds);
    return 0;
}

}  // namespace

Command add_make_model(CLI::App& root) {
    auto a = std::make_shared<MakeModelArgs>();
    CLI::App* sub = root.add_subcommand(
        "make-model",
        "Write a model directory with random weights of a config.json's shapes (for benchmarks)");
    sub->add_option("--config", a->config, "config.json (e.g. resources/configs/llama-3.2-1b.json)")
        ->required();
    sub->add_option("--out", a->out,
                    "Output model directory (created; older weight files there are replaced)")
        ->required();
    sub->add_option("--seed", a->seed, "Random seed (the same seed gives the same weights)")
        ->capture_default_str();
    sub->add_option("--dtype", a->dtype, "Weight dtype: bf16, fp32 or fp16")->capture_default_str();
    sub->add_option(
           "--init-std", a->init_std,
           "Standard deviation of the random projections, embeddings and biases (norm weights are 1)")
        ->capture_default_str();
    return {sub, [a] { return run_make_model(*a); }};
}

}  // namespace varrate::cli

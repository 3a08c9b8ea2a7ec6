#include "models/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "base/file_io.h"
#include "base/hash.h"
#include "models/safetensors.h"

namespace varrate {

namespace {

// Random values are generated in fixed-size chunks, each with its own generator, so the result does not
// depend on the thread count and large tensors never need a float32 copy of their full size.
constexpr int64_t kChunkElements = 1 << 20;

bool is_norm(const std::string& name) {
    return name.find("norm.weight") != std::string::npos;
}

// Qwen3's per-head query and key norms: random around 1, so that a swap of the two, or a norm left out,
// changes the logits.
bool is_head_norm(const std::string& name) {
    return name.find("self_attn.q_norm.weight") != std::string::npos ||
           name.find("self_attn.k_norm.weight") != std::string::npos;
}

// N(mean, std^2) values of spec's shape and dtype, from seed and the tensor's name.
at::Tensor normal_tensor(const TensorSpec& spec, uint64_t seed, double mean, double std) {
    const auto options = at::TensorOptions().dtype(spec.dtype);
    at::Tensor out = at::empty(spec.shape, options);
    at::Tensor flat = out.view({-1});
    const int64_t n = flat.numel();
    const int64_t chunks = (n + kChunkElements - 1) / kChunkElements;
    const uint64_t tensor_seed = splitmix64(seed ^ fnv1a(spec.name));
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            const int64_t start = c * kChunkElements;
            const int64_t len = std::min(kChunkElements, n - start);
            at::Generator gen =
                at::detail::createCPUGenerator(splitmix64(tensor_seed + static_cast<uint64_t>(c)));
            at::Tensor values = at::empty({len}, at::kFloat);
            values.normal_(mean, std, gen);
            flat.narrow(0, start, len).copy_(values);
        }
    });
    return out;
}

at::Tensor random_tensor(const TensorSpec& spec, uint64_t seed, double std) {
    if (is_head_norm(spec.name)) return normal_tensor(spec, seed, 1.0, kHeadNormStd);
    if (is_norm(spec.name)) return at::ones(spec.shape, at::TensorOptions().dtype(spec.dtype));
    return normal_tensor(spec, seed, 0.0, std);
}

const char* hf_dtype_name(c10::ScalarType t) {
    switch (t) {
        case c10::kFloat:
            return "float32";
        case c10::kBFloat16:
            return "bfloat16";
        case c10::kHalf:
            return "float16";
        default:
            return nullptr;
    }
}

uint64_t spec_bytes(const TensorSpec& s) {
    uint64_t n = c10::elementSize(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    return n;
}

bool is_weight_file(const std::string& name) {
    if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
    return name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos && name.size() > 12 &&
           name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
    write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace

void write_random_model(const ModelConfig& config, const std::filesystem::path& out_dir, uint64_t seed,
                        c10::ScalarType dtype, uint64_t max_shard_bytes, double init_std) {
    if (!(init_std > 0) || !std::isfinite(init_std))
        throw Error(out_dir.string() +
                    ": the initialisation standard deviation must be positive and finite, not " +
                    std::to_string(init_std));
    const char* dtype_str = hf_dtype_name(dtype);
    if (!dtype_str) {
        throw Error(out_dir.string() + ": random weights can be float32, bfloat16 or float16, not " +
                    std::string(c10::toString(dtype)));
    }
    std::filesystem::path target = std::filesystem::absolute(out_dir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();  // "dir/" -> "dir"
    std::error_code ec;
    if (std::filesystem::exists(target, ec) && !std::filesystem::is_directory(target, ec))
        throw Error(target.string() + ": exists and is not a directory");
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) throw Error(target.parent_path().string() + ": cannot create directory: " + ec.message());

    std::random_device rd;
    const auto tmp =
        target.parent_path() / ("." + target.filename().string() + ".tmp" + std::to_string(rd() % 1000000));
    std::filesystem::create_directory(tmp, ec);
    if (ec) throw Error(tmp.string() + ": cannot create directory: " + ec.message());
    struct TmpGuard {
        std::filesystem::path dir;
        ~TmpGuard() {
            std::error_code e;
            if (!dir.empty()) std::filesystem::remove_all(dir, e);
        }
    } guard{tmp};

    ModelConfig written = config;
    written.torch_dtype = dtype_str;
    const nlohmann::json cfg = written.to_json();
    write_json(tmp / "config.json", cfg);
    write_json(tmp / "generation_config.json", {{"_from_model_config", true},
                                                {"bos_token_id", cfg["bos_token_id"]},
                                                {"eos_token_id", cfg["eos_token_id"]}});

    // Shards follow the model's own order (embeddings, layer by layer, norm, head), like save_pretrained.
    std::vector<TensorSpec> all;
    uint64_t total_bytes = 0;
    for (const auto& [name, shape] : config.expected_tensors()) {
        all.push_back({name, dtype, shape});
        total_bytes += spec_bytes(all.back());
    }
    std::vector<std::vector<TensorSpec>> shards(1);
    uint64_t shard_bytes = 0;
    for (const auto& s : all) {
        const uint64_t b = spec_bytes(s);
        if (!shards.back().empty() && shard_bytes + b > max_shard_bytes) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(s);
        shard_bytes += b;
    }
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    std::vector<std::string> files;
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
        std::string file = "model.safetensors";
        if (shards.size() > 1) {
            char buf[64];
            std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
            file = buf;
        }
        const auto& specs = shards[k];
        write_safetensors_streamed(
            tmp / file, specs, [&](size_t i) { return random_tensor(specs[i], seed, init_std); }, metadata);
        for (const auto& s : specs) weight_map[s.name] = file;
        files.push_back(file);
    }
    if (shards.size() > 1) {
        write_json(tmp / "model.safetensors.index.json",
                   {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
        files.push_back("model.safetensors.index.json");
    }
    files.push_back("config.json");
    files.push_back("generation_config.json");

    // Publish: a fresh directory is renamed into place in one step; into an existing one (which may hold a
    // tokenizer) each file is renamed, after removing older weight files that would otherwise shadow ours.
    if (!std::filesystem::exists(target, ec)) {
        std::filesystem::rename(tmp, target, ec);
        if (ec) throw Error(target.string() + ": cannot move the new model into place: " + ec.message());
        guard.dir.clear();
        return;
    }
    for (const auto& entry : std::filesystem::directory_iterator(target)) {
        const std::string name = entry.path().filename().string();
        if (is_weight_file(name) && std::find(files.begin(), files.end(), name) == files.end())
            std::filesystem::remove(entry.path(), ec);
    }
    for (const auto& f : files) {
        std::filesystem::rename(tmp / f, target / f, ec);
        if (ec) throw Error((target / f).string() + ": cannot move into place: " + ec.message());
    }
}

}  // namespace varrate

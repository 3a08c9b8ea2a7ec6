// varrate inspect: what a model directory holds, after checking that its weights fit its config.
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "base/error.h"
#include "models/model_config.h"
#include "models/safetensors.h"

namespace varrate::cli {

namespace {

struct InspectArgs {
    std::string model;
    bool json = false;
};

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string human_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

std::string human_count(double n) {
    if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    if (n >= 1e6) return fmt::format("{:.1f} M", n / 1e6);
    return fmt::format("{:.1f} K", n / 1e3);
}

std::string rope_description(const ModelConfig& c) {
    const auto& r = c.rope_scaling;
    std::string s = fmt::format("theta {:g}", c.rope_theta);
    if (r.type == RopeScalingType::Linear) s += fmt::format(", linear scaling (factor {:g})", r.factor);
    if (r.type == RopeScalingType::Llama3) {
        s += fmt::format(
            ", llama3 scaling (factor {:g}, low_freq_factor {:g}, high_freq_factor {:g}, original {})",
            r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
    }
    return s;
}

std::string id_list(const std::vector<int64_t>& ids) {
    if (ids.empty()) return "none";
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s;
}

struct WeightCheck {
    std::set<std::string> dtypes;
    std::vector<std::string> extra;  // in the checkpoint but not used by the model (e.g. rotary inv_freq)
};

// Every tensor the config implies must be present with exactly that shape and a floating-point dtype.
WeightCheck check_weights(const ModelConfig& cfg, const SafetensorsArchive& archive, const std::string& dir) {
    WeightCheck out;
    std::set<std::string> expected;
    for (const auto& [name, shape] : cfg.expected_tensors()) {
        expected.insert(name);
        if (!archive.contains(name)) {
            throw Error(dir + ": tensor '" + name + "' " + shape_str(shape) +
                        " is missing from the checkpoint (required by config.json)");
        }
        const TensorInfo& info = archive.info(name);
        if (info.shape != shape) {
            throw Error(info.file.string() + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                        " but config.json implies " + shape_str(shape));
        }
        if (info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16") {
            throw Error(info.file.string() + ": tensor '" + name + "' has dtype " + info.dtype +
                        "; model weights must be F32, BF16 or F16");
        }
        out.dtypes.insert(info.dtype);
    }
    for (const auto& name : archive.names())
        if (!expected.count(name)) out.extra.push_back(name);
    return out;
}

int run_inspect(const InspectArgs& a) {
    const ModelConfig cfg = ModelConfig::load(a.model);
    const SafetensorsArchive archive = SafetensorsArchive::open(a.model);
    const WeightCheck check = check_weights(cfg, archive, a.model);

    std::map<std::string, uint64_t> files;  // file name -> size
    for (const auto& name : archive.names()) {
        const auto& f = archive.info(name).file;
        files.emplace(f.filename().string(), std::filesystem::file_size(f));
    }
    uint64_t total_file_bytes = 0;
    for (const auto& [f, size] : files) total_file_bytes += size;
    std::string dtypes;
    for (const auto& d : check.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;

    if (a.json) {
        nlohmann::json j;
        j["model"] = a.model;
        j["architecture"] = cfg.architecture;
        j["model_type"] = cfg.model_type;
        j["layers"] = cfg.n_layer;
        j["heads"] = cfg.n_head;
        j["kv_heads"] = cfg.n_kv_head;
        j["head_dim"] = cfg.head_dim;
        j["hidden_size"] = cfg.hidden_size;
        j["intermediate_size"] = cfg.intermediate_size;
        j["vocab_size"] = cfg.vocab_size;
        j["max_position_embeddings"] = cfg.max_position_embeddings;
        j["parameters"] = cfg.parameter_count();
        j["torch_dtype"] = cfg.torch_dtype;
        j["weight_dtypes"] = check.dtypes;
        j["rope_theta"] = cfg.rope_theta;
        j["rope_scaling"] = cfg.to_json()["rope_scaling"];
        j["sliding_window"] =
            cfg.sliding_window ? nlohmann::json(*cfg.sliding_window) : nlohmann::json(nullptr);
        j["tie_word_embeddings"] = cfg.tie_word_embeddings;
        j["bos_token_id"] = cfg.bos_token_id ? nlohmann::json(*cfg.bos_token_id) : nlohmann::json(nullptr);
        j["eos_token_ids"] = cfg.eos_token_ids;
        j["kv_bytes_per_token"] = {{"bf16", cfg.kv_bytes_per_token(2)}, {"fp32", cfg.kv_bytes_per_token(4)}};
        j["tensors"] = archive.names().size();
        j["expected_tensors"] = cfg.expected_tensors().size();
        j["extra_tensors"] = check.extra;
        j["files"] = files;
        j["total_file_bytes"] = total_file_bytes;
        std::cout << j.dump(2) << "\n";
        return 0;
    }

    auto row = [](const std::string& key, const std::string& value) {
        std::cout << fmt::format("{:<18}{}\n", key, value);
    };
    row("model", a.model);
    row("architecture", cfg.architecture + " (" + cfg.model_type + ")");
    row("layers", std::to_string(cfg.n_layer));
    row("heads", fmt::format("{} query, {} kv ({} queries per kv head)", cfg.n_head, cfg.n_kv_head,
                             cfg.n_head / cfg.n_kv_head));
    row("head_dim", std::to_string(cfg.head_dim));
    row("hidden", std::to_string(cfg.hidden_size));
    row("intermediate", std::to_string(cfg.intermediate_size));
    row("vocab", std::to_string(cfg.vocab_size));
    row("parameters",
        fmt::format("{} ({})", cfg.parameter_count(), human_count(double(cfg.parameter_count()))));
    row("torch_dtype", cfg.torch_dtype.empty() ? "(not given)" : cfg.torch_dtype);
    row("rope", rope_description(cfg));
    row("max positions", std::to_string(cfg.max_position_embeddings));
    row("sliding window", cfg.sliding_window ? std::to_string(*cfg.sliding_window) : "none");
    row("tied embeddings", cfg.tie_word_embeddings ? "yes" : "no");
    row("biases", fmt::format("q/k/v {}, o {}, mlp {}", cfg.attention_bias ? "yes" : "no",
                              cfg.o_proj_bias ? "yes" : "no", cfg.mlp_bias ? "yes" : "no"));
    row("bos / eos",
        (cfg.bos_token_id ? std::to_string(*cfg.bos_token_id) : "none") + " / " + id_list(cfg.eos_token_ids));
    row("KV per token",
        fmt::format("{} bf16, {} fp32 ({} bytes bf16)", human_bytes(cfg.kv_bytes_per_token(2)),
                    human_bytes(cfg.kv_bytes_per_token(4)), cfg.kv_bytes_per_token(2)));
    row("tensors", fmt::format("{} ({} expected, all present with matching shapes; {})",
                               archive.names().size(), cfg.expected_tensors().size(), dtypes));
    if (!check.extra.empty()) {
        row("unused tensors", fmt::format("{} (first: {})", check.extra.size(), check.extra.front()));
    }
    for (const auto& [f, size] : files) row("file", fmt::format("{} {}", f, human_bytes(double(size))));
    if (files.size() > 1) row("total", human_bytes(double(total_file_bytes)));
    return 0;
}

}  // namespace

Command add_inspect(CLI::App& root) {
    auto a = std::make_shared<InspectArgs>();
    CLI::App* sub = root.add_subcommand(
        "inspect",
        "Show a model's architecture and sizes, after validating its config and safetensors weights");
    sub->add_option("--model", a->model, "Hugging Face model directory (config.json + *.safetensors)")
        ->required();
    sub->add_flag("--json", a->json, "Print the summary as JSON");
    return {sub, [a] { return run_inspect(*a); }};
}

}  // namespace varrate::cli

#pragma once
// Hugging Face config.json (+ generation_config.json) for the Llama family: LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM. Every field the runtime needs, validated on load.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

enum class RopeScalingType { None, Linear, Llama3 };

struct RopeScaling {
    RopeScalingType type = RopeScalingType::None;
    double factor = 1.0;
    double low_freq_factor = 1.0;                     // llama3
    double high_freq_factor = 4.0;                    // llama3
    int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
    std::string architecture;  // e.g. "LlamaForCausalLM"
    std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_kv_head = 0;
    int64_t head_dim = 0;  // hidden_size / n_head unless given (Qwen3: 128 unless given, as transformers)
    int64_t vocab_size = 0;
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v biases (Qwen2 always, others when attention_bias is set)
    bool o_proj_bias = false;     // o_proj bias (attention_bias on Llama and Qwen3)
    bool mlp_bias = false;
    // Qwen3: an RMSNorm over head_dim (weights q_norm/k_norm [head_dim], eps rms_norm_eps) on every query and
    // key head, after the projections and before RoPE. The keys the cache holds, and the "pre-RoPE keys" an
    // observer or codec sees, are then the normed keys: k_norm(k_proj(x)), not k_proj(x).
    bool qk_norm = false;
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    // Mistral: every layer. Qwen2/Qwen3 (use_sliding_window): layers from max_window_layers on, as the
    // layer_types transformers derives; an explicit layer_types list is not read.
    std::optional<int64_t> sliding_window;
    int64_t first_sliding_layer = 0;  // max_window_layers (Qwen2/Qwen3), 0 otherwise
    std::string torch_dtype;          // as written in config.json ("bfloat16", "float32", ...), may be empty

    // Parses config.json content; `where` names the file in error messages.
    static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
    // Reads DIR/config.json and, when present, DIR/generation_config.json (bos/eos override).
    static ModelConfig load(const std::filesystem::path& model_dir);

    nlohmann::json to_json() const;  // HF-compatible config.json
    // The sliding window of layer l (0: full attention).
    int64_t layer_window(int64_t l) const {
        return sliding_window && l >= first_sliding_layer ? *sliding_window : 0;
    }
    // Both counts throw Error when they overflow int64 (from_json refuses such sizes).
    int64_t parameter_count() const;
    // K and V of all layers for one token, at `bytes_per_element` (2 for bf16/fp16, 4 for fp32).
    int64_t kv_bytes_per_token(int64_t bytes_per_element) const;
    // The expected weight tensors: name -> shape (HF naming, e.g. "model.layers.0.self_attn.q_proj.weight").
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected_tensors() const;
};

std::string to_string(RopeScalingType t);

}  // namespace varrate

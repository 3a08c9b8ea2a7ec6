#include "models/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"

namespace varrate {

namespace {

using json = nlohmann::json;

std::string type_name(const json& v) {
    if (v.is_number_integer()) return "integer";
    if (v.is_number_float()) return "number";
    return v.type_name();
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw Error(where + ": " + what);
}

// Integers only; an integral float (e.g. 4096.0, which some exporters write) is accepted too.
bool as_int(const json& v, int64_t& out) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return false;
        out = v.get<int64_t>();
        return true;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
            out = static_cast<int64_t>(d);
            return true;
        }
    }
    return false;
}

int64_t int_field(const json& j, const char* key, const std::string& where, const std::string& prefix = "") {
    const std::string name = prefix + key;
    if (!j.contains(key) || j[key].is_null()) fail(where, "required field '" + name + "' is missing");
    int64_t out = 0;
    if (!as_int(j[key], out))
        fail(where, "field '" + name + "' must be an integer (got " + type_name(j[key]) + ")");
    return out;
}

std::optional<int64_t> optional_int(const json& j, const char* key, const std::string& where,
                                    const std::string& prefix = "") {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    return int_field(j, key, where, prefix);
}

double number_field(const json& j, const char* key, const std::string& where,
                    const std::string& prefix = "") {
    const std::string name = prefix + key;
    if (!j.contains(key) || j[key].is_null()) fail(where, "required field '" + name + "' is missing");
    if (!j[key].is_number())
        fail(where, "field '" + name + "' must be a number (got " + type_name(j[key]) + ")");
    return j[key].get<double>();
}

double optional_number(const json& j, const char* key, double fallback, const std::string& where) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    return number_field(j, key, where);
}

bool optional_bool(const json& j, const char* key, bool fallback, const std::string& where) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean())
        fail(where, std::string("field '") + key + "' must be true or false (got " + type_name(j[key]) + ")");
    return j[key].get<bool>();
}

// bos_token_id / eos_token_id: an integer, a list of integers, or null.
std::vector<int64_t> token_ids(const json& j, const char* key, const std::string& where) {
    std::vector<int64_t> ids;
    if (!j.contains(key) || j[key].is_null()) return ids;
    const json& v = j[key];
    int64_t id = 0;
    if (as_int(v, id)) {
        ids.push_back(id);
    } else if (v.is_array()) {
        for (const auto& e : v) {
            if (!as_int(e, id))
                fail(where, std::string("field '") + key + "' must hold integers (got " + type_name(e) + ")");
            ids.push_back(id);
        }
    } else {
        fail(where, std::string("field '") + key + "' must be an integer, a list of integers or null (got " +
                        type_name(v) + ")");
    }
    for (int64_t t : ids)
        if (t < 0)
            fail(where, std::string("field '") + key + "' holds a negative token id " + std::to_string(t));
    return ids;
}

RopeScaling parse_rope_scaling(const json& j, const std::string& where) {
    RopeScaling rs;
    if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return rs;
    const json& r = j["rope_scaling"];
    if (!r.is_object())
        fail(where, "field 'rope_scaling' must be an object or null (got " + type_name(r) + ")");
    // transformers renamed "type" to "rope_type"; checkpoints carry either.
    const char* type_key = r.contains("rope_type") ? "rope_type" : (r.contains("type") ? "type" : nullptr);
    if (!type_key) fail(where, "field 'rope_scaling' has neither 'rope_type' nor 'type'");
    if (!r[type_key].is_string())
        fail(where, std::string("field 'rope_scaling.") + type_key + "' must be a string (got " +
                        type_name(r[type_key]) + ")");
    const std::string type = r[type_key].get<std::string>();
    const std::string p = "rope_scaling.";
    if (type == "default") return rs;
    if (type == "linear") {
        rs.type = RopeScalingType::Linear;
        rs.factor = number_field(r, "factor", where, p);
    } else if (type == "llama3") {
        rs.type = RopeScalingType::Llama3;
        rs.factor = number_field(r, "factor", where, p);
        rs.low_freq_factor = number_field(r, "low_freq_factor", where, p);
        rs.high_freq_factor = number_field(r, "high_freq_factor", where, p);
        rs.original_max_position_embeddings = int_field(r, "original_max_position_embeddings", where, p);
        if (rs.low_freq_factor <= 0 || rs.high_freq_factor <= rs.low_freq_factor)
            fail(where, "rope_scaling: llama3 needs 0 < low_freq_factor < high_freq_factor");
        if (rs.original_max_position_embeddings <= 0)
            fail(where, "rope_scaling.original_max_position_embeddings must be positive");
    } else {
        fail(where, "unsupported rope_scaling type '" + type + "' (supported: default, linear, llama3)");
    }
    if (!(rs.factor > 0)) fail(where, "rope_scaling.factor must be positive");
    return rs;
}

struct ArchInfo {
    const char* architecture;
    const char* model_type;
    int64_t default_max_positions;  // the transformers config class default
    int64_t default_head_dim;       // the config class default; 0: hidden_size / num_attention_heads
};

const ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama", 2048, 0},
    {"MistralForCausalLM", "mistral", 4096 * 32, 0},
    {"Qwen2ForCausalLM", "qwen2", 32768, 0},
    {"Qwen3ForCausalLM", "qwen3", 32768, 128},
};

const ArchInfo* find_arch(const std::string& architecture, const std::string& model_type) {
    for (const auto& a : kArchitectures) {
        if (!architecture.empty() ? architecture == a.architecture : model_type == a.model_type) return &a;
    }
    return nullptr;
}

// A layer count this large is a corrupt file, not a model: every layer is a list of tensors
// (expected_tensors).
constexpr int64_t kMaxLayers = int64_t(1) << 16;

void require_positive(int64_t v, const char* field, const std::string& where) {
    if (v <= 0)
        fail(where, std::string("field '") + field + "' must be positive (got " + std::to_string(v) + ")");
}

}  // namespace

std::string to_string(RopeScalingType t) {
    switch (t) {
        case RopeScalingType::None:
            return "none";
        case RopeScalingType::Linear:
            return "linear";
        case RopeScalingType::Llama3:
            return "llama3";
    }
    return "unknown";
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
    if (!j.is_object()) fail(where, "expected a JSON object (got " + type_name(j) + ")");
    ModelConfig c;

    std::string model_type;
    if (j.contains("model_type") && !j["model_type"].is_null()) {
        if (!j["model_type"].is_string())
            fail(where, "field 'model_type' must be a string (got " + type_name(j["model_type"]) + ")");
        model_type = j["model_type"].get<std::string>();
    }
    std::string architecture;
    if (j.contains("architectures") && !j["architectures"].is_null()) {
        const json& a = j["architectures"];
        if (!a.is_array() || a.empty() || !a[0].is_string())
            fail(where, "field 'architectures' must be a non-empty list of strings");
        architecture = a[0].get<std::string>();
    }
    if (architecture.empty() && model_type.empty())
        fail(where, "neither 'architectures' nor 'model_type' is given; cannot tell the model architecture");
    const ArchInfo* arch = find_arch(architecture, model_type);
    if (!arch) {
        fail(where, "unsupported architecture '" + (architecture.empty() ? model_type : architecture) +
                        "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                        "Qwen3ForCausalLM)");
    }
    c.architecture = arch->architecture;
    c.model_type = arch->model_type;
    const bool is_llama = c.model_type == "llama";
    const bool is_qwen2 = c.model_type == "qwen2";
    const bool is_qwen3 = c.model_type == "qwen3";

    c.hidden_size = int_field(j, "hidden_size", where);
    c.intermediate_size = int_field(j, "intermediate_size", where);
    c.n_layer = int_field(j, "num_hidden_layers", where);
    c.n_head = int_field(j, "num_attention_heads", where);
    c.vocab_size = int_field(j, "vocab_size", where);
    require_positive(c.hidden_size, "hidden_size", where);
    require_positive(c.intermediate_size, "intermediate_size", where);
    require_positive(c.n_layer, "num_hidden_layers", where);
    require_positive(c.n_head, "num_attention_heads", where);
    require_positive(c.vocab_size, "vocab_size", where);

    c.n_kv_head = optional_int(j, "num_key_value_heads", where).value_or(c.n_head);
    require_positive(c.n_kv_head, "num_key_value_heads", where);
    if (c.n_head % c.n_kv_head != 0) {
        fail(where, "num_attention_heads (" + std::to_string(c.n_head) +
                        ") is not divisible by num_key_value_heads (" + std::to_string(c.n_kv_head) + ")");
    }
    if (auto hd = optional_int(j, "head_dim", where)) {
        c.head_dim = *hd;
        require_positive(c.head_dim, "head_dim", where);
    } else if (arch->default_head_dim > 0) {
        c.head_dim = arch->default_head_dim;
    } else {
        if (c.hidden_size % c.n_head != 0) {
            fail(where, "hidden_size (" + std::to_string(c.hidden_size) +
                            ") is not divisible by num_attention_heads (" + std::to_string(c.n_head) +
                            ") and no head_dim is given");
        }
        c.head_dim = c.hidden_size / c.n_head;
    }
    if (c.head_dim % 2 != 0)
        fail(where, "head_dim (" + std::to_string(c.head_dim) + ") must be even for RoPE");

    c.max_position_embeddings =
        optional_int(j, "max_position_embeddings", where).value_or(arch->default_max_positions);
    require_positive(c.max_position_embeddings, "max_position_embeddings", where);
    c.rms_norm_eps = optional_number(j, "rms_norm_eps", 1e-6, where);
    if (!(c.rms_norm_eps > 0)) fail(where, "field 'rms_norm_eps' must be positive");
    c.rope_theta = optional_number(j, "rope_theta", 10000.0, where);
    if (!(c.rope_theta > 0)) fail(where, "field 'rope_theta' must be positive");
    c.rope_scaling = parse_rope_scaling(j, where);
    c.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", false, where);

    // Qwen2 always has q/k/v biases and no o_proj bias; Llama's and Qwen3's attention_bias covers q/k/v/o.
    // Mistral's attention has no biases at all (its modeling code ignores attention_bias). Qwen3 norms every
    // query and key head.
    if (is_qwen2) {
        c.attention_bias = true;
    } else if (is_llama || is_qwen3) {
        c.attention_bias = optional_bool(j, "attention_bias", false, where);
        c.o_proj_bias = c.attention_bias;
        if (is_llama) c.mlp_bias = optional_bool(j, "mlp_bias", false, where);
    }
    c.qk_norm = is_qwen3;

    const auto bos = token_ids(j, "bos_token_id", where);
    if (bos.size() > 1) fail(where, "field 'bos_token_id' must be a single integer or null");
    if (!bos.empty()) c.bos_token_id = bos[0];
    c.eos_token_ids = token_ids(j, "eos_token_id", where);

    // Mistral: the window (if any) on every layer. Qwen2/Qwen3: only with use_sliding_window, and then (as
    // the layer_types transformers derives) on layers from max_window_layers (default 28) on.
    if (!is_llama) {
        const bool is_qwen = is_qwen2 || is_qwen3;
        const bool use_sliding = is_qwen ? optional_bool(j, "use_sliding_window", false, where) : true;
        auto window = optional_int(j, "sliding_window", where);
        if (use_sliding && is_qwen && !j.contains("sliding_window")) window = 4096;  // the classes' default
        if (use_sliding && window) {
            require_positive(*window, "sliding_window", where);
            c.sliding_window = window;
            if (is_qwen) {
                c.first_sliding_layer = optional_int(j, "max_window_layers", where).value_or(28);
                if (c.first_sliding_layer < 0) fail(where, "field 'max_window_layers' must not be negative");
            }
        }
    }

    // Newer transformers write "dtype" instead of "torch_dtype".
    for (const char* key : {"torch_dtype", "dtype"}) {
        if (j.contains(key) && !j[key].is_null()) {
            if (!j[key].is_string())
                fail(where,
                     std::string("field '") + key + "' must be a string (got " + type_name(j[key]) + ")");
            c.torch_dtype = j[key].get<std::string>();
            break;
        }
    }

    if (c.n_layer > kMaxLayers)
        fail(where, "num_hidden_layers (" + std::to_string(c.n_layer) + ") is absurd (over " +
                        std::to_string(kMaxLayers) + ")");
    // Sizes whose parameter or KV counts overflow int64 are refused here, not left to overflow in the
    // callers of parameter_count() and kv_bytes_per_token() (both throw on overflow; expected_tensors()
    // multiplies the heads by head_dim unchecked, n_kv_head <= n_head).
    int64_t q_dim = 0;
    if (__builtin_mul_overflow(c.n_head, c.head_dim, &q_dim))
        fail(where, "the sizes are too large: num_attention_heads x head_dim overflows int64");
    try {
        (void)c.parameter_count();
        (void)c.kv_bytes_per_token(4);
    } catch (const Error& e) {
        fail(where, std::string("the sizes are too large: ") + e.what());
    }
    return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(model_dir, ec))
        throw Error(model_dir.string() + ": not a directory (expected a Hugging Face model directory)");
    const auto config_path = model_dir / "config.json";
    if (!std::filesystem::exists(config_path, ec))
        throw Error(model_dir.string() + ": no config.json (expected a Hugging Face model directory)");
    ModelConfig c = from_json(read_json_file(config_path), config_path.string());

    // generation_config.json is what generation uses for bos/eos (Llama 3 lists several eos ids there).
    const auto gen_path = model_dir / "generation_config.json";
    if (std::filesystem::exists(gen_path, ec)) {
        const json g = read_json_file(gen_path);
        const std::string where = gen_path.string();
        if (!g.is_object()) fail(where, "expected a JSON object (got " + type_name(g) + ")");
        if (g.contains("bos_token_id") && !g["bos_token_id"].is_null()) {
            const auto bos = token_ids(g, "bos_token_id", where);
            if (bos.size() != 1) fail(where, "field 'bos_token_id' must be a single integer or null");
            c.bos_token_id = bos[0];
        }
        if (g.contains("eos_token_id") && !g["eos_token_id"].is_null())
            c.eos_token_ids = token_ids(g, "eos_token_id", where);
    }
    return c;
}

json ModelConfig::to_json() const {
    json j;
    j["architectures"] = json::array({architecture});
    j["model_type"] = model_type;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["num_hidden_layers"] = n_layer;
    j["num_attention_heads"] = n_head;
    j["num_key_value_heads"] = n_kv_head;
    j["head_dim"] = head_dim;
    j["vocab_size"] = vocab_size;
    j["max_position_embeddings"] = max_position_embeddings;
    j["rms_norm_eps"] = rms_norm_eps;
    j["rope_theta"] = rope_theta;
    j["hidden_act"] = "silu";
    switch (rope_scaling.type) {
        case RopeScalingType::None:
            j["rope_scaling"] = nullptr;
            break;
        case RopeScalingType::Linear:
            j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
            break;
        case RopeScalingType::Llama3:
            j["rope_scaling"] = {
                {"rope_type", "llama3"},
                {"factor", rope_scaling.factor},
                {"low_freq_factor", rope_scaling.low_freq_factor},
                {"high_freq_factor", rope_scaling.high_freq_factor},
                {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
            break;
    }
    j["tie_word_embeddings"] = tie_word_embeddings;
    if (model_type == "llama") {
        j["attention_bias"] = attention_bias;
        j["mlp_bias"] = mlp_bias;
    }
    if (model_type == "qwen3") j["attention_bias"] = attention_bias;
    if (model_type == "qwen2" || model_type == "qwen3") {
        j["use_sliding_window"] = sliding_window.has_value();
        if (sliding_window) j["max_window_layers"] = first_sliding_layer;
    }
    if (model_type != "llama") j["sliding_window"] = sliding_window ? json(*sliding_window) : json(nullptr);
    j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
    if (eos_token_ids.empty())
        j["eos_token_id"] = nullptr;
    else if (eos_token_ids.size() == 1)
        j["eos_token_id"] = eos_token_ids[0];
    else
        j["eos_token_id"] = eos_token_ids;
    if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
    return j;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ModelConfig::expected_tensors() const {
    std::vector<std::pair<std::string, std::vector<int64_t>>> t;
    const int64_t q_dim = n_head * head_dim;
    const int64_t kv_dim = n_kv_head * head_dim;
    t.push_back({"model.embed_tokens.weight", {vocab_size, hidden_size}});
    for (int64_t i = 0; i < n_layer; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        t.push_back({p + "input_layernorm.weight", {hidden_size}});
        t.push_back({p + "self_attn.q_proj.weight", {q_dim, hidden_size}});
        if (attention_bias) t.push_back({p + "self_attn.q_proj.bias", {q_dim}});
        t.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden_size}});
        if (attention_bias) t.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
        t.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden_size}});
        if (attention_bias) t.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
        t.push_back({p + "self_attn.o_proj.weight", {hidden_size, q_dim}});
        if (o_proj_bias) t.push_back({p + "self_attn.o_proj.bias", {hidden_size}});
        if (qk_norm) {
            t.push_back({p + "self_attn.q_norm.weight", {head_dim}});
            t.push_back({p + "self_attn.k_norm.weight", {head_dim}});
        }
        t.push_back({p + "post_attention_layernorm.weight", {hidden_size}});
        t.push_back({p + "mlp.gate_proj.weight", {intermediate_size, hidden_size}});
        if (mlp_bias) t.push_back({p + "mlp.gate_proj.bias", {intermediate_size}});
        t.push_back({p + "mlp.up_proj.weight", {intermediate_size, hidden_size}});
        if (mlp_bias) t.push_back({p + "mlp.up_proj.bias", {intermediate_size}});
        t.push_back({p + "mlp.down_proj.weight", {hidden_size, intermediate_size}});
        if (mlp_bias) t.push_back({p + "mlp.down_proj.bias", {hidden_size}});
    }
    t.push_back({"model.norm.weight", {hidden_size}});
    if (!tie_word_embeddings) t.push_back({"lm_head.weight", {vocab_size, hidden_size}});
    return t;
}

int64_t ModelConfig::parameter_count() const {
    int64_t total = 0;
    for (const auto& [name, shape] : expected_tensors()) {
        int64_t n = 1;
        for (int64_t d : shape)
            if (__builtin_mul_overflow(n, d, &n))
                throw Error("tensor " + name + " has more than 2^63 elements");
        if (__builtin_add_overflow(total, n, &total)) throw Error("the parameter count overflows int64");
    }
    return total;
}

int64_t ModelConfig::kv_bytes_per_token(int64_t bytes_per_element) const {
    int64_t n = 2 * bytes_per_element;
    for (int64_t f : {n_layer, n_kv_head, head_dim})
        if (__builtin_mul_overflow(n, f, &n)) throw Error("the KV bytes per token overflow int64");
    return n;
}

}  // namespace varrate

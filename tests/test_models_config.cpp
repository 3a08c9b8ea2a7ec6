// config.json / generation_config.json parsing for Llama, Mistral, Qwen2 and Qwen3 checkpoints, the tensor
// list derived from it, and the clear errors for bad configs. Also device/dtype option parsing.
#include "tests/test_support.h"

#include <fstream>

#include "base/error.h"
#include "base/file_io.h"
#include "models/device.h"
#include "models/model_config.h"

using varrate::ModelConfig;
using json = nlohmann::json;

namespace {

// The published config.json of meta-llama/Llama-3.2-1B.
json llama32_1b() {
    return json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
      "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
      "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
      "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})");
}

// Qwen/Qwen2.5-0.5B-Instruct (tied, q/k/v biases, sliding window configured but disabled).
json qwen25_05b() {
    return json::parse(R"({
      "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
      "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
      "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
      "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936})");
}

// mistralai/Mistral-7B-v0.1.
json mistral_7b() {
    return json::parse(R"({
      "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
      "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
      "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "vocab_size": 32000})");
}

// Qwen/Qwen3-0.6B (tied, per-head q/k norms, head_dim 128 with hidden_size 1024 over 16 heads).
json qwen3_06b() {
    return json::parse(R"({
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
      "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

json tiny_llama() {
    return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
      "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
      "vocab_size": 512, "max_position_embeddings": 512})");
}

std::vector<int64_t> shape_of(const ModelConfig& c, const std::string& name) {
    for (const auto& [n, s] : c.expected_tensors())
        if (n == name) return s;
    return {};
}

bool names_tensor(const ModelConfig& c, const std::string& name) {
    for (const auto& [n, s] : c.expected_tensors())
        if (n == name) return true;
    return false;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

}  // namespace

class TestModelConfig : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void llama32_with_llama3_rope() {
        const ModelConfig c = ModelConfig::from_json(llama32_1b(), "config.json");
        QCOMPARE(c.architecture, std::string("LlamaForCausalLM"));
        QCOMPARE(c.model_type, std::string("llama"));
        QCOMPARE(c.hidden_size, int64_t(2048));
        QCOMPARE(c.n_layer, int64_t(16));
        QCOMPARE(c.n_head, int64_t(32));
        QCOMPARE(c.n_kv_head, int64_t(8));
        QCOMPARE(c.head_dim, int64_t(64));
        QCOMPARE(c.vocab_size, int64_t(128256));
        QCOMPARE(c.rms_norm_eps, 1e-5);
        QCOMPARE(c.rope_theta, 500000.0);
        QVERIFY(c.rope_scaling.type == varrate::RopeScalingType::Llama3);
        QCOMPARE(c.rope_scaling.factor, 32.0);
        QCOMPARE(c.rope_scaling.low_freq_factor, 1.0);
        QCOMPARE(c.rope_scaling.high_freq_factor, 4.0);
        QCOMPARE(c.rope_scaling.original_max_position_embeddings, int64_t(8192));
        QVERIFY(c.tie_word_embeddings);
        QVERIFY(!c.attention_bias && !c.o_proj_bias && !c.mlp_bias);
        QCOMPARE(*c.bos_token_id, int64_t(128000));
        QCOMPARE(c.eos_token_ids, std::vector<int64_t>({128001}));
        QVERIFY(!c.sliding_window);
        QCOMPARE(c.torch_dtype, std::string("bfloat16"));
        // Published size of Llama-3.2-1B; tied, so no lm_head.weight.
        QCOMPARE(c.parameter_count(), int64_t(1235814400));
        QCOMPARE(c.expected_tensors().size(), size_t(1 + 16 * 9 + 1));
        QVERIFY(!names_tensor(c, "lm_head.weight"));
        QCOMPARE(shape_of(c, "model.layers.15.self_attn.k_proj.weight"), std::vector<int64_t>({512, 2048}));
        QCOMPARE(shape_of(c, "model.layers.0.mlp.down_proj.weight"), std::vector<int64_t>({2048, 8192}));
        QCOMPARE(c.kv_bytes_per_token(2), int64_t(2 * 16 * 8 * 64 * 2));  // 32 KiB per token in bf16
        QCOMPARE(c.kv_bytes_per_token(4), int64_t(65536));
    }

    void eos_list_and_rope_type_key() {
        json j = llama32_1b();
        j["eos_token_id"] = {128001, 128008, 128009};
        j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};  // older key name
        const ModelConfig c = ModelConfig::from_json(j, "config.json");
        QCOMPARE(c.eos_token_ids, std::vector<int64_t>({128001, 128008, 128009}));
        QVERIFY(c.rope_scaling.type == varrate::RopeScalingType::Linear);
        QCOMPARE(c.rope_scaling.factor, 4.0);
        j["rope_scaling"] = {{"rope_type", "default"}};
        QVERIFY(ModelConfig::from_json(j, "config.json").rope_scaling.type == varrate::RopeScalingType::None);
        j["eos_token_id"] = nullptr;
        j["bos_token_id"] = nullptr;
        const ModelConfig n = ModelConfig::from_json(j, "config.json");
        QVERIFY(n.eos_token_ids.empty());
        QVERIFY(!n.bos_token_id);
    }

    void qwen2_biases_and_disabled_sliding_window() {
        const ModelConfig c = ModelConfig::from_json(qwen25_05b(), "config.json");
        QCOMPARE(c.model_type, std::string("qwen2"));
        QCOMPARE(c.head_dim, int64_t(64));
        QVERIFY(c.attention_bias);
        QVERIFY(!c.o_proj_bias);
        QVERIFY(!c.sliding_window);  // use_sliding_window: false
        QCOMPARE(shape_of(c, "model.layers.3.self_attn.q_proj.bias"), std::vector<int64_t>({896}));
        QCOMPARE(shape_of(c, "model.layers.3.self_attn.k_proj.bias"), std::vector<int64_t>({128}));
        QCOMPARE(shape_of(c, "model.layers.3.self_attn.v_proj.bias"), std::vector<int64_t>({128}));
        QVERIFY(!names_tensor(c, "model.layers.3.self_attn.o_proj.bias"));
        QCOMPARE(c.expected_tensors().size(), size_t(1 + 24 * 12 + 1));
        QCOMPARE(c.parameter_count(), int64_t(494032768));  // Qwen2.5-0.5B's published count

        json j = qwen25_05b();
        j["use_sliding_window"] = true;
        QCOMPARE(*ModelConfig::from_json(j, "config.json").sliding_window, int64_t(32768));
    }

    void qwen3_qk_norm_head_dim_and_biases() {
        const ModelConfig c = ModelConfig::from_json(qwen3_06b(), "config.json");
        QCOMPARE(c.architecture, std::string("Qwen3ForCausalLM"));
        QCOMPARE(c.model_type, std::string("qwen3"));
        QVERIFY(c.qk_norm);
        QCOMPARE(c.head_dim, int64_t(128));  // not hidden_size / heads = 64
        QVERIFY(!c.attention_bias && !c.o_proj_bias && !c.mlp_bias);
        QVERIFY(c.tie_word_embeddings);
        QVERIFY(!c.sliding_window);
        QCOMPARE(shape_of(c, "model.layers.5.self_attn.q_proj.weight"), std::vector<int64_t>({2048, 1024}));
        QCOMPARE(shape_of(c, "model.layers.5.self_attn.o_proj.weight"), std::vector<int64_t>({1024, 2048}));
        QCOMPARE(shape_of(c, "model.layers.5.self_attn.q_norm.weight"), std::vector<int64_t>({128}));
        QCOMPARE(shape_of(c, "model.layers.5.self_attn.k_norm.weight"), std::vector<int64_t>({128}));
        QVERIFY(!names_tensor(c, "lm_head.weight"));
        QCOMPARE(c.expected_tensors().size(), size_t(1 + 28 * 11 + 1));
        QCOMPARE(c.parameter_count(), int64_t(596049920));  // transformers' count for Qwen3-0.6B
        QCOMPARE(c.kv_bytes_per_token(2), int64_t(2 * 28 * 8 * 128 * 2));

        json j = qwen3_06b();
        j.erase("head_dim");  // Qwen3Config's default is 128, not hidden_size / heads
        j["hidden_size"] = 512;
        QCOMPARE(ModelConfig::from_json(j, "config.json").head_dim, int64_t(128));
        j = qwen3_06b();
        j["attention_bias"] = true;  // q/k/v and o_proj, as in Qwen3Attention
        const ModelConfig b = ModelConfig::from_json(j, "config.json");
        QVERIFY(b.attention_bias && b.o_proj_bias && !b.mlp_bias);
        QCOMPARE(shape_of(b, "model.layers.0.self_attn.o_proj.bias"), std::vector<int64_t>({1024}));
        j = qwen3_06b();
        j.erase("architectures");  // model_type alone
        QCOMPARE(ModelConfig::from_json(j, "config.json").architecture, std::string("Qwen3ForCausalLM"));
    }

    // transformers (Qwen2 and Qwen3): with use_sliding_window the window applies from max_window_layers on;
    // sliding_window defaults to 4096 when absent, and null means none.
    void qwen_sliding_window_layers() {
        for (json j : {qwen3_06b(), qwen25_05b()}) {
            j["use_sliding_window"] = true;
            j["sliding_window"] = 256;
            j["max_window_layers"] = 20;
            const ModelConfig c = ModelConfig::from_json(j, "config.json");
            QCOMPARE(*c.sliding_window, int64_t(256));
            QCOMPARE(c.first_sliding_layer, int64_t(20));
            QCOMPARE(c.layer_window(19), int64_t(0));
            QCOMPARE(c.layer_window(20), int64_t(256));
            const ModelConfig r = ModelConfig::from_json(c.to_json(), "round.json");
            QCOMPARE(r.first_sliding_layer, int64_t(20));
            QCOMPARE(r.layer_window(20), int64_t(256));
            j.erase("max_window_layers");
            QCOMPARE(ModelConfig::from_json(j, "config.json").first_sliding_layer, int64_t(28));
            j.erase("sliding_window");
            QCOMPARE(*ModelConfig::from_json(j, "config.json").sliding_window, int64_t(4096));
            j["sliding_window"] = nullptr;
            QVERIFY(!ModelConfig::from_json(j, "config.json").sliding_window);
            j["use_sliding_window"] = false;
            j["sliding_window"] = 256;
            QCOMPARE(ModelConfig::from_json(j, "config.json").layer_window(27), int64_t(0));
        }
        const ModelConfig m = ModelConfig::from_json(mistral_7b(), "config.json");
        QCOMPARE(m.layer_window(0), int64_t(4096));  // Mistral: every layer
    }

    void mistral_sliding_window_and_default_head_dim() {
        const ModelConfig c = ModelConfig::from_json(mistral_7b(), "config.json");
        QCOMPARE(c.architecture, std::string("MistralForCausalLM"));
        QCOMPARE(c.head_dim, int64_t(128));
        QCOMPARE(*c.sliding_window, int64_t(4096));
        QVERIFY(!c.attention_bias && !c.tie_word_embeddings);
        QCOMPARE(shape_of(c, "lm_head.weight"), std::vector<int64_t>({32000, 4096}));
        QCOMPARE(c.parameter_count(), int64_t(7241732096));
        json j = mistral_7b();
        j["sliding_window"] = nullptr;  // Mistral v0.2+ has none
        QVERIFY(!ModelConfig::from_json(j, "config.json").sliding_window);
    }

    void explicit_head_dim_and_llama_biases() {
        json j = tiny_llama();
        j["head_dim"] = 16;  // q has heads*head_dim = 128 rows, not hidden_size
        j["attention_bias"] = true;
        j["mlp_bias"] = true;
        j.erase("num_key_value_heads");  // defaults to num_attention_heads
        const ModelConfig c = ModelConfig::from_json(j, "config.json");
        QCOMPARE(c.head_dim, int64_t(16));
        QCOMPARE(c.n_kv_head, int64_t(8));
        QVERIFY(c.attention_bias && c.o_proj_bias && c.mlp_bias);
        QVERIFY(!c.tie_word_embeddings);
        QCOMPARE(shape_of(c, "model.layers.1.self_attn.q_proj.weight"), std::vector<int64_t>({128, 64}));
        QCOMPARE(shape_of(c, "model.layers.1.self_attn.o_proj.weight"), std::vector<int64_t>({64, 128}));
        QCOMPARE(shape_of(c, "model.layers.1.self_attn.o_proj.bias"), std::vector<int64_t>({64}));
        QCOMPARE(shape_of(c, "model.layers.1.mlp.down_proj.bias"), std::vector<int64_t>({64}));
        QCOMPARE(shape_of(c, "lm_head.weight"), std::vector<int64_t>({512, 64}));
        QCOMPARE(c.kv_bytes_per_token(4), int64_t(2 * 2 * 8 * 16 * 4));
    }

    void to_json_round_trips() {
        for (const json& src : {llama32_1b(), qwen25_05b(), qwen3_06b(), mistral_7b(), tiny_llama()}) {
            const ModelConfig a = ModelConfig::from_json(src, "a.json");
            const ModelConfig b = ModelConfig::from_json(a.to_json(), "b.json");
            QCOMPARE(b.to_json().dump(), a.to_json().dump());
            QCOMPARE(b.expected_tensors(), a.expected_tensors());
            QCOMPARE(b.sliding_window, a.sliding_window);
            QCOMPARE(b.eos_token_ids, a.eos_token_ids);
            QCOMPARE(b.rope_scaling.factor, a.rope_scaling.factor);
            QCOMPARE(b.head_dim, a.head_dim);
            QCOMPARE(b.qk_norm, a.qk_norm);
        }
    }

    void generation_config_overrides_ids() {
        const auto dir = varrate::test::temp_dir("cfg-gen");
        write_text(dir / "config.json", llama32_1b().dump());
        write_text(
            dir / "generation_config.json",
            R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": true})");
        const ModelConfig c = ModelConfig::load(dir);
        QCOMPARE(c.eos_token_ids, std::vector<int64_t>({128001, 128008, 128009}));
        QCOMPARE(*c.bos_token_id, int64_t(128000));
        write_text(dir / "generation_config.json", R"({"eos_token_id": 7})");
        const ModelConfig d = ModelConfig::load(dir);
        QCOMPARE(d.eos_token_ids, std::vector<int64_t>({7}));
        QCOMPARE(*d.bos_token_id, int64_t(128000));  // absent there: config.json's value stays
        std::filesystem::remove_all(dir);
    }

    void stories260k_fixture() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const ModelConfig c = ModelConfig::load(dir);
        QCOMPARE(c.hidden_size, int64_t(64));
        QCOMPARE(c.intermediate_size, int64_t(172));
        QCOMPARE(c.n_layer, int64_t(5));
        QCOMPARE(c.n_kv_head, int64_t(4));
        QCOMPARE(c.head_dim, int64_t(8));
        QCOMPARE(c.rms_norm_eps, 1e-5);
        QVERIFY(c.tie_word_embeddings);
        QCOMPARE(c.expected_tensors().size(), size_t(47));
        QCOMPARE(*c.bos_token_id, int64_t(1));
        QCOMPARE(c.eos_token_ids, std::vector<int64_t>({2}));
    }

    void shipped_example_configs() {
        const auto dir = varrate::test::source_dir() / "resources" / "configs";
        const std::vector<std::pair<std::string, int64_t>> published = {
            {"llama-3.2-1b.json", 1235814400}, {"llama-3.1-8b.json", 8030261248},
            {"qwen2.5-7b.json", 7615616512},   {"mistral-7b.json", 7241732096},
            {"smollm2-135m.json", 134515008},  {"qwen3-0.6b.json", 596049920},
        };
        for (const auto& [file, params] : published) {
            const auto path = dir / file;
            const ModelConfig c = ModelConfig::from_json(varrate::read_json_file(path), path.string());
            QVERIFY2(c.parameter_count() == params, file.c_str());
        }
    }

    void malformed_json() {
        const auto dir = varrate::test::temp_dir("cfg-bad");
        write_text(dir / "config.json", R"({"hidden_size": 64,, })");
        EXPECT_ERROR(ModelConfig::load(dir), "config.json", "invalid JSON");
        EXPECT_ERROR(ModelConfig::load(dir / "nope"), "nope", "not a directory");
        std::filesystem::remove(dir / "config.json");
        EXPECT_ERROR(ModelConfig::load(dir), dir.string(), "no config.json");
        write_text(dir / "config.json", tiny_llama().dump());
        write_text(dir / "generation_config.json", R"({"eos_token_id": "two"})");
        EXPECT_ERROR(ModelConfig::load(dir), "generation_config.json", "'eos_token_id'");
        std::filesystem::remove_all(dir);
    }

    void unknown_rope_type() {
        json j = llama32_1b();
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "unsupported rope_scaling type 'yarn'",
                     "/m/config.json");
        j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "'rope_scaling.low_freq_factor' is missing",
                     "/m/config.json");
    }

    void missing_or_ill_typed_field() {
        json j = tiny_llama();
        j.erase("hidden_size");
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "/m/config.json",
                     "required field 'hidden_size' is missing");
        j = tiny_llama();
        j["num_hidden_layers"] = "2";
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "/m/config.json",
                     "field 'num_hidden_layers' must be an integer (got string)");
        j = tiny_llama();
        j["tie_word_embeddings"] = 1;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json",
                     "'tie_word_embeddings' must be true or false");
        j = tiny_llama();
        j["intermediate_size"] = 0;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json",
                     "'intermediate_size' must be positive (got 0)");
        EXPECT_ERROR(ModelConfig::from_json(json::array(), "c.json"), "c.json", "expected a JSON object");
    }

    void heads_not_divisible() {
        json j = tiny_llama();
        j["num_key_value_heads"] = 3;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json",
                     "num_attention_heads (8) is not divisible by num_key_value_heads (3)");
        j = tiny_llama();
        j["num_attention_heads"] = 6;
        j["num_key_value_heads"] = 6;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json",
                     "hidden_size (64) is not divisible by num_attention_heads (6)");
        j["head_dim"] = 16;  // explicit head_dim lifts the divisibility requirement
        QCOMPARE(ModelConfig::from_json(j, "c.json").head_dim, int64_t(16));
    }

    // Found by fuzzing (tests/fuzz/corpus/model_config/regress-*): sizes whose counts overflow int64.
    void absurd_sizes() {
        json j = tiny_llama();
        j["vocab_size"] = int64_t(512009393893309371);
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json", "the sizes are too large");
        j = tiny_llama();
        j["num_hidden_layers"] = int64_t(1) << 40;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json",
                     "num_hidden_layers (1099511627776) is absurd");
        j = tiny_llama();
        j["head_dim"] = int64_t(1) << 61;
        EXPECT_ERROR(ModelConfig::from_json(j, "c.json"), "c.json", "the sizes are too large");
    }

    void unknown_architecture() {
        json j = tiny_llama();
        j["architectures"] = {"GPT2LMHeadModel"};
        j["model_type"] = "gpt2";
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "/m/config.json",
                     "unsupported architecture 'GPT2LMHeadModel'");
        j.erase("architectures");
        j.erase("model_type");
        EXPECT_ERROR(ModelConfig::from_json(j, "/m/config.json"), "/m/config.json",
                     "cannot tell the model architecture");
        j["model_type"] = "qwen2";  // architecture inferred from model_type when "architectures" is absent
        QCOMPARE(ModelConfig::from_json(j, "c.json").architecture, std::string("Qwen2ForCausalLM"));
    }

    void device_and_dtype_options() {
        QVERIFY(varrate::parse_device("cpu").is_cpu());
        QVERIFY(varrate::parse_device(" CPU ").is_cpu());
        QCOMPARE(varrate::parse_dtype("bf16", c10::Device(c10::kCPU)), c10::kBFloat16);
        QCOMPARE(varrate::parse_dtype("float32", c10::Device(c10::kCPU)), c10::kFloat);
        QCOMPARE(varrate::parse_dtype("fp16", c10::Device(c10::kCUDA, 0)), c10::kHalf);
        EXPECT_ERROR(varrate::parse_dtype("fp16", c10::Device(c10::kCPU)), "fp16", "not supported on CPU");
        EXPECT_ERROR(varrate::parse_dtype("int8", c10::Device(c10::kCPU)), "unknown dtype 'int8'", "fp32");
        // "auto": bf16 on CUDA and on a CPU with bf16 matmul (the detection overridden both ways), fp32 on
        // other CPUs; each choice says why.
        qputenv("VARRATE_CPU_BF16", "1");
        QCOMPARE(varrate::parse_dtype("auto", c10::Device(c10::kCPU)), c10::kBFloat16);
        QCOMPARE(varrate::choose_dtype("auto", c10::Device(c10::kCPU)).reason,
                 std::string("bf16 (auto: VARRATE_CPU_BF16=1)"));
        QCOMPARE(varrate::parse_dtype("auto", c10::Device(c10::kCUDA, 0)), c10::kBFloat16);
        QCOMPARE(varrate::choose_dtype("auto", c10::Device(c10::kCUDA, 0)).reason,
                 std::string("bf16 (auto: cuda:0)"));
        QCOMPARE(varrate::choose_dtype("bf16", c10::Device(c10::kCPU)).reason,
                 std::string("bf16 (--dtype bf16)"));
        qputenv("VARRATE_CPU_BF16", "0");
        QCOMPARE(varrate::parse_dtype("AUTO", c10::Device(c10::kCPU)), c10::kFloat);
        QCOMPARE(varrate::choose_dtype("auto", c10::Device(c10::kCPU)).reason,
                 std::string("fp32 (auto: VARRATE_CPU_BF16=0)"));
        QVERIFY(varrate::choose_dtype("bf16", c10::Device(c10::kCPU)).reason.find("emulated") !=
                std::string::npos);
        qunsetenv("VARRATE_CPU_BF16");
        const varrate::DtypeChoice detected = varrate::choose_dtype("auto", c10::Device(c10::kCPU));
        QCOMPARE(detected.dtype, varrate::cpu_has_bf16_matmul() ? c10::kBFloat16 : c10::kFloat);
        QVERIFY2(detected.reason.find("this CPU") != std::string::npos, detected.reason.c_str());
        qputenv("VARRATE_CPU_BF16", "0");
        EXPECT_ERROR(varrate::parse_device("tpu"), "unknown device 'tpu'", "cuda:N");
        EXPECT_ERROR(varrate::parse_device("cuda:x"), "unknown device 'cuda:x'", "cuda:N");
        if (!varrate::cuda_available()) {
            EXPECT_ERROR(varrate::parse_device("cuda"), "'cuda'", "CUDA is not available");
        } else {
            QVERIFY(varrate::parse_device("cuda").is_cuda());
            EXPECT_ERROR(varrate::parse_device("cuda:999"), "cuda:999", "CUDA device(s) are visible");
        }
        QCOMPARE(varrate::dtype_name(c10::kBFloat16), std::string("bf16"));
        QCOMPARE(varrate::dtype_name(c10::kFloat), std::string("fp32"));
        QCOMPARE(varrate::dtype_name(c10::kHalf), std::string("fp16"));
        QCOMPARE(varrate::configure_threads(1), 1);
        QVERIFY(varrate::configure_threads(0) >= 1);
        EXPECT_ERROR(varrate::configure_threads(-2), "thread count", "-2");
    }
};

QTEST_GUILESS_MAIN(TestModelConfig)
#include "test_models_config.moc"

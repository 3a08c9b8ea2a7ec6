// generation_config.json beside a valid config.json (ModelConfig::load reads both; the BOS/EOS ids of the
// generation config win).
#include "models/model_config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool config_written = [] {
        varrate::fuzz::write_input("config.json", R"({"architectures": ["LlamaForCausalLM"],
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512,
            "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2})");
        return true;
    }();
    (void)config_written;
    return varrate::fuzz::run([&] {
        varrate::fuzz::write_input("generation_config.json", data, size);
        (void)varrate::ModelConfig::load(varrate::fuzz::scratch_dir());
    });
}

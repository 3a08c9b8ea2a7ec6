// config.json: every field the runtime needs, validated, then the quantities derived from it (parameter
// count, KV bytes, expected tensors, per-layer windows) and the round trip through to_json.
#include "models/model_config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto j = varrate::fuzz::parse_json(data, size);
    if (!j) return 0;
    return varrate::fuzz::run([&] {
        const auto cfg = varrate::ModelConfig::from_json(*j, "config.json");
        (void)cfg.parameter_count();
        (void)cfg.kv_bytes_per_token(2);
        (void)cfg.expected_tensors();
        for (int64_t l = 0; l < cfg.n_layer && l < 64; ++l) (void)cfg.layer_window(l);
        (void)varrate::ModelConfig::from_json(cfg.to_json(), "config.json (written back)");
    });
}

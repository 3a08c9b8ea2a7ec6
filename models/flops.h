#pragma once
// Floating-point operation counts of a forward pass, for throughput figures (multiply-add = 2 FLOPs).
#include <cstdint>

#include "models/model_config.h"

namespace varrate {

struct PrefillFlops {
    double linear = 0;     // q/k/v/o, gate/up/down projections, and the lm_head on the last position
    double attention = 0;  // QK^T and AV over the causal triangle
    double total() const { return linear + attention; }
};

// A prefill of n tokens that computes logits for the last position only (what LlamaModel::forward does).
PrefillFlops prefill_flops(const ModelConfig& cfg, int64_t n);

}  // namespace varrate

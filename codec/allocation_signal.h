#pragma once
// What VarRate's ranks are water-filled by: the paper's window salience, or another per-token signal for
// the ablations (paper Table 4) and the query-agnostic signals that look beyond the observation window.
// One function maps a signal and a layer's capture to a raw salience [L]; the codec normalises it over the
// coded tokens as it does the window salience.
#include <cstdint>
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

#include "codec/method.h"

namespace varrate {

enum class SalienceSignal {
    Window,    // the paper's: observation-window attention, mean over heads, pooled (eq. 4)
    Constant,  // every token alike (flat)
    Random,    // i.i.d. uniform per token (seeded per layer)
    Shuffle,  // the window salience, permuted over positions (seeded per layer): its distribution, no meaning
    Position,   // recency: t / L
    Question,   // oracle: the actual question's attention over the context (mean over its queries and heads),
                // pooled as the window salience; needs LayerCapture::question_attention
    Repeat,     // KVzip's context-reconstruction scores, max over KV heads; needs LayerCapture::repeat_scores
    Expected,   // Expected Attention's scores (statistics of future queries), mean over KV heads
    RareFloor,  // the window salience, with every token whose id is rare in the context (at most
                // kRareMaxCount occurrences) raised to at least the kRareQuantile quantile of the layer's
                // window salience: a rank floor for digits, names and other one-off ids, whatever the window
                // looked at; needs LayerCapture::token_ids
    Scorer,     // another method's per-token scores (varrate@<method>): the method's TokenSalience
};

// A registered method's per-token scores as a raw salience [L] fp32 (on the capture's device) of a layer:
// what varrate@<method> water-fills ranks by (codec/registry.h makes the entries).
using TokenSalience = std::function<at::Tensor(const LayerCapture&, const CodecSettings&)>;

// The rank floor of SalienceSignal::RareFloor: an id is rare when it occurs at most this many times among the
// context's ids, and a rare token's salience is at least this quantile of the layer's window salience.
inline constexpr int64_t kRareMaxCount = 1;
inline constexpr double kRareQuantile = 0.9;

// [L] bool: whether each position's id occurs at most max_count times in `ids` ([L] int64, any device).
at::Tensor rare_token_mask(const at::Tensor& ids, int64_t max_count);

// The raw salience of every token of the layer: [L] fp32 on the capture's device. Throws Error naming what
// is missing when the capture lacks what the signal reads.
at::Tensor allocation_salience(SalienceSignal signal, const LayerCapture& capture,
                               const CodecSettings& settings);

// What the capture must carry for a signal (for error messages and probes): "" for none.
std::string signal_requirement(SalienceSignal signal);

}  // namespace varrate

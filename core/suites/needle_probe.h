#pragma once
// What a compression left of a needle: where the tokens that spell its value sit in the compressed context,
// and, averaged over layers, their reconstruction error, the share of their K/V kept (rank / D; for SnapKV
// the share of KV heads that keep them) and their salience percentile among the context's tokens. This is
// how a NIAH record tells "the method dropped the needle" from "the model misread a kept needle".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/method.h"

namespace varrate {

class Tokenizer;

// Positions in `context_ids` of the tokens of `needle_sentence` that contain a digit (its value), found by
// matching the sentence's own tokens; nullopt when the sentence's tokens do not occur there (a tokenizer
// that merges across the sentence boundary).
std::optional<std::vector<int64_t>> find_needle_value_tokens(const Tokenizer& tokenizer,
                                                             const std::vector<int64_t>& context_ids,
                                                             const std::string& needle_sentence);

struct NeedleRetention {
    int64_t n_tokens = 0;             // value tokens measured
    double rel_error = 0;             // mean ||z - z^|| / ||z|| (0 exact, 1 evicted)
    double kept_fraction = 0;         // mean rank / D
    double salience_percentile = -1;  // mean share of context tokens with lower salience; < 0: no salience
    std::vector<double> layer_rel_error, layer_kept_fraction, layer_salience_percentile;  // [n_layer]
};

// Over the layers' per-token diagnostics; nullopt without positions or per-token tensors.
std::optional<NeedleRetention> needle_retention(const std::vector<LayerDiagnostics>& layers,
                                                const std::vector<int64_t>& positions);

// Means over NIAH records of their retention objects (to_json's form; null ones are not counted).
struct RetentionTally {
    int64_t n = 0, n_salience = 0;
    double rel_error = 0, kept_fraction = 0, salience_percentile = 0;  // sums
    std::vector<double> layer_kept_fraction;                           // sums per layer
    void add(const nlohmann::json& retention);
    void merge(const RetentionTally& other);
    // Means over the n records (0 / empty without records; the percentile < 0 without salience).
    double mean_rel_error() const;
    double mean_kept_fraction() const;
    double mean_salience_percentile() const;
    std::vector<double> mean_layer_kept_fraction() const;
    // {"records", "rel_error", "kept_fraction", "salience_percentile", "per_layer_kept_fraction"} as means.
    nlohmann::json to_json() const;
};

// {"tokens", "rel_error", "kept_fraction", "salience_percentile" (null when none), "per_layer": {the same
// three as arrays}}.
nlohmann::json to_json(const NeedleRetention& r);

}  // namespace varrate

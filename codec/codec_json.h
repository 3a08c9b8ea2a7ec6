#pragma once
// The one JSON form of the codec's settings, of a layer's diagnostics and of what a basis says of itself.
// Compare and NIAH outputs, session files, benchmarks and a model's varrate-codec.json all read and write
// through these, so every writer has the same fields and every reader the same checks.
#include <string>

#include <nlohmann/json.hpp>

#include "codec/basis.h"
#include "codec/method.h"

namespace varrate {

// Every field of CodecSettings (codec/settings_table.h's rows, by their JSON keys):
// budget, r_min, rank, ..., paper_accounting, precise_timing.
nlohmann::json to_json(const CodecSettings& s);

// Fields present in `j` applied over `base`, each range-checked (budget in (0, 1], integers >= their
// minimum). Unknown fields are an error naming the known ones; names in `ignored` (e.g. "why") are skipped.
// Throws Error "<where>: ...".
CodecSettings codec_settings_from_json(const nlohmann::json& j, const std::string& where,
                                       const CodecSettings& base = {},
                                       const std::vector<std::string>& ignored = {});

// Field names: layer, method, budget_B, sum_ranks, n_exact, n_coded, min_rank, max_rank, mean_rank,
// floor_share, mean_rel_error, stored_bytes, full_bytes, footprint, index_bits (older files: index_bytes),
// set_bits, rank_bits, basis_bytes, n_tokens, dim, timing_ms. per_token adds the per-token vectors (salience,
// salience_norm, rank, exact, rel_error) and SnapKV's per-head mask (kept, kept_shape). NaN and infinities
// are written as null.
nlohmann::json to_json(const LayerDiagnostics& d, bool per_token = false);
// Inverse of to_json (per-token vectors when present; null reads back as NaN). Throws Error "<where>: ...".
LayerDiagnostics layer_diagnostics_from_json(const nlohmann::json& j, const std::string& where);

// A basis's description by field name: model_fingerprint, dim, rank, stride, anchors, window,
// calibration_tokens, self_calibrated (the Python package's form of it).
nlohmann::json to_json(const BasisInfo& info);
// Inverse; absent fields keep BasisInfo's defaults. Throws Error "<where>: ..." for a field of the wrong
// type.
BasisInfo basis_info_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace varrate

#pragma once
// A document's compressed KV cache saved to a file and answered from later (`varrate compress` / `varrate
// ask`): the query-agnostic prefill of the context is compressed once, and any number of questions are then
// decoded from the file without prefilling the document again, with the answers `varrate compare --mode
// query-agnostic` gives (same prompt building, same decoder).
//
// File format (.vrkv, format version 1): a safetensors container.
//   tensors       per layer l, under "layers.<l>.": a dense layer (full; SnapKV, physically shrunk) as "keys"
//                 and "values" [n_kv_head, n, head_dim] post-RoPE at the cache dtype; a compressed store as
//                 its kind's tensors (codec/prefix_io.h). "last_logits" [1, vocab] fp32: the prediction after
//                 the context.
//   __metadata__  "varrate_kv_cache": one JSON object (to_json(CacheFileInfo): format version, model identity
//                 and its hash, weights fingerprint, tokenizer hash, method, codec settings, chat, the
//                 context text and ids, next position, entries per layer, each layer's kind and scalars,
//                 accounted / resident / saved basis bytes); "varrate_kv_cache_checksum": "fnv1a64:<16 hex
//                 digits>" over that JSON text and every tensor's name, dtype, shape and bytes
//                 (cache_file_checksum).
// The file is self-contained: a store's basis rows are saved with it (reported apart from resident bytes).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "base/job.h"
#include "codec/method.h"
#include "core/session.h"
#include "models/kv_cache.h"

namespace varrate {

// The newest format this build writes and reads; a file of a newer one is refused with a message saying so.
// 2: VarRate/flat layers hold their anchor indices and ranks bit-packed (version 1 files, int16, are read and
// packed on load). 3: each coded token's anchor set may be one combination number ("set_bits") and uniform
// ranks are not stored ("rank_bits" 0, "rank_total"); version 2 layers are read as they are.
inline constexpr int64_t kCacheFormatVersion = 3;
inline constexpr const char* kCacheMetadataKey = "varrate_kv_cache";
inline constexpr const char* kCacheChecksumKey = "varrate_kv_cache_checksum";

// What a cache file says about its cache, besides the tensors.
struct CacheFileInfo {
    int64_t format_version = kCacheFormatVersion;
    nlohmann::json model;             // model_identity() of the model it was made with
    std::string model_hash;           // model_identity_hash() of it
    std::string weights_fingerprint;  // Session::fingerprint()
    std::string tokenizer_hash;       // Tokenizer::fingerprint()
    std::string method;
    CodecSettings settings;
    bool chat = false;
    std::string context;                // the document text, as the prompt is built from it
    std::vector<int64_t> context_ids;   // what was prefilled: BOS or chat header, then the context
    int64_t next_position = 0;          // where decoding continues (the original context length)
    std::vector<int64_t> layer_tokens;  // entries per layer (SnapKV keeps fewer than next_position)
    nlohmann::json layers;              // per layer: {"kind": "dense" or a store kind, its scalars}
    // Accounted, as `compare` reports them: stored (basis_bytes included when charged) over full.
    int64_t stored_bytes = 0, full_bytes = 0, basis_bytes = 0;
    // What the cache holds in memory, measured from its tensors as compare reports it: the stores or dense
    // layers, plus a self-calibrated basis when charged (it belongs to this context alone).
    int64_t resident_bytes = 0;
    int64_t saved_shared_bytes = 0;  // basis rows and RoPE frequencies saved with the stores (not resident)
    std::string basis_source;        // a basis file, "self-calibrated", or "" (no basis needed)
    std::string basis_accounting;    // core/compare.h basis_accounting()
    bool self_calibrated = false;
    std::vector<std::string> warnings;  // at compression (positions beyond the model's)

    double footprint_fraction() const;
    double resident_fraction() const;
};

// The one JSON form of CacheFileInfo (the "varrate_kv_cache" metadata), and its reader: every field is
// required; throws Error "<where>: the metadata has no '<field>'" or names the field of the wrong type.
nlohmann::json to_json(const CacheFileInfo& info);
CacheFileInfo cache_file_info_from_json(const nlohmann::json& j, const std::string& where);

// What of a model's configuration decides its KV cache (architecture, widths, layers, heads, RoPE, norms,
// vocabulary, special ids) plus the cache dtype ("cache_dtype"), as a JSON object, and its hash.
nlohmann::json model_identity(const ModelConfig& config, at::ScalarType cache_dtype);
std::string model_identity_hash(const nlohmann::json& identity);

// "fnv1a64:<16 hex>" over `metadata_json` and the tensors in name order (name, dtype, shape, bytes).
std::string cache_file_checksum(const std::string& metadata_json,
                                const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// A compressed context in memory: what a cache file holds.
struct CompressedContext {
    CacheFileInfo info;
    std::vector<LayerKV> layers;                             // dense layers; empty where a store stands
    std::vector<std::shared_ptr<const LayerPrefix>> stores;  // per layer, null for a dense one
    at::Tensor last_logits;                                  // [1, vocab] fp32 CPU

    // The cache to decode from, at next_position (stores shared, not copied).
    KVCache cache(const LlamaModel& model) const;
};

struct CompressContextRequest {
    std::string context;
    std::string method;
    CodecSettings settings;
    bool chat = false;
    int64_t max_new_tokens = 32;  // of the answers to come: only for the positions warning
};

// The query-agnostic prefill of the context (chat header + context) compressed by one method, as `compare
// --mode query-agnostic` does it (the same plan, basis, capture and materialisation). Throws what compare
// throws (InfeasibleBudget for a budget the context cannot meet).
CompressedContext compress_context(const Session& session, const CompressContextRequest& req,
                                   const JobControl& job = {});

// Writes `ctx` atomically; returns its info as written (layers' kinds, saved basis bytes).
CacheFileInfo write_cache_file(const std::filesystem::path& path, const CompressedContext& ctx);

// The metadata alone, with the format version checked (e.g. to load the model at the cache's dtype first).
CacheFileInfo read_cache_file_info(const std::filesystem::path& path);

// Reads a cache file for `session`'s model: checks, in this order, that it is a readable safetensors file
// (not truncated), has the cache metadata, a format version this build reads, an intact checksum, every
// metadata field, the same model identity and weights, the same tokenizer, and tensors consistent with the
// metadata; each failure is one Error naming the file and what does not match. Everything is copied onto the
// model's device before returning; nothing is returned half-loaded.
CompressedContext read_cache_file(const std::filesystem::path& path, const Session& session);

// The greedy answer ids to each question (with its answer prefix, when `answer_prefixes` is not empty) from
// the compressed cache: the question part is decoded after the context at positions from next_position on
// (decode_answer, as compare's query-agnostic mode), and the cache is the compressed one for every question.
std::vector<std::vector<int64_t>> answer_from_cache(const Session& session, const CompressedContext& ctx,
                                                    const std::vector<std::string>& questions,
                                                    const std::vector<std::string>& answer_prefixes,
                                                    int64_t max_new_tokens, const JobControl& job = {});

}  // namespace varrate

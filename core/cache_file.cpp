#include "core/cache_file.h"

#include <algorithm>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/hash.h"
#include "codec/codec_json.h"
#include "codec/prefix_io.h"
#include "codec/registry.h"
#include "core/capture.h"
#include "core/compare.h"
#include "core/compare_internal.h"
#include "core/exploration.h"
#include "core/prompt.h"
#include "models/device.h"
#include "models/safetensors.h"

namespace varrate {

namespace {

constexpr const char* kDense = "dense";

std::string hex16(uint64_t h) {
    return fmt::format("{:016x}", h);
}

int64_t bytes_of(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

std::string layer_prefix(size_t l) {
    return fmt::format("layers.{}.", l);
}

// A required metadata field: absent, null or of another type is an error naming it.
template <typename T>
T need(const nlohmann::json& j, const char* key, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) throw Error(fmt::format("{}: the metadata has no '{}'", where, key));
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(fmt::format("{}: the metadata field '{}' has the wrong type ({})", where, key,
                                it->dump().substr(0, 80)));
    }
}

const nlohmann::json& need_object(const nlohmann::json& j, const char* key, const std::string& where) {
    if (!j.contains(key) || !j[key].is_object())
        throw Error(fmt::format("{}: the metadata has no '{}' object", where, key));
    return j[key];
}

// "<path>: <what>" from the safetensors reader, without the path (the caller names the file once).
std::string without_path(const std::string& message, const std::filesystem::path& path) {
    const std::string p = path.string() + ": ";
    return message.rfind(p, 0) == 0 ? message.substr(p.size()) : message;
}

// The file opened as a safetensors archive, its metadata parsed and its format version checked.
struct OpenedFile {
    SafetensorsArchive archive;
    std::string metadata_text;
    nlohmann::json metadata;
};

OpenedFile open_cache_file(const std::filesystem::path& path, const std::string& where) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw Error(where + ": file not found");
    if (!std::filesystem::is_regular_file(path, ec)) throw Error(where + ": not a regular file");
    OpenedFile f;
    try {
        f.archive = SafetensorsArchive::open(path);
    } catch (const Error& e) {
        throw Error(where + " is not a readable cache file: " + without_path(e.what(), path));
    }
    const auto& meta = f.archive.metadata();
    const auto it = meta.find(kCacheMetadataKey);
    if (it == meta.end())
        throw Error(fmt::format(
            "{} is not a varrate KV cache: its safetensors metadata has no '{}' (caches are written by "
            "varrate compress)",
            where, kCacheMetadataKey));
    f.metadata_text = it->second;
    try {
        f.metadata = nlohmann::json::parse(f.metadata_text);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
        throw Error(
            fmt::format("{}: the '{}' metadata is not valid JSON ({})", where, kCacheMetadataKey, e.what()));
    }
    if (!f.metadata.is_object())
        throw Error(fmt::format("{}: the '{}' metadata is not a JSON object", where, kCacheMetadataKey));
    // Before anything else: a newer format may lay out (and checksum) everything differently.
    const int64_t version = need<int64_t>(f.metadata, "format_version", where);
    if (version > kCacheFormatVersion)
        throw Error(fmt::format("{} was written by format version {}; this build reads up to {}", where,
                                version, kCacheFormatVersion));
    if (version < 1) throw Error(fmt::format("{}: format version {} is not a valid version", where, version));
    return f;
}

// The first field in which two model identities differ, as "<field> is A in the file, B in this model".
std::string identity_difference(const nlohmann::json& file, const nlohmann::json& here) {
    std::set<std::string> keys;
    for (const auto& [k, v] : file.items()) keys.insert(k);
    for (const auto& [k, v] : here.items()) keys.insert(k);
    for (const std::string& k : keys) {
        const nlohmann::json a = file.contains(k) ? file[k] : nlohmann::json("(absent)");
        const nlohmann::json b = here.contains(k) ? here[k] : nlohmann::json("(absent)");
        if (a == b) continue;
        std::string text = fmt::format("{} is {} in the file, {} in this model", k, a.dump(), b.dump());
        if (k == "cache_dtype")
            text +=
                fmt::format(" (load the model with --dtype {})", a.is_string() ? a.get<std::string>() : "");
        return text;
    }
    return "";
}

}  // namespace

double CacheFileInfo::footprint_fraction() const {
    return full_bytes > 0 ? static_cast<double>(stored_bytes) / static_cast<double>(full_bytes) : 0.0;
}

double CacheFileInfo::resident_fraction() const {
    return full_bytes > 0 ? static_cast<double>(resident_bytes) / static_cast<double>(full_bytes) : 0.0;
}

nlohmann::json to_json(const CacheFileInfo& info) {
    nlohmann::json j;
    j["format_version"] = info.format_version;
    j["model"] = {{"identity", info.model}, {"hash", info.model_hash}, {"weights", info.weights_fingerprint}};
    j["tokenizer_hash"] = info.tokenizer_hash;
    j["method"] = info.method;
    j["settings"] = to_json(info.settings);
    j["mode"] = "query-agnostic";  // the only mode a cache can be saved in: the questions come later
    j["chat"] = info.chat;
    j["context"] = info.context;
    j["context_ids"] = info.context_ids;
    j["next_position"] = info.next_position;
    j["n_tokens"] = info.layer_tokens;
    j["layers"] = info.layers.is_null() ? nlohmann::json::array() : info.layers;
    j["bytes"] = {{"stored", info.stored_bytes},
                  {"full", info.full_bytes},
                  {"basis_charged", info.basis_bytes},
                  {"resident", info.resident_bytes},
                  {"saved_shared", info.saved_shared_bytes}};
    j["basis"] = {{"source", info.basis_source},
                  {"accounting", info.basis_accounting},
                  {"self_calibrated", info.self_calibrated}};
    j["warnings"] = info.warnings;
    return j;
}

CacheFileInfo cache_file_info_from_json(const nlohmann::json& j, const std::string& where) {
    CacheFileInfo info;
    info.format_version = need<int64_t>(j, "format_version", where);
    const nlohmann::json& model = need_object(j, "model", where);
    info.model = need_object(model, "identity", where + " model");
    info.model_hash = need<std::string>(model, "hash", where + " model");
    info.weights_fingerprint = need<std::string>(model, "weights", where + " model");
    info.tokenizer_hash = need<std::string>(j, "tokenizer_hash", where);
    info.method = need<std::string>(j, "method", where);
    const nlohmann::json& settings = need_object(j, "settings", where);
    // Every setting is written; one missing would otherwise read back as its default without a word.
    const nlohmann::json every_setting = to_json(CodecSettings{});
    for (const auto& [key, value] : every_setting.items())
        if (!settings.contains(key))
            throw Error(fmt::format("{} settings: the metadata has no '{}'", where, key));
    info.settings = codec_settings_from_json(settings, where + " settings");
    if (need<std::string>(j, "mode", where) != "query-agnostic")
        throw Error(where + ": mode must be query-agnostic, got " + j["mode"].dump());
    info.chat = need<bool>(j, "chat", where);
    info.context = need<std::string>(j, "context", where);
    info.context_ids = need<std::vector<int64_t>>(j, "context_ids", where);
    info.next_position = need<int64_t>(j, "next_position", where);
    info.layer_tokens = need<std::vector<int64_t>>(j, "n_tokens", where);
    if (!j.contains("layers") || !j["layers"].is_array())
        throw Error(where + ": the metadata has no 'layers' array");
    info.layers = j["layers"];
    const nlohmann::json& bytes = need_object(j, "bytes", where);
    const std::string wb = where + " bytes";
    info.stored_bytes = need<int64_t>(bytes, "stored", wb);
    info.full_bytes = need<int64_t>(bytes, "full", wb);
    info.basis_bytes = need<int64_t>(bytes, "basis_charged", wb);
    info.resident_bytes = need<int64_t>(bytes, "resident", wb);
    info.saved_shared_bytes = need<int64_t>(bytes, "saved_shared", wb);
    const nlohmann::json& basis = need_object(j, "basis", where);
    info.basis_source = need<std::string>(basis, "source", where + " basis");
    info.basis_accounting = need<std::string>(basis, "accounting", where + " basis");
    info.self_calibrated = need<bool>(basis, "self_calibrated", where + " basis");
    info.warnings = need<std::vector<std::string>>(j, "warnings", where);
    return info;
}

nlohmann::json model_identity(const ModelConfig& config, at::ScalarType cache_dtype) {
    nlohmann::json j = config.to_json();
    // The checkpoint's storage dtype does not decide the cache; the dtype the model runs at does.
    j.erase("torch_dtype");
    j["cache_dtype"] = dtype_name(cache_dtype);
    return j;
}

std::string model_identity_hash(const nlohmann::json& identity) {
    return hex16(fnv1a(identity.dump()));
}

std::string cache_file_checksum(const std::string& metadata_json,
                                const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    std::vector<const std::pair<std::string, at::Tensor>*> order;
    for (const auto& t : tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
    uint64_t h = fnv1a(metadata_json);
    for (const auto* entry : order) {
        const at::Tensor t = entry->second.to(at::kCPU).contiguous();
        const std::string dtype = c10::toString(t.scalar_type());
        const std::vector<int64_t> shape = t.sizes().vec();
        h = fnv1a(h, entry->first.data(),
                  entry->first.size() + 1);  // with the terminator: names are delimited
        h = fnv1a(h, dtype.data(), dtype.size() + 1);
        h = fnv1a(h, shape.data(), shape.size() * sizeof(int64_t));
        if (t.numel() > 0) h = fnv1a(h, t.data_ptr(), static_cast<size_t>(bytes_of(t)));
    }
    return "fnv1a64:" + hex16(h);
}

KVCache CompressedContext::cache(const LlamaModel& model) const {
    return cache_from_layers(model, layers, info.next_position, stores, info.method);
}

CompressedContext compress_context(const Session& s, const CompressContextRequest& r, const JobControl& job) {
    using namespace compare_detail;
    CompareRequest req;
    req.context = r.context;
    req.methods = {r.method};
    req.settings = r.settings;
    req.mode = CompressionMode::QueryAgnostic;
    req.chat = r.chat;
    req.max_new_tokens = r.max_new_tokens;
    // compare's own plan and slot: the same prompt, basis and settings as its query-agnostic run.
    const ComparePlan plan = plan_compare(s, req, job);
    const RunSlot slot = make_slots(req, plan).front();
    const std::vector<int64_t> ids = plan.compressed_ids(req, 0);
    // The attention-output error is a diagnostic of compare's; the cache does not depend on it.
    // The extra pass KVzip's scores need runs here as in compare (the oracle has no question to read).
    CaptureExploration explored(s, ids, req.settings, plan.basis, /*attention_output=*/false, job,
                                probe_request(req, plan, 0));
    ExploredRun run = explored.run(r.method, slot.settings, /*skip_infeasible=*/false, job);

    const int64_t n_layer = s.model().config().n_layer;
    CompressedContext out;
    out.layers = std::move(run.kv);
    out.stores = std::move(run.stores);
    out.stores.resize(static_cast<size_t>(n_layer));
    out.last_logits = explored.capture().last_logits;
    CacheFileInfo& info = out.info;
    for (size_t l = 0; l < out.layers.size(); ++l) {
        if (out.stores[l]) {
            info.layer_tokens.push_back(out.stores[l]->length());
            out.layers[l] = LayerKV{};  // the dense reconstruction is not what the cache holds
        } else {
            info.layer_tokens.push_back(out.layers[l].keys.size(1));
        }
    }
    info.model = model_identity(s.model().config(), s.model().options().dtype);
    info.model_hash = model_identity_hash(info.model);
    info.weights_fingerprint = s.fingerprint();
    info.tokenizer_hash = s.tokenizer().fingerprint();
    info.method = r.method;
    info.settings = slot.settings;
    info.chat = r.chat;
    info.context = r.context;
    info.context_ids = explored.capture().ids;
    info.next_position = explored.capture().next_position;
    MethodRun footprint;
    footprint.layers = std::move(run.layers);
    add_footprint(footprint);
    info.stored_bytes = footprint.stored_bytes;
    info.full_bytes = footprint.full_bytes;
    info.basis_bytes = footprint.basis_bytes;
    info.resident_bytes = run.resident_bytes;
    info.basis_source = method_needs_basis(r.method) ? plan.skeleton.basis_source : "";
    info.basis_accounting = slot.run.basis_accounting;
    info.self_calibrated = slot.run.self_calibrated;
    info.warnings = plan.skeleton.warnings;
    return out;
}

CacheFileInfo write_cache_file(const std::filesystem::path& path, const CompressedContext& ctx) {
    const size_t n_layer = ctx.layers.size();
    if (ctx.stores.size() != n_layer || ctx.info.layer_tokens.size() != n_layer)
        throw Error(fmt::format("{}: {} layers, {} stores, {} token counts", path.string(), n_layer,
                                ctx.stores.size(), ctx.info.layer_tokens.size()));
    CacheFileInfo info = ctx.info;
    info.format_version = kCacheFormatVersion;
    info.layers = nlohmann::json::array();
    info.saved_shared_bytes = 0;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (size_t l = 0; l < n_layer; ++l) {
        const std::string prefix = layer_prefix(l);
        if (ctx.stores[l]) {
            PrefixTensors p = to_tensors(*ctx.stores[l], prefix);
            info.layers.push_back(std::move(p.meta));
            info.saved_shared_bytes += p.shared_bytes;
            for (auto& t : p.tensors) tensors.push_back(std::move(t));
        } else {
            info.layers.push_back({{"kind", kDense}, {"n_tokens", ctx.layers[l].keys.size(1)}});
            tensors.emplace_back(prefix + "keys", ctx.layers[l].keys);
            tensors.emplace_back(prefix + "values", ctx.layers[l].values);
        }
    }
    tensors.emplace_back("last_logits", ctx.last_logits.to(at::kFloat));
    // On the host once: the checksum and the writer read the same bytes.
    for (auto& t : tensors) t.second = t.second.to(at::kCPU).contiguous();
    const std::string text = to_json(info).dump();
    write_safetensors(path, tensors,
                      {{kCacheMetadataKey, text}, {kCacheChecksumKey, cache_file_checksum(text, tensors)}});
    return info;
}

CacheFileInfo read_cache_file_info(const std::filesystem::path& path) {
    const std::string where = "cache file " + path.string();
    const OpenedFile f = open_cache_file(path, where);
    return cache_file_info_from_json(f.metadata, where);
}

CompressedContext read_cache_file(const std::filesystem::path& path, const Session& s) {
    const std::string where = "cache file " + path.string();
    const OpenedFile f = open_cache_file(path, where);
    const SafetensorsArchive& archive = f.archive;

    // Integrity before meaning: an altered byte anywhere in the metadata or the tensors is named as such,
    // not as whatever field or shape it happened to change.
    const auto checksum = archive.metadata().find(kCacheChecksumKey);
    if (checksum == archive.metadata().end())
        throw Error(fmt::format("{}: the metadata has no '{}'", where, kCacheChecksumKey));
    {
        std::vector<std::pair<std::string, at::Tensor>> all;
        for (const std::string& name : archive.names()) all.emplace_back(name, archive.tensor(name));
        const std::string got = cache_file_checksum(f.metadata_text, all);
        if (got != checksum->second)
            throw Error(fmt::format(
                "{} is corrupt: its checksum is {} but its contents hash to {} (the file was altered or "
                "damaged after it was written)",
                where, checksum->second, got));
    }
    CacheFileInfo info = cache_file_info_from_json(f.metadata, where);

    const LlamaModel& model = s.model();
    const ModelConfig& cfg = model.config();
    const at::ScalarType dtype = model.options().dtype;
    const nlohmann::json here = model_identity(cfg, dtype);
    if (info.model_hash != model_identity_hash(here)) {
        std::string diff = identity_difference(info.model, here);
        if (diff.empty()) diff = "the configuration hashes differ";
        throw Error(
            fmt::format("{} was made with a different model: {} ({}; config hash {} in the file, {} here)",
                        where, diff, s.model_dir().string(), info.model_hash, model_identity_hash(here)));
    }
    if (info.weights_fingerprint != s.fingerprint())
        throw Error(fmt::format(
            "{} was made with a different model: the same configuration with other weights (fingerprint {} "
            "in the file, {} for {})",
            where, info.weights_fingerprint, s.fingerprint(), s.model_dir().string()));
    if (info.tokenizer_hash != s.tokenizer().fingerprint())
        throw Error(fmt::format("{} was made with a different tokenizer (hash {} in the file, {} for {})",
                                where, info.tokenizer_hash, s.tokenizer().fingerprint(),
                                (s.model_dir() / "tokenizer.json").string()));
    method_needs_basis(info.method);  // an unknown method name is an error naming the known ones

    // The metadata against itself and the model.
    const size_t n_layer = static_cast<size_t>(cfg.n_layer);
    if (info.layer_tokens.size() != n_layer || info.layers.size() != n_layer)
        throw Error(fmt::format("{}: {} token counts and {} layer records for a model of {} layers", where,
                                info.layer_tokens.size(), info.layers.size(), n_layer));
    if (info.next_position < 1 || static_cast<int64_t>(info.context_ids.size()) != info.next_position)
        throw Error(fmt::format("{}: {} context ids for next position {}", where, info.context_ids.size(),
                                info.next_position));
    for (int64_t id : info.context_ids)
        if (id < 0 || id >= cfg.vocab_size)
            throw Error(
                fmt::format("{}: context id {} is outside the vocabulary ({})", where, id, cfg.vocab_size));

    // Every tensor copied onto the model's device (the cache must not depend on the file's mapping).
    std::set<std::string> used;
    const TensorSource source = [&](const std::string& name) {
        if (!archive.contains(name)) throw Error(fmt::format("{}: tensor '{}' is missing", where, name));
        used.insert(name);
        const at::Tensor t = archive.tensor(name);
        return t.to(t.options().device(model.options().device), /*non_blocking=*/false, /*copy=*/true);
    };
    CompressedContext out;
    out.layers.resize(n_layer);
    out.stores.resize(n_layer);
    const std::vector<int64_t> kv_shape_tail = {cfg.n_kv_head, cfg.head_dim};
    for (size_t l = 0; l < n_layer; ++l) {
        const std::string lw = fmt::format("{} layer {}", where, l);
        const int64_t n = info.layer_tokens[l];
        if (n < 1 || n > info.next_position)
            throw Error(fmt::format("{}: {} entries for a context of {}", lw, n, info.next_position));
        const nlohmann::json& meta = info.layers[l];
        if (!meta.is_object()) throw Error(lw + ": the layer record is not an object");
        const int64_t meta_tokens = need<int64_t>(meta, "n_tokens", lw);
        if (meta_tokens != n)
            throw Error(
                fmt::format("{}: the layer record says {} entries, n_tokens says {}", lw, meta_tokens, n));
        const std::string kind = need<std::string>(meta, "kind", lw);
        const std::string prefix = layer_prefix(l);
        if (kind == kDense) {
            LayerKV kv{source(prefix + "keys"), source(prefix + "values")};
            for (const at::Tensor* t : {&kv.keys, &kv.values}) {
                const std::vector<int64_t> want = {cfg.n_kv_head, n, cfg.head_dim};
                if (t->sizes().vec() != want || t->scalar_type() != dtype)
                    throw Error(fmt::format("{}: {} are {} {}, expected {} [{}]", lw,
                                            t == &kv.keys ? "keys" : "values",
                                            c10::toString(t->scalar_type()), shape_str(*t),
                                            c10::toString(dtype), fmt::join(want, ", ")));
            }
            out.layers[l] = std::move(kv);
            continue;
        }
        out.stores[l] = prefix_from_tensors(meta, prefix, source,
                                            PrefixExpectation{n, cfg.n_kv_head, cfg.head_dim, dtype}, lw);
    }
    at::Tensor logits = source("last_logits");
    if (logits.scalar_type() != at::kFloat || logits.sizes().vec() != std::vector<int64_t>{1, cfg.vocab_size})
        throw Error(fmt::format("{}: last_logits are {} {}, expected Float [1, {}]", where,
                                c10::toString(logits.scalar_type()), shape_str(logits), cfg.vocab_size));
    out.last_logits = logits.to(at::kCPU);
    for (const std::string& name : archive.names())
        if (!used.count(name)) throw Error(fmt::format("{}: unexpected tensor '{}'", where, name));
    out.info = std::move(info);
    return out;
}

std::vector<std::vector<int64_t>> answer_from_cache(const Session& s, const CompressedContext& ctx,
                                                    const std::vector<std::string>& questions,
                                                    const std::vector<std::string>& answer_prefixes,
                                                    int64_t max_new_tokens, const JobControl& job) {
    if (questions.empty()) throw Error("no question to answer");
    if (!answer_prefixes.empty() && answer_prefixes.size() != questions.size())
        throw Error(
            fmt::format("{} answer prefixes for {} questions: give one --answer-prefix per --question",
                        answer_prefixes.size(), questions.size()));
    if (max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
    // Built once, shared by every question: decode_answer reads it and leaves it as it was (the question
    // and answer entries go to a copy per decode), so each question sees the compressed context alone.
    const KVCache cache = ctx.cache(s.model());
    std::vector<std::vector<int64_t>> answers;
    for (size_t qi = 0; qi < questions.size(); ++qi) {
        check_cancel(job);
        job.report("answer", static_cast<int64_t>(qi), static_cast<int64_t>(questions.size()));
        // compare's prompt: the context part is rebuilt too, to check it is what the cache holds.
        const PromptParts parts = build_prompt(s.tokenizer(), ctx.info.context, questions[qi], ctx.info.chat,
                                               answer_prefixes.empty() ? std::string() : answer_prefixes[qi]);
        if (parts.context_ids != ctx.info.context_ids)
            throw Error(fmt::format(
                "the context tokenizes to {} ids now, not the {} the cache was made from (tokenizer or chat "
                "template changed)",
                parts.context_ids.size(), ctx.info.context_ids.size()));
        if (parts.question_ids.empty()) throw Error(fmt::format("question {} is empty", qi + 1));
        answers.push_back(decode_answer(s, cache, ctx.last_logits, parts, CompressionMode::QueryAgnostic,
                                        max_new_tokens, job));
    }
    job.report("done", static_cast<int64_t>(questions.size()), static_cast<int64_t>(questions.size()));
    return answers;
}

}  // namespace varrate

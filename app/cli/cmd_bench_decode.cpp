// varrate bench decode: what each method's cache holds and how fast it decodes, from one prefill capture of
// synthetic ids: accounted bytes (what the budget counts), resident bytes (measured from the cache's tensors:
// VarRate/flat as their compressed stores), attention scratch, the process's resident-memory change while the
// cache is held, the codec time and greedy decoding tokens/s (median of repeats, ratio to full in one run).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/compressed_layer.h"
#include "codec/footprint.h"
#include "codec/quantized_layer.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "core/capture.h"
#include "core/suites/stats.h"
#include "models/generate.h"

namespace varrate::cli {

namespace {

struct BenchDecodeArgs {
    std::string model;
    int64_t tokens = 4096;
    int64_t new_tokens = 32;
    std::string methods = join_method_names();
    CodecSettings settings;
    CodecFlags flags;
    int repeats = 3;
    bool reconstruct = false;
    RuntimeArgs runtime;
    bool json = false;
};

// The process's resident set (VmRSS) in bytes; -1 when /proc cannot be read.
int64_t resident_set_bytes() {
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "VmRSS:") {
            int64_t kb = 0;
            in >> kb;
            return kb * 1024;
        }
        in.ignore(1 << 12, '\n');
    }
    return -1;
}

struct DecodeRow {
    std::string method;
    std::string path = "-";  // stores: "exact" (every coded key rebuilt each step) or "selective"
    int64_t accounted = 0, resident = 0, full = 0, scratch = 0, rss_delta = 0;
    int64_t ranks = 0, padded = 0;  // coefficients stored, and the slots the key rebuild multiplies
    double codec_ms = 0, tokens_per_s = 0;
    double store_attention_ms = -1;  // one decoding step's attention through every layer's store
    bool stored = false;             // decoding reads stores (VarRate/flat compressed, KIVI packed)
    int64_t step_bytes = 0;      // bytes one step reads from the cache (stores: CompressedLayer::step_bytes)
    double cache_hit_rate = -1;  // selective: the chunk cache's hits over its lookups, all layers
    int64_t cache_bytes = 0;     // selective: the chunk caches' bound, all layers
    std::vector<double>
        attention_error;  // selective: per layer, one step's ||selective - exact|| / ||exact||
};

// The last prefill query of each layer attended through its store, selective against exact: the relative
// error of the attention output (the query's own entry repeated as the one tail entry both paths need).
std::vector<double> selective_attention_error(const PrefillCapture& capture,
                                              const std::vector<std::shared_ptr<const LayerPrefix>>& stores,
                                              double scale) {
    std::vector<double> out;
    for (size_t l = 0; l < stores.size(); ++l) {
        const auto* c = dynamic_cast<const CompressedLayer*>(stores[l].get());
        if (!c || !c->selective()) continue;
        const LayerCapture& lc = capture.layers[l];
        const at::Tensor q = lc.window_queries.narrow(1, lc.window_queries.size(1) - 1, 1);
        const int64_t L = lc.keys.size(1);
        const at::Tensor k = lc.keys.narrow(1, L - 1, 1), v = lc.values.narrow(1, L - 1, 1);
        const at::Tensor sel = c->attend(q, k, v, scale).to(at::kFloat);
        const at::Tensor exact = c->with_selection(0)->attend(q, k, v, scale).to(at::kFloat);
        out.push_back((sel - exact).norm().item<double>() / std::max(exact.norm().item<double>(), 1e-30));
    }
    return out;
}

int run_bench_decode(BenchDecodeArgs a) {
    apply_model_codec_defaults(a.flags, a.model, a.settings);
    CodecSettings settings = a.settings;
    const std::vector<std::string> names = parse_methods(a.methods);
    auto model = load_model_for_cli(a.model, a.runtime);
    const ModelConfig& cfg = model->config();
    const int64_t dim = 2 * cfg.n_kv_head * cfg.head_dim;
    check_methods_feasible(names, settings, a.tokens, *model);
    // The basis sets the coefficients' values, never the store's size or the attention's cost.
    const int64_t rank = std::min(settings.rank, dim);
    const auto basis = random_basis(cfg.n_layer, dim, rank, settings.stride, settings.anchors, /*seed=*/1);

    std::vector<int64_t> ids(static_cast<size_t>(a.tokens));
    for (int64_t i = 0; i < a.tokens; ++i) ids[i] = (i * 7919 + 13) % cfg.vocab_size;
    auto t = SteadyClock::now();
    const PrefillCapture capture =
        capture_prefill(*model, ids, settings, {}, 512, /*attention_output=*/false);
    const double prefill_ms = ms_since(t);
    spdlog::info("prefill of {} tokens: {:.0f} ms", a.tokens, prefill_ms);

    GenerateOptions gen;
    gen.max_new_tokens = a.new_tokens;
    gen.reconstruct_prefixes = a.reconstruct;
    const double scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
    // Greedy decoding tokens/s from `cache` (median of the repeats), and one step's attention through every
    // layer's store alone (one query, one tail entry per layer).
    auto time_decode = [&](KVCache& cache, DecodeRow& row) {
        std::vector<double> rates;
        for (int r = 0; r < a.repeats; ++r) {
            const KVCache::Snapshot before = cache.snapshot();
            auto t0 = SteadyClock::now();
            const std::vector<const KVCache*> batch{&cache};
            const auto out = generate_greedy_batch(*model, batch, {}, capture.last_logits, {}, gen);
            const double ms = ms_since(t0);
            cache.restore(before);
            rates.push_back(1000.0 * static_cast<double>(out.front().generated.size()) / ms);
        }
        row.tokens_per_s = median(rates);
        if (!row.stored) return;
        const auto opts = at::TensorOptions().dtype(model->options().dtype).device(model->options().device);
        const at::Tensor q = at::randn({cfg.n_head, 1, cfg.head_dim}, opts);
        const at::Tensor kv = at::randn({cfg.n_kv_head, 1, cfg.head_dim}, opts);
        std::vector<double> steps;
        for (int r = 0; r < 3; ++r) {
            auto t0 = SteadyClock::now();
            for (int64_t l = 0; l < cfg.n_layer; ++l) cache.prefix(l)->attend(q, kv, kv, scale);
            steps.push_back(ms_since(t0));
        }
        row.store_attention_ms = median(steps);
    };
    std::vector<DecodeRow> rows;
    for (const std::string& name : names) {
        DecodeRow row;
        row.method = name;
        const int64_t rss0 = resident_set_bytes();
        auto method = make_method(name, settings, method_needs_basis(name) ? basis : nullptr);
        t = SteadyClock::now();
        KVCache cache;
        std::vector<std::shared_ptr<const LayerPrefix>> stores;
        std::vector<LayerKV> layers;
        {
            const MethodAnalysis analysis(*method, capture);
            std::vector<LayerAllocation> allocations = analysis.allocate(settings);
            std::vector<LayerDiagnostics> diagnostics;
            for (LayerAllocation& al : allocations) diagnostics.push_back(std::move(al.diagnostics));
            layers = analysis.materialise(allocations, diagnostics, &stores);
            for (size_t l = 0; l < layers.size(); ++l) {
                row.accounted += diagnostics[l].stored_bytes;
                row.full += diagnostics[l].full_bytes;
                if (stores[l]) layers[l] = LayerKV{};  // decoding reads the store: drop the reconstruction
                if (stores[l]) row.stored = true;
                const auto* c = dynamic_cast<const CompressedLayer*>(stores[l].get());
                row.step_bytes += c           ? c->step_bytes()
                                  : stores[l] ? stores[l]->resident_bytes()
                                              : diagnostics[l].stored_bytes;
                if (const auto* q = dynamic_cast<const QuantizedLayer*>(stores[l].get()))
                    row.scratch = std::max(row.scratch, q->scratch_bytes(cfg.n_head, 1, a.new_tokens));
                if (c) {
                    row.scratch = std::max(row.scratch, c->scratch_bytes(cfg.n_head, 1, a.new_tokens));
                    row.ranks += c->sum_ranks();
                    row.padded += c->padded_scalars();
                    row.path = c->selective() ? "selective" : "exact";
                }
            }
            cache = cache_from_layers(*model, layers, capture.next_position, stores, name);
        }
        row.codec_ms = ms_since(t);
        row.resident = cache.used_bytes();
        row.rss_delta = rss0 >= 0 ? resident_set_bytes() - rss0 : -1;
        time_decode(cache, row);
        if (row.path == "selective") {
            int64_t lookups = 0, hits = 0;
            for (const auto& st : stores)
                if (const auto* c = dynamic_cast<const CompressedLayer*>(st.get())) {
                    const auto stats = c->chunk_cache_stats();
                    lookups += stats.lookups;
                    hits += stats.hits;
                    row.cache_bytes += stats.capacity_bytes;
                }
            row.cache_hit_rate = lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0;
            row.attention_error = selective_attention_error(capture, stores, scale);
        }
        spdlog::info("{} ({}): resident {} bytes, {:.2f} tokens/s", name, row.path, row.resident,
                     row.tokens_per_s);
        rows.push_back(row);
        if (row.path != "selective") continue;
        // The same stores on the exact path, in the same run: the reference the selective path is held to.
        DecodeRow exact = row;
        exact.path = "exact";
        exact.cache_hit_rate = -1;
        exact.cache_bytes = 0;
        exact.attention_error.clear();
        exact.step_bytes = 0;
        std::vector<std::shared_ptr<const LayerPrefix>> exact_stores = stores;
        for (auto& st : exact_stores)
            if (const auto* c = dynamic_cast<const CompressedLayer*>(st.get())) st = c->with_selection(0);
        for (const auto& st : exact_stores) exact.step_bytes += st ? st->resident_bytes() : 0;
        KVCache exact_cache = cache_from_layers(*model, layers, capture.next_position, exact_stores, name);
        time_decode(exact_cache, exact);
        spdlog::info("{} (exact): {:.2f} tokens/s", name, exact.tokens_per_s);
        rows.push_back(exact);
    }
    double full_rate = 0;
    for (const DecodeRow& r : rows)
        if (!method_compresses(r.method)) full_rate = r.tokens_per_s;
    if (a.json) {
        nlohmann::json j;
        j["model"] = a.model;
        j["tokens"] = a.tokens;
        j["new_tokens"] = a.new_tokens;
        j["dtype"] = dtype_name(model->options().dtype);
        j["threads"] = at::get_num_threads();
        j["budget"] = settings.budget;
        j["prefixes"] = a.reconstruct ? "reconstructed once" : "compressed store";
        j["prefill_ms"] = prefill_ms;
        j["methods"] = nlohmann::json::array();
        for (const DecodeRow& r : rows)
            j["methods"].push_back({{"method", r.method},
                                    {"store_attention", r.path},
                                    {"step_bytes", r.step_bytes},
                                    {"chunk_cache_hit_rate", r.cache_hit_rate},
                                    {"chunk_cache_bytes", r.cache_bytes},
                                    {"attention_error_per_layer", r.attention_error},
                                    {"accounted_bytes", r.accounted},
                                    {"resident_bytes", r.resident},
                                    {"full_bytes", r.full},
                                    {"scratch_bytes", r.scratch},
                                    {"rss_delta_bytes", r.rss_delta},
                                    {"codec_ms", r.codec_ms},
                                    {"decode_tokens_per_s", r.tokens_per_s},
                                    {"decode_vs_full", full_rate > 0 ? r.tokens_per_s / full_rate : 0.0},
                                    {"step_ms", r.tokens_per_s > 0 ? 1000.0 / r.tokens_per_s : 0.0},
                                    {"store_attention_ms_per_step", r.store_attention_ms},
                                    {"coefficients", r.ranks},
                                    {"key_rebuild_padded_slots", r.padded}});
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << fmt::format(
        "{} tokens, {} new, {}, {} threads, kappa {}, decoding from the {}; prefill {:.0f} ms\n", a.tokens,
        a.new_tokens, dtype_name(model->options().dtype), at::get_num_threads(), settings.budget,
        a.reconstruct ? "caches rebuilt dense once" : "compressed stores", prefill_ms);
    std::cout << fmt::format(
        "{:<10} {:<9} {:>12} {:>12} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8} {:>13} {:>10} {:>6}\n", "method",
        "attention", "accounted", "resident", "res/full", "scratch", "RSS delta", "codec ms", "tok/s",
        "vs full", "store attn ms", "step MB", "hit %");
    for (const DecodeRow& r : rows)
        std::cout << fmt::format(
            "{:<10} {:<9} {:>12} {:>12} {:>8.2f}% {:>10} {:>10} {:>10.0f} {:>9.2f} {:>8.2f} {:>13} {:>10.1f} "
            "{:>6}\n",
            r.method, r.path, r.accounted, r.resident,
            r.full > 0 ? 100.0 * static_cast<double>(r.resident) / static_cast<double>(r.full) : 0.0,
            r.scratch, r.rss_delta, r.codec_ms, r.tokens_per_s,
            full_rate > 0 ? r.tokens_per_s / full_rate : 0.0,
            r.store_attention_ms >= 0 ? fmt::format("{:.1f}", r.store_attention_ms) : std::string("-"),
            static_cast<double>(r.step_bytes) / 1e6,
            r.cache_hit_rate >= 0 ? fmt::format("{:.1f}", 100.0 * r.cache_hit_rate) : std::string("-"));
    for (const DecodeRow& r : rows)
        if (!r.attention_error.empty()) {
            std::vector<std::string> e;
            for (double x : r.attention_error) e.push_back(fmt::format("{:.3g}", x));
            std::cout << fmt::format(
                "{} selective vs exact, one step's attention output error per layer: {}\n", r.method,
                fmt::join(e, " "));
        }
    std::cout
        << "store attn ms: one decoding step's attention through every layer's compressed store (a step "
           "takes 1000 / tok/s ms); RSS delta: the process's resident set change while the cache is held "
           "(allocator caching makes it coarse); step MB: what one step reads from the cache; hit %: the "
           "selective path's rebuilt-chunk cache\n";
    return 0;
}

}  // namespace

Command add_bench_decode(CLI::App& bench) {
    auto a = std::make_shared<BenchDecodeArgs>();
    CLI::App* d = bench.add_subcommand(
        "decode",
        "Resident cache bytes and greedy decoding speed per method, from one prefill (synthetic ids)");
    d->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    d->add_option("--tokens", a->tokens, "Context length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    d->add_option("--new-tokens", a->new_tokens, "Tokens decoded per timed run")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    d->add_option("--methods", a->methods, "Comma-separated methods")->capture_default_str();
    a->flags = add_codec_options(*d, a->settings);
    d->add_option("--repeats", a->repeats, "Timed decoding runs (the median is reported)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    d->add_flag("--reconstruct", a->reconstruct,
                "Decode from the caches rebuilt dense once instead of the compressed stores");
    add_runtime_options(*d, a->runtime);
    d->add_flag("--json", a->json, "Print the results as JSON");
    return {d, [a] { return run_bench_decode(*a); }};
}

}  // namespace varrate::cli

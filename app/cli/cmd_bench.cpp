// varrate bench: measured throughput, always as a ratio against a reference measured in the same run
// (prefill: the machine's GEMM peak; codec: the plain prefill of the same tokens).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "codec/codec_json.h"
#include "codec/footprint.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "core/base/error.h"
#include "models/flops.h"

namespace varrate::cli {

namespace {

struct BenchPrefillArgs {
    std::string model;
    int64_t tokens = 2048;
    int repeats = 3;
    int64_t chunk_size = 512;
    RuntimeArgs runtime{"cpu", "bf16", 0};
    bool json = false;
};

struct BenchCodecArgs {
    std::string model;
    int64_t tokens = 2048;
    std::string methods = "varrate,flat,snapkv";
    CodecSettings settings;
    std::string basis;  // basis file; empty = random orthonormal rows
    int repeats = 3;
    int64_t chunk_size = 512;
    RuntimeArgs runtime{"cpu", "bf16", 0};
    bool json = false;
};

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// CPU time of the whole process (all threads), in ms: less sensitive than wall time to other processes
// competing for the cores.
double process_cpu_ms() {
    return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

// Deterministic ids spread over the vocabulary; content does not change the cost.
std::vector<int64_t> synthetic_ids(int64_t n, int64_t vocab_size) {
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = (i * 7919 + 13) % vocab_size;
    return ids;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void synchronize(const c10::Device& device) {
    // A tiny device->host copy waits for queued work without needing CUDA headers.
    if (!device.is_cpu()) at::zeros({1}, at::TensorOptions().device(device)).cpu();
}

// The machine's dense GEMM throughput at this dtype: median of several square products sized like the model's
// largest projections, so the ratio below compares like with like.
double measure_gemm_peak_gflops(const RuntimeOptions& o, int64_t n) {
    const auto opts = at::TensorOptions().dtype(o.dtype).device(o.device);
    at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
    at::mm(a, b);  // warm-up (allocations, library initialisation)
    synchronize(o.device);
    std::vector<double> rates;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        at::Tensor c = at::mm(a, b);
        synchronize(o.device);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back(2.0 * n * n * n / s / 1e9);
    }
    return median(rates);
}

// A short prefill before timing: first touch of the weights and of the allocator pools.
void warm_up(const LlamaModel& model, const std::vector<int64_t>& ids, const ForwardOptions& fo) {
    KVCache warm = model.new_cache();
    const std::vector<int64_t> head(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 64));
    model.forward(head, warm, fo);
}

int run_bench_prefill(const BenchPrefillArgs& a) {
    auto model = load_model_for_cli(a.model, a.runtime);
    const ModelConfig& cfg = model->config();
    const RuntimeOptions& o = model->options();
    if (a.tokens < 1) throw Error("bench prefill: --tokens must be positive");

    const std::vector<int64_t> ids = synthetic_ids(a.tokens, cfg.vocab_size);

    ForwardOptions fo;
    fo.chunk_size = a.chunk_size;
    warm_up(*model, ids, fo);
    std::vector<double> seconds;
    for (int r = 0; r < a.repeats; ++r) {
        KVCache cache = model->new_cache();
        const auto t0 = std::chrono::steady_clock::now();
        model->forward(ids, cache, fo);
        synchronize(o.device);
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        spdlog::info("prefill run {}: {:.3f} s", r + 1, seconds.back());
    }
    const double t = median(seconds);
    const PrefillFlops flops = prefill_flops(cfg, a.tokens);
    const double achieved = flops.total() / t / 1e9;
    const double peak = measure_gemm_peak_gflops(o, std::clamp<int64_t>(cfg.hidden_size, 1024, 4096));
    const double ratio = achieved / peak;

    nlohmann::json j;
    j["model"] = a.model;
    j["device"] = o.device.str();
    j["dtype"] = dtype_name(o.dtype);
    j["threads"] = o.threads;
    j["tokens"] = a.tokens;
    j["chunk_size"] = a.chunk_size;
    j["repeats"] = a.repeats;
    j["prefill_s_median"] = t;
    j["prefill_s_runs"] = seconds;
    j["tokens_per_s"] = a.tokens / t;
    j["gflop"] = flops.total() / 1e9;
    j["gflop_linear"] = flops.linear / 1e9;
    j["gflop_attention"] = flops.attention / 1e9;
    j["achieved_gflops"] = achieved;
    j["gemm_peak_gflops"] = peak;
    j["achieved_over_peak"] = ratio;
    if (a.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << fmt::format(
            "prefill {} tokens ({} layers, {} on {}, {} threads): median {:.3f} s over {} runs\n"
            "  {:.1f} tokens/s, {:.1f} GFLOP ({:.1f} linear + {:.1f} attention)\n"
            "  achieved {:.1f} GFLOP/s, GEMM peak {:.1f} GFLOP/s, ratio {:.2f}\n",
            a.tokens, cfg.n_layer, dtype_name(o.dtype), o.device.str(), o.threads, t, a.repeats, a.tokens / t,
            flops.total() / 1e9, flops.linear / 1e9, flops.attention / 1e9, achieved, peak, ratio);
    }
    return 0;
}

// Per-repeat sums over layers of one method's compress() calls.
struct CodecRun {
    StageTiming stages;      // the method's own stage timings, summed over layers
    double compress_ms = 0;  // wall time inside compress(), diagnostics included
    double compress_cpu_ms = 0;
    double prefill_ms = 0;  // wall time of the whole prefill with the method's observer
    double prefill_cpu_ms = 0;
};

struct CodecSummary {
    std::string method;
    StageTiming stages;  // medians over repeats, per stage
    double stage_total_ms = 0, compress_ms = 0, prefill_ms = 0, compress_cpu_ms = 0, prefill_cpu_ms = 0;
};

int run_bench_codec(const BenchCodecArgs& a) {
    if (a.tokens < 1) throw Error("bench codec: --tokens must be positive");
    const std::vector<std::string> names = parse_methods(a.methods);
    CodecSettings settings = a.settings;
    settings.precise_timing = true;  // stage times must be real on CUDA too
    if (settings.rank <= 0)
        throw Error(fmt::format("bench codec: --rank must be positive, got {}", settings.rank));

    auto model = load_model_for_cli(a.model, a.runtime);
    const ModelConfig& cfg = model->config();
    const RuntimeOptions& o = model->options();
    const int64_t dim = 2 * cfg.n_kv_head * cfg.head_dim;

    // Settings errors before any prefill: they would otherwise surface minutes later, inside the first layer.
    bool needs_basis = false;
    for (const std::string& name : names) {
        needs_basis = needs_basis || method_needs_basis(name);  // also rejects unknown names
        if (name == "snapkv")
            snapkv_kept_tokens(settings, a.tokens);
        else if (method_needs_basis(name))
            plan_codec_budget(settings, a.tokens, dim, element_size(o.dtype), name);
    }

    // The basis only sets the values of the projection, never its cost (ranks come from salience, the
    // projection runs at full rank R and is masked), so a random orthonormal basis times the codec exactly.
    std::shared_ptr<const Basis> basis;
    std::string basis_source = "none needed";
    if (needs_basis) {
        if (!a.basis.empty()) {
            BasisRequirements req;
            req.dim = dim;
            req.stride = settings.stride;
            req.anchors = settings.anchors;
            basis = std::make_shared<const Basis>(Basis::load(a.basis, req));
            basis_source = a.basis;
        } else {
            const int64_t rank = std::min(settings.rank, dim);
            basis = random_basis(cfg.n_layer, dim, rank, settings.stride, settings.anchors, /*seed=*/1);
            basis_source = fmt::format("random orthonormal rows (seed 1), R={} D={}", rank, dim);
        }
    }
    std::vector<std::unique_ptr<CompressionMethod>> methods;
    for (const std::string& name : names) methods.push_back(make_method(name, settings, basis));

    const std::vector<int64_t> ids = synthetic_ids(a.tokens, cfg.vocab_size);
    ForwardOptions plain;
    plain.chunk_size = a.chunk_size;
    warm_up(*model, ids, plain);

    // Each repeat runs the plain prefill and then every method's prefill back to back, so a change in the
    // machine's load hits all of them alike; medians over repeats are reported.
    std::vector<double> plain_ms, plain_cpu_ms;
    std::vector<std::vector<CodecRun>> runs(methods.size());
    for (int r = 0; r < a.repeats; ++r) {
        {
            KVCache cache = model->new_cache();
            const auto t0 = Clock::now();
            const double c0 = process_cpu_ms();
            model->forward(ids, cache, plain);
            synchronize(o.device);
            plain_ms.push_back(ms_between(t0, Clock::now()));
            plain_cpu_ms.push_back(process_cpu_ms() - c0);
            spdlog::info("run {}: plain prefill {:.1f} ms", r + 1, plain_ms.back());
        }
        for (size_t mi = 0; mi < methods.size(); ++mi) {
            CompressionMethod& method = *methods[mi];
            CodecRun run;
            ForwardOptions fo = plain;
            fo.observer_window = settings.obs_window;
            fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
                const auto t0 = Clock::now();
                const double c0 = process_cpu_ms();
                LayerResult res = method.compress(cap);
                synchronize(o.device);
                run.compress_ms += ms_between(t0, Clock::now());
                run.compress_cpu_ms += process_cpu_ms() - c0;
                const StageTiming& st = res.diagnostics.timing;
                run.stages.anchor_search += st.anchor_search;
                run.stages.salience += st.salience;
                run.stages.water_filling += st.water_filling;
                run.stages.projection += st.projection;
                run.stages.reconstruction += st.reconstruction;
                return std::move(res.kv);
            };
            KVCache cache = model->new_cache();
            const auto t0 = Clock::now();
            const double c0 = process_cpu_ms();
            model->forward(ids, cache, fo);
            synchronize(o.device);
            run.prefill_ms = ms_between(t0, Clock::now());
            run.prefill_cpu_ms = process_cpu_ms() - c0;
            spdlog::info("run {}: {} prefill {:.1f} ms, codec stages {:.1f} ms", r + 1, method.name(),
                         run.prefill_ms, run.stages.total());
            runs[mi].push_back(run);
        }
    }

    const double prefill = median(plain_ms), prefill_cpu = median(plain_cpu_ms);
    std::vector<CodecSummary> summaries;
    for (size_t mi = 0; mi < methods.size(); ++mi) {
        auto med = [&](auto field) {
            std::vector<double> v;
            for (const CodecRun& run : runs[mi]) v.push_back(field(run));
            return median(v);
        };
        CodecSummary s;
        s.method = names[mi];
        s.stages.anchor_search = med([](const CodecRun& x) { return x.stages.anchor_search; });
        s.stages.salience = med([](const CodecRun& x) { return x.stages.salience; });
        s.stages.water_filling = med([](const CodecRun& x) { return x.stages.water_filling; });
        s.stages.projection = med([](const CodecRun& x) { return x.stages.projection; });
        s.stages.reconstruction = med([](const CodecRun& x) { return x.stages.reconstruction; });
        s.stage_total_ms = med([](const CodecRun& x) { return x.stages.total(); });
        s.compress_ms = med([](const CodecRun& x) { return x.compress_ms; });
        s.prefill_ms = med([](const CodecRun& x) { return x.prefill_ms; });
        s.compress_cpu_ms = med([](const CodecRun& x) { return x.compress_cpu_ms; });
        s.prefill_cpu_ms = med([](const CodecRun& x) { return x.prefill_cpu_ms; });
        summaries.push_back(s);
    }

    const std::vector<std::pair<const char*, double StageTiming::*>> stage_fields = {
        {"anchor_search", &StageTiming::anchor_search},
        {"salience", &StageTiming::salience},
        {"water_filling", &StageTiming::water_filling},
        {"projection", &StageTiming::projection},
        {"reconstruction", &StageTiming::reconstruction}};
    if (a.json) {
        nlohmann::json j;
        j["model"] = a.model;
        j["device"] = o.device.str();
        j["dtype"] = dtype_name(o.dtype);
        j["threads"] = o.threads;
        j["tokens"] = a.tokens;
        j["layers"] = cfg.n_layer;
        j["chunk_size"] = a.chunk_size;
        j["repeats"] = a.repeats;
        j["basis"] = basis_source;
        j["settings"] = to_json(settings);
        j["prefill_ms_median"] = prefill;
        j["prefill_ms_runs"] = plain_ms;
        j["prefill_cpu_ms_median"] = prefill_cpu;
        nlohmann::json jm = nlohmann::json::array();
        for (const CodecSummary& s : summaries) {
            nlohmann::json m = {{"method", s.method}};
            for (const auto& [key, field] : stage_fields) {
                m["stage_ms"][key] = s.stages.*field;
                m["stage_over_prefill"][key] = s.stages.*field / prefill;
            }
            m["codec_ms"] = s.stage_total_ms;
            m["codec_over_prefill"] = s.stage_total_ms / prefill;
            m["compress_call_ms"] = s.compress_ms;
            m["prefill_with_codec_ms"] = s.prefill_ms;
            m["wall_overhead_over_prefill"] = (s.prefill_ms - prefill) / prefill;
            m["compress_call_cpu_ms"] = s.compress_cpu_ms;
            m["compress_cpu_over_prefill_cpu"] = s.compress_cpu_ms / prefill_cpu;
            m["prefill_with_codec_cpu_ms"] = s.prefill_cpu_ms;
            jm.push_back(m);
        }
        j["methods"] = jm;
        std::cout << j.dump(2) << std::endl;
        return 0;
    }
    std::cout << fmt::format(
        "codec cost, {} tokens, {} layers, {} on {}, {} threads, median of {} runs\n"
        "basis: {}\n"
        "plain prefill: {:.1f} ms (process CPU time {:.1f} ms)\n",
        a.tokens, cfg.n_layer, dtype_name(o.dtype), o.device.str(), o.threads, a.repeats, basis_source,
        prefill, prefill_cpu);
    std::cout << fmt::format("{:<9} {:<28} {:>10} {:>11}\n", "method", "stage (summed over layers)", "ms",
                             "/ prefill");
    for (const CodecSummary& s : summaries) {
        for (const auto& [key, field] : stage_fields)
            std::cout << fmt::format("{:<9} {:<28} {:>10.1f} {:>10.2f}%\n", s.method, key, s.stages.*field,
                                     100.0 * s.stages.*field / prefill);
        std::cout << fmt::format("{:<9} {:<28} {:>10.1f} {:>10.2f}%\n", s.method, "codec total",
                                 s.stage_total_ms, 100.0 * s.stage_total_ms / prefill);
        std::cout << fmt::format("{:<9} {:<28} {:>10.1f} {:>10.2f}%\n", s.method,
                                 "compress() incl. diagnostics", s.compress_ms,
                                 100.0 * s.compress_ms / prefill);
        std::cout << fmt::format("{:<9} {:<28} {:>10.1f} {:>10.2f}%  (of prefill CPU time)\n", s.method,
                                 "compress() CPU time", s.compress_cpu_ms,
                                 100.0 * s.compress_cpu_ms / prefill_cpu);
        std::cout << fmt::format("{:<9} {:<28} {:>10.1f} {:>+10.2f}%\n", s.method,
                                 "prefill+codec (wall delta)", s.prefill_ms,
                                 100.0 * (s.prefill_ms - prefill) / prefill);
    }
    return 0;
}

}  // namespace

Command add_bench(CLI::App& root) {
    CLI::App* bench =
        root.add_subcommand("bench", "Benchmarks (medians of several runs, ratios measured in one run)");
    bench->require_subcommand(1);
    auto a = std::make_shared<BenchPrefillArgs>();
    CLI::App* prefill =
        bench->add_subcommand("prefill", "Prefill throughput against the machine's GEMM peak");
    prefill->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    prefill->add_option("--tokens", a->tokens, "Prompt length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    prefill->add_option("--repeats", a->repeats, "Timed runs (the median is reported)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    prefill->add_option("--chunk-size", a->chunk_size, "Prefill chunk length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    add_runtime_options(*prefill, a->runtime);
    prefill->add_flag("--json", a->json, "Print the results as JSON");

    auto c = std::make_shared<BenchCodecArgs>();
    CLI::App* codec = bench->add_subcommand(
        "codec", "Codec time per stage against the plain prefill of the same tokens (synthetic ids)");
    codec->add_option("--model", c->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    codec->add_option("--tokens", c->tokens, "Context length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    codec->add_option("--methods", c->methods, "Comma-separated methods to time")->capture_default_str();
    codec
        ->add_option("--basis", c->basis,
                     "Basis file for varrate/flat (default: random orthonormal rows; the cost does not "
                     "depend on the basis values)")
        ->check(CLI::ExistingFile);
    add_codec_options(*codec, c->settings);
    codec->add_option("--repeats", c->repeats, "Timed runs (medians are reported)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    codec->add_option("--chunk-size", c->chunk_size, "Prefill chunk length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    add_runtime_options(*codec, c->runtime);
    codec->add_flag("--json", c->json, "Print the results as JSON");
    return {bench, [a, prefill, c, codec] {
                if (prefill->parsed()) return run_bench_prefill(*a);
                if (codec->parsed()) return run_bench_codec(*c);
                throw Error("bench: choose a benchmark (prefill, codec)");
            }};
}

}  // namespace varrate::cli

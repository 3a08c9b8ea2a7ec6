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
#include "base/error.h"
#include "codec/codec_json.h"
#include "codec/footprint.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "core/capture.h"
#include "core/probe.h"
#include "core/suites/stats.h"
#include "models/flops.h"

namespace varrate::cli {

namespace {

struct BenchPrefillArgs {
    std::string model;
    int64_t tokens = 2048;
    int repeats = 3;
    int64_t chunk_size = 512;
    RuntimeArgs runtime;
    bool json = false;
    bool profile = false;
};

struct BenchCodecArgs {
    std::string model;
    int64_t tokens = 2048;
    std::string methods = "varrate,flat,snapkv";
    bool shared = false;
    std::string shared_methods = join_method_names();
    CodecSettings settings;
    CodecFlags flags;
    std::string basis;  // basis file; empty = random orthonormal rows
    int repeats = 3;
    int64_t chunk_size = 512;
    RuntimeArgs runtime;
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

// The probes' synthetic prompts: a question of typical length, KVzip's repeat prompts as long as the real
// ones in a Llama-3 vocabulary.
constexpr int64_t kBenchQuestionTokens = 24;
RepeatPrompt bench_repeat_prompt(int64_t vocab_size) {
    RepeatPrompt p;
    p.first = synthetic_ids(8, vocab_size);
    p.later = synthetic_ids(13, vocab_size);
    p.suffix = synthetic_ids(1, vocab_size);
    return p;
}

// The machine's dense GEMM throughput at this dtype: median of several square products sized like the model's
// largest projections, so the ratio below compares like with like.
double measure_gemm_peak_gflops(const RuntimeOptions& o, int64_t n) {
    const auto opts = at::TensorOptions().dtype(o.dtype).device(o.device);
    at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
    at::mm(a, b);  // warm-up (allocations, library initialisation)
    synchronize_device(o.device);
    std::vector<double> rates;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        at::Tensor c = at::mm(a, b);
        synchronize_device(o.device);
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

// FLOPs of the runtime's profiled ops that do arithmetic worth a rate (OpTimer names, llama_model.cpp); 0
// for the others (norms, RoPE, copies), whose time is what matters.
double op_flops(const ModelConfig& c, int64_t tokens, const std::string& op) {
    const double n = static_cast<double>(tokens), h = static_cast<double>(c.hidden_size);
    const double q = static_cast<double>(c.n_head * c.head_dim),
                 kv = static_cast<double>(c.n_kv_head * c.head_dim);
    const double inter = static_cast<double>(c.intermediate_size), layers = static_cast<double>(c.n_layer);
    if (op == "qkv matmul") return 2 * n * h * (q + 2 * kv) * layers;
    if (op == "o matmul") return 2 * n * q * h * layers;
    if (op == "gate_up matmul") return 2 * n * h * 2 * inter * layers;
    if (op == "down matmul") return 2 * n * inter * h * layers;
    if (op == "attention") return prefill_flops(c, tokens).attention;
    if (op == "lm_head") return 2 * h * static_cast<double>(c.vocab_size);
    return 0;
}

// Runs `repeats` prefills with the runtime's per-op timers on; per op: mean ms per prefill, its share of the
// timed sections, and GFLOP/s where it does matmul work.
nlohmann::json profile_prefill(const LlamaModel& model, const std::vector<int64_t>& ids, ForwardOptions fo,
                               int repeats) {
    OpProfile profile;
    fo.profile = &profile;
    double wall_ms = 0;
    for (int r = 0; r < repeats; ++r) {
        KVCache cache = model.new_cache();
        const auto t0 = Clock::now();
        model.forward(ids, cache, fo);
        synchronize_device(model.options().device);
        wall_ms += ms_between(t0, Clock::now());
    }
    const double total = profile.total_ms();
    nlohmann::json ops = nlohmann::json::array();
    for (const OpProfile::Entry& e : profile.entries()) {
        const double ms = e.ms / repeats,
                     flops = op_flops(model.config(), static_cast<int64_t>(ids.size()), e.op);
        nlohmann::json o = {{"op", e.op}, {"ms", ms}, {"share", e.ms / total}, {"calls", e.calls / repeats}};
        o["gflops"] = flops > 0 ? nlohmann::json(flops / (ms / 1000) / 1e9) : nlohmann::json(nullptr);
        ops.push_back(o);
    }
    return {{"runs", repeats}, {"wall_ms", wall_ms / repeats}, {"timed_ms", total / repeats}, {"ops", ops}};
}

void print_profile(const nlohmann::json& p, double peak) {
    std::cout << fmt::format(
        "\nper op (mean of {} profiled runs, {:.1f} ms, of which {:.1f} ms in timed sections):\n",
        p["runs"].get<int>(), p["wall_ms"].get<double>(), p["timed_ms"].get<double>());
    std::cout << fmt::format("  {:<26} {:>10} {:>7} {:>9} {:>8}\n", "op", "ms", "share", "GFLOP/s",
                             "of peak");
    for (const auto& o : p["ops"]) {
        const bool rated = !o["gflops"].is_null();
        std::cout << fmt::format("  {:<26} {:>10.1f} {:>6.1f}% {:>9} {:>8}\n", o["op"].get<std::string>(),
                                 o["ms"].get<double>(), 100 * o["share"].get<double>(),
                                 rated ? fmt::format("{:.1f}", o["gflops"].get<double>()) : "",
                                 rated ? fmt::format("{:.2f}", o["gflops"].get<double>() / peak) : "");
    }
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
        synchronize_device(o.device);
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
    if (a.profile) j["profile"] = profile_prefill(*model, ids, fo, a.repeats);
    if (a.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << fmt::format(
            "prefill {} tokens ({} layers, {} on {}, {} threads): median {:.3f} s over {} runs\n"
            "  {:.1f} tokens/s, {:.1f} GFLOP ({:.1f} linear + {:.1f} attention)\n"
            "  achieved {:.1f} GFLOP/s, GEMM peak {:.1f} GFLOP/s, ratio {:.2f}\n",
            a.tokens, cfg.n_layer, dtype_name(o.dtype), o.device.str(), o.threads, t, a.repeats, a.tokens / t,
            flops.total() / 1e9, flops.linear / 1e9, flops.attention / 1e9, achieved, peak, ratio);
        if (a.profile) print_profile(j["profile"], peak);
    }
    return 0;
}

// The codec's stages, by the step that runs them (codec/method.h's StageTiming).
const std::vector<std::pair<const char*, double StageTiming::*>>& stage_fields() {
    static const std::vector<std::pair<const char*, double StageTiming::*>> fields = {
        {"anchor_search", &StageTiming::anchor_search},
        {"salience", &StageTiming::salience},
        {"water_filling", &StageTiming::water_filling},
        {"projection", &StageTiming::projection},
        {"reconstruction", &StageTiming::reconstruction}};
    return fields;
}
const char* stage_step(const std::string& stage) {
    if (stage == "anchor_search" || stage == "salience") return "analyse";
    if (stage == "reconstruction") return "materialise";
    return "allocate";
}

void add_stages(StageTiming& sum, const StageTiming& t) {
    for (const auto& [key, field] : stage_fields()) sum.*field += t.*field;
}

double median_of(const std::vector<double>& runs) {
    return runs.empty() ? 0.0 : median(runs);
}

// Per-repeat sums over layers of one method's prefill with compress_layer_in_prefill as its observer.
struct SeparateRun {
    StageTiming stages;
    double mean_rank = 0, floor_share = 0;        // over the layers' coded tokens (VarRate/flat)
    double observer_ms = 0, observer_cpu_ms = 0;  // the observer calls, distortion measures included
    double prefill_ms = 0, prefill_cpu_ms = 0;    // the whole prefill with the observer
};

// Per-repeat times of one method on a shared capture.
struct SharedRun {
    StageTiming stages;
    double analyse_ms = 0, allocate_ms = 0, materialise_ms = 0;  // materialise: distortion measures included
    double cpu_ms = 0;
    double total() const { return analyse_ms + allocate_ms + materialise_ms; }
};

// Medians over repeats, field by field.
template <typename Run, typename F>
double med(const std::vector<Run>& runs, F field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return median_of(v);
}
template <typename Run>
StageTiming median_stages(const std::vector<Run>& runs) {
    StageTiming m;
    for (const auto& [key, field] : stage_fields()) {
        auto f = field;
        m.*field = med(runs, [f](const Run& r) { return r.stages.*f; });
    }
    return m;
}

nlohmann::json stage_json(const StageTiming& st, double prefill) {
    nlohmann::json j;
    for (const auto& [key, field] : stage_fields()) {
        j["stage_ms"][key] = st.*field;
        j["stage_over_prefill"][key] = st.*field / prefill;
    }
    j["codec_ms"] = st.total();
    j["codec_over_prefill"] = st.total() / prefill;
    return j;
}

int run_bench_codec(BenchCodecArgs a) {
    if (a.tokens < 1) throw Error("bench codec: --tokens must be positive");
    apply_model_codec_defaults(a.flags, a.model, a.settings);
    const std::vector<std::string> names = parse_methods(a.methods);
    const std::vector<std::string> shared_names =
        a.shared ? parse_methods(a.shared_methods) : std::vector<std::string>{};
    for (const std::string& name : names)
        if (method_probe(name) != MethodProbe::None)
            throw Error(
                fmt::format("bench codec: {} reads a second pass over the context, which the separate "
                            "path (a method inside the prefill) cannot run: bench it with --shared",
                            name));
    const ProbeNeeds probes = probe_needs(shared_names);

    CodecSettings settings = a.settings;
    settings.precise_timing = true;  // stage times must be real on CUDA too
    if (settings.rank <= 0)
        throw Error(fmt::format("bench codec: --rank must be positive, got {}", settings.rank));

    auto model = load_model_for_cli(a.model, a.runtime);
    const ModelConfig& cfg = model->config();
    const RuntimeOptions& o = model->options();
    const int64_t dim = 2 * cfg.n_kv_head * cfg.head_dim;

    std::vector<std::string> all = names;
    all.insert(all.end(), shared_names.begin(), shared_names.end());
    const bool needs_basis = check_methods_feasible(all, settings, a.tokens, *model);

    // The basis only sets the values of the projection, never its cost (ranks come from salience, each token
    // is projected on as many rows as its rank), so a random orthonormal basis times the codec exactly.
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
    auto make = [&](const std::string& name) {
        return make_method(name, settings, method_needs_basis(name) ? basis : nullptr);
    };
    std::vector<std::unique_ptr<CompressionMethod>> methods, shared_methods;
    for (const std::string& name : names) methods.push_back(make(name));
    for (const std::string& name : shared_names) shared_methods.push_back(make(name));

    const std::vector<int64_t> ids = synthetic_ids(a.tokens, cfg.vocab_size);
    ForwardOptions plain;
    plain.chunk_size = a.chunk_size;
    warm_up(*model, ids, plain);

    // Each repeat runs the plain prefill, every method's prefill and then the shared capture back to back, so
    // a change in the machine's load hits all of them alike; medians over repeats are reported.
    std::vector<double> plain_ms, plain_cpu_ms, capture_ms, capture_cpu_ms;
    std::vector<std::vector<SeparateRun>> runs(methods.size());
    std::vector<std::vector<SharedRun>> shared_runs(shared_methods.size());
    for (int r = 0; r < a.repeats; ++r) {
        {
            KVCache cache = model->new_cache();
            const auto t0 = Clock::now();
            const double c0 = process_cpu_ms();
            model->forward(ids, cache, plain);
            synchronize_device(o.device);
            plain_ms.push_back(ms_between(t0, Clock::now()));
            plain_cpu_ms.push_back(process_cpu_ms() - c0);
            spdlog::info("run {}: plain prefill {:.1f} ms", r + 1, plain_ms.back());
        }
        // The separate path, as compare runs it (compress_in_prefill), with each observer call timed.
        for (size_t mi = 0; mi < methods.size(); ++mi) {
            CompressionMethod& method = *methods[mi];
            SeparateRun run;
            ForwardOptions fo = plain;
            fo.observer_window = settings.obs_window;
            fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
                const auto t0 = Clock::now();
                const double c0 = process_cpu_ms();
                InPrefillLayer layer = compress_layer_in_prefill(method, cap);
                synchronize_device(o.device);
                run.observer_ms += ms_between(t0, Clock::now());
                run.observer_cpu_ms += process_cpu_ms() - c0;
                add_stages(run.stages, layer.diagnostics.timing);
                run.mean_rank += layer.diagnostics.mean_rank / cfg.n_layer;
                run.floor_share += layer.diagnostics.floor_share / cfg.n_layer;
                return std::move(layer.kv);
            };
            KVCache cache = model->new_cache();
            const auto t0 = Clock::now();
            const double c0 = process_cpu_ms();
            model->forward(ids, cache, fo);
            synchronize_device(o.device);
            run.prefill_ms = ms_between(t0, Clock::now());
            run.prefill_cpu_ms = process_cpu_ms() - c0;
            spdlog::info("run {}: {} prefill {:.1f} ms, codec stages {:.1f} ms", r + 1, method.name(),
                         run.prefill_ms, run.stages.total());
            runs[mi].push_back(run);
        }
        // The shared path: one capture, then each method's analysis, one allocation and its materialisation.
        if (shared_methods.empty()) continue;
        const auto t0 = Clock::now();
        const double c0 = process_cpu_ms();
        PrefillCapture capture = capture_prefill(*model, ids, settings, {}, a.chunk_size);
        synchronize_device(o.device);
        capture_ms.push_back(ms_between(t0, Clock::now()));
        capture_cpu_ms.push_back(process_cpu_ms() - c0);
        // The extra passes some methods read (core/probe.h), on synthetic prompts of typical lengths; each
        // is charged to the analysis of the methods that read it.
        if (probes.question) {
            auto tq = Clock::now();
            add_question_attention(*model, capture, synthetic_ids(kBenchQuestionTokens, cfg.vocab_size));
            synchronize_device(o.device);
            capture.question_ms = ms_between(tq, Clock::now());
        }
        if (probes.repeat) {
            auto tr = Clock::now();
            add_repeat_scores(*model, capture, bench_repeat_prompt(cfg.vocab_size));
            synchronize_device(o.device);
            capture.repeat_ms = ms_between(tr, Clock::now());
        }
        if (probes.observed || probes.noncausal) {
            auto to = Clock::now();
            add_all_query_attention(*model, capture, probes.observed, probes.noncausal);
            synchronize_device(o.device);
            capture.observed_ms = ms_between(to, Clock::now());
        }
        for (size_t mi = 0; mi < shared_methods.size(); ++mi) {
            SharedRun run;
            const double m0 = process_cpu_ms();
            auto t = Clock::now();
            const MethodAnalysis analysis(*shared_methods[mi], capture);
            synchronize_device(o.device);
            const MethodProbe probe = method_probe(shared_names[mi]);
            run.analyse_ms = ms_between(t, Clock::now()) + probe_time_ms(capture, probe);
            t = Clock::now();
            std::vector<LayerAllocation> allocations = analysis.allocate(settings);
            synchronize_device(o.device);
            run.allocate_ms = ms_between(t, Clock::now());
            t = Clock::now();
            const std::vector<LayerKV> layers = analysis.materialise(allocations);
            synchronize_device(o.device);
            run.materialise_ms = ms_between(t, Clock::now());
            run.cpu_ms = process_cpu_ms() - m0;
            for (const LayerAllocation& al : allocations) add_stages(run.stages, al.diagnostics.timing);
            spdlog::info("run {}: shared {} {:.1f} ms", r + 1, shared_names[mi], run.total());
            shared_runs[mi].push_back(run);
        }
    }

    const double prefill = median(plain_ms), prefill_cpu = median(plain_cpu_ms);
    const double capture = median_of(capture_ms), capture_cpu = median_of(capture_cpu_ms);
    const double capture_overhead = capture - prefill;
    std::vector<double> shared_totals(static_cast<size_t>(a.repeats), 0.0);
    for (const auto& mr : shared_runs)
        for (size_t r = 0; r < mr.size(); ++r) shared_totals[r] += mr[r].total();
    const double shared_codec = shared_methods.empty() ? 0.0 : median(shared_totals);

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
        for (size_t mi = 0; mi < methods.size(); ++mi) {
            const auto& rs = runs[mi];
            nlohmann::json m = stage_json(median_stages(rs), prefill);
            m["method"] = names[mi];
            const double obs = med(rs, [](const SeparateRun& x) { return x.observer_ms; });
            const double obs_cpu = med(rs, [](const SeparateRun& x) { return x.observer_cpu_ms; });
            const double with = med(rs, [](const SeparateRun& x) { return x.prefill_ms; });
            m["observer_ms"] = obs;
            m["observer_over_prefill"] = obs / prefill;
            m["observer_cpu_ms"] = obs_cpu;
            m["observer_cpu_over_prefill_cpu"] = obs_cpu / prefill_cpu;
            m["prefill_with_codec_ms"] = with;
            m["wall_overhead_over_prefill"] = (with - prefill) / prefill;
            m["prefill_with_codec_cpu_ms"] = med(rs, [](const SeparateRun& x) { return x.prefill_cpu_ms; });
            m["mean_rank"] = med(rs, [](const SeparateRun& x) { return x.mean_rank; });
            m["floor_share"] = med(rs, [](const SeparateRun& x) { return x.floor_share; });
            jm.push_back(m);
        }
        j["methods"] = jm;
        if (!shared_methods.empty()) {
            nlohmann::json sh;
            sh["budget"] = settings.budget;
            sh["capture_prefill_ms"] = capture;
            sh["capture_prefill_ms_runs"] = capture_ms;
            sh["capture_prefill_cpu_ms"] = capture_cpu;
            sh["capture_overhead_over_prefill"] = capture_overhead / prefill;
            nlohmann::json ms = nlohmann::json::array();
            for (size_t mi = 0; mi < shared_methods.size(); ++mi) {
                const auto& rs = shared_runs[mi];
                nlohmann::json m = stage_json(median_stages(rs), prefill);
                m["method"] = shared_names[mi];
                m["analyse_ms"] = med(rs, [](const SharedRun& x) { return x.analyse_ms; });
                m["allocate_ms"] = med(rs, [](const SharedRun& x) { return x.allocate_ms; });
                m["materialise_ms"] = med(rs, [](const SharedRun& x) { return x.materialise_ms; });
                m["total_ms"] = med(rs, [](const SharedRun& x) { return x.total(); });
                m["total_over_prefill"] = m["total_ms"].get<double>() / prefill;
                m["cpu_ms"] = med(rs, [](const SharedRun& x) { return x.cpu_ms; });
                ms.push_back(m);
            }
            sh["methods"] = ms;
            sh["codec_ms"] = shared_codec;
            sh["codec_over_prefill"] = shared_codec / prefill;
            sh["total_over_prefill"] = (capture_overhead + shared_codec) / prefill;
            j["shared"] = sh;
        }
        std::cout << j.dump(2) << std::endl;
        return 0;
    }
    std::cout << fmt::format(
        "codec cost, {} tokens, {} layers, {} on {}, {} threads, median of {} runs\n"
        "basis: {}\n"
        "plain prefill: {:.1f} ms (process CPU time {:.1f} ms)\n\n"
        "separate path: a prefill per method, the method its end-of-prefill observer (compress_in_prefill)\n",
        a.tokens, cfg.n_layer, dtype_name(o.dtype), o.device.str(), o.threads, a.repeats, basis_source,
        prefill, prefill_cpu);
    auto row = [&](const std::string& method, const std::string& what, double ms, const char* note = "") {
        std::cout << fmt::format("{:<9} {:<36} {:>10.1f} {:>10.2f}%{}\n", method, what, ms,
                                 100.0 * ms / prefill, note);
    };
    std::cout << fmt::format("{:<9} {:<36} {:>10} {:>11}\n", "method", "stage (summed over layers)", "ms",
                             "/ prefill");
    for (size_t mi = 0; mi < methods.size(); ++mi) {
        const auto& rs = runs[mi];
        const StageTiming st = median_stages(rs);
        for (const auto& [key, field] : stage_fields())
            row(names[mi], fmt::format("{} ({})", key, stage_step(key)), st.*field);
        row(names[mi], "codec total", st.total());
        row(names[mi], "observer incl. distortion measures",
            med(rs, [](const SeparateRun& x) { return x.observer_ms; }));
        const double obs_cpu = med(rs, [](const SeparateRun& x) { return x.observer_cpu_ms; });
        std::cout << fmt::format("{:<9} {:<36} {:>10.1f} {:>10.2f}%  (of prefill CPU time)\n", names[mi],
                                 "observer CPU time", obs_cpu, 100.0 * obs_cpu / prefill_cpu);
        const double with = med(rs, [](const SeparateRun& x) { return x.prefill_ms; });
        std::cout << fmt::format("{:<9} {:<36} {:>10.1f} {:>+10.2f}%\n", names[mi],
                                 "prefill+codec (wall delta)", with, 100.0 * (with - prefill) / prefill);
    }
    if (shared_methods.empty()) return 0;
    std::cout << fmt::format(
        "\nshared capture: one prefill keeps every layer, then each method analyses it, allocates kappa={} "
        "and materialises (distortion measures included)\n",
        settings.budget);
    std::cout << fmt::format("{:<9} {:<36} {:>10.1f} {:>+10.2f}%  (capture prefill, wall delta)\n", "capture",
                             "prefill keeping every layer", capture, 100.0 * capture_overhead / prefill);
    for (size_t mi = 0; mi < shared_methods.size(); ++mi) {
        const auto& rs = shared_runs[mi];
        row(shared_names[mi], "analyse", med(rs, [](const SharedRun& x) { return x.analyse_ms; }));
        row(shared_names[mi], "allocate", med(rs, [](const SharedRun& x) { return x.allocate_ms; }));
        row(shared_names[mi], "materialise", med(rs, [](const SharedRun& x) { return x.materialise_ms; }));
        row(shared_names[mi], "  of which codec stages", median_stages(rs).total());
    }
    row("shared", "analyse+allocate+materialise", shared_codec);
    row("shared", "capture overhead + the above", capture_overhead + shared_codec);
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
    prefill->add_flag("--profile", a->profile,
                      "Then time each op of --repeats more prefills (matmuls, attention, norms, RoPE, cache "
                      "appends, copies; waits for the device after each op)");

    auto c = std::make_shared<BenchCodecArgs>();
    CLI::App* codec = bench->add_subcommand(
        "codec", "Codec time per stage against the plain prefill of the same tokens (synthetic ids)");
    codec->add_option("--model", c->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    codec->add_option("--tokens", c->tokens, "Context length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    codec->add_option("--methods", c->methods, "Comma-separated methods to time, a prefill each")
        ->capture_default_str();
    codec->add_flag("--shared", c->shared,
                    "Also time the shared-capture path: one prefill keeping every layer, then analysis, "
                    "allocation and materialisation of each of --shared-methods at --budget");
    codec->add_option("--shared-methods", c->shared_methods, "Comma-separated methods of the shared path")
        ->capture_default_str();
    codec
        ->add_option("--basis", c->basis,
                     "Basis file for varrate/flat (default: random orthonormal rows; the cost does not "
                     "depend on the basis values)")
        ->check(CLI::ExistingFile);
    c->flags = add_codec_options(*codec, c->settings);
    codec->add_option("--repeats", c->repeats, "Timed runs (medians are reported)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    codec->add_option("--chunk-size", c->chunk_size, "Prefill chunk length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
    add_runtime_options(*codec, c->runtime);
    codec->add_flag("--json", c->json, "Print the results as JSON");
    const Command decode = add_bench_decode(*bench);
    return {bench, [a, prefill, c, codec, decode] {
                if (prefill->parsed()) return run_bench_prefill(*a);
                if (codec->parsed()) return run_bench_codec(*c);
                if (decode.app->parsed()) return decode.run();
                throw Error("bench: choose a benchmark (prefill, codec, decode)");
            }};
}

}  // namespace varrate::cli

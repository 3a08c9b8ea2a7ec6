// varrate bench: measured throughput, always as a ratio against the same machine's GEMM peak in the same run.
#include <algorithm>
#include <chrono>
#include <iostream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/error.h"
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

int run_bench_prefill(const BenchPrefillArgs& a) {
    auto model = load_model_for_cli(a.model, a.runtime);
    const ModelConfig& cfg = model->config();
    const RuntimeOptions& o = model->options();
    if (a.tokens < 1) throw Error("bench prefill: --tokens must be positive");

    // Deterministic ids spread over the vocabulary; content does not change the cost.
    std::vector<int64_t> ids(a.tokens);
    for (int64_t i = 0; i < a.tokens; ++i) ids[i] = (i * 7919 + 13) % cfg.vocab_size;

    ForwardOptions fo;
    fo.chunk_size = a.chunk_size;
    {
        // Warm-up on a short prefix: first-touch of weights and allocator pools.
        KVCache warm = model->new_cache();
        std::vector<int64_t> head(ids.begin(), ids.begin() + std::min<int64_t>(a.tokens, 64));
        model->forward(head, warm, fo);
    }
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
            a.tokens, cfg.num_layers, dtype_name(o.dtype), o.device.str(), o.threads, t, a.repeats,
            a.tokens / t, flops.total() / 1e9, flops.linear / 1e9, flops.attention / 1e9, achieved, peak,
            ratio);
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
    return {bench, [a, prefill] {
                if (prefill->parsed()) return run_bench_prefill(*a);
                throw Error("bench: choose a benchmark (prefill)");
            }};
}

}  // namespace varrate::cli

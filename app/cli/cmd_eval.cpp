// varrate eval: a resumable task-suite sweep (RULER-style tasks x lengths x samples x methods x budgets), one
// record per sample, a summary with paired statistics against a reference method, and the results in
// kvpress's evaluation layout (core/eval.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/cli/eval_plots.h"
#include "base/error.h"
#include "base/file_io.h"
#include "codec/methods/pyramidkv_method.h"
#include "codec/registry.h"
#include "core/session.h"
#include "core/suites/eval.h"
#include "core/suites/niah_record.h"

namespace varrate::cli {

namespace {

std::string series_label(const EvalCell& c) {
    return method_takes_budget(c.method) ? fmt::format("{} k{:g}", c.method, c.budget) : c.method;
}

// "81.2  -5.0 [-9.8, -1.2] p=0.02": a mean and its paired difference to the reference.
std::string cell_text(const EvalCell& c) {
    if (c.n == 0) return c.infeasible > 0 ? "n/a" : "-";
    std::string t = fmt::format("{:.1f}", c.mean);
    const PairedComparison& p = c.vs_reference;
    if (p.n > 0) {
        const Significance v = p.significance();
        t += fmt::format(" {:+.1f} [{:+.1f}, {:+.1f}] pairs={}{}", p.mean_difference, p.interval.low,
                         p.interval.high, p.n,
                         v == Significance::Significant   ? " *"
                         : v == Significance::TooFewPairs ? " (n too small)"
                                                          : "");
    }
    return t;
}

void print_summary(const EvalSummary& s) {
    std::cout << fmt::format(
        "mean score (0-100) per task and length over n samples; then the difference to {} paired by sample "
        "over "
        "the pairs both scored, bootstrap 95% interval ({} resamples); * where it excludes 0 and the sign "
        "test "
        "gives p < 0.05, '(n too small)' below {} pairs; cells are not corrected for multiple comparisons\n",
        s.reference, s.bootstrap_resamples, kMinPairsForSignificance);
    for (const EvalCell& c : s.cells)
        std::cout << fmt::format("  {:<18} L={:<6} {:<24} n={:<4} {}\n", c.task, c.length, series_label(c),
                                 c.n, cell_text(c));
    std::cout << "overall (every task and length pooled):\n";
    for (const EvalCell& c : s.overall) {
        if (c.schedule_fallback > 0)
            spdlog::warn(
                "{}: in {} of {} records the depth schedule was invalid (L x kappa below {} x the window) "
                "and "
                "every layer kept SnapKV's count, as kvpress does: those runs are SnapKV's",
                series_label(c), c.schedule_fallback, c.n + c.infeasible, PyramidKVMethod::kBeta);
        std::cout << fmt::format("  {:<24} n={:<5} {}", series_label(c), c.n, cell_text(c));
        if (c.vs_reference.n > 0)
            std::cout << fmt::format("  ({} better, {} worse, sign test p={:.3g})", c.vs_reference.wins,
                                     c.vs_reference.losses, c.vs_reference.sign_test_p);
        std::cout << "\n";
    }
}

// DIR/plots/ (app/cli/eval_plots.h); a build without Qt Gui says so and goes on.
void write_plots(const EvalSummary& s, const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> written;
    std::string why_not;
    if (!write_eval_plots(s, dir / "plots", written, why_not)) {
        spdlog::warn("plots skipped: {}", why_not);
        return;
    }
    std::vector<std::string> names;
    for (const auto& p : written) names.push_back(p.filename().string());
    std::cout << fmt::format("wrote {} plots in {}: {}\n", written.size(), (dir / "plots").string(),
                             fmt::join(names, ", "));
}

struct EvalArgs {
    std::string model, basis, essay_file, out;
    RuntimeArgs runtime;
    std::string tasks, lengths;
    std::string methods = join_method_names();
    std::string mode = "query-agnostic";
    std::string reference = reference_method_name();
    CodecSettings settings;
    CodecFlags codec_flags;
    std::vector<double> budgets;
    int64_t samples = 1, max_new_tokens = 0, bootstrap = kBootstrapResamples;
    uint64_t seed = 42;
    bool chat = false;
    std::string shard;
    std::vector<std::string> longbench_files;
    std::string longbench_config;
};

EvalSweepOptions options_from(const EvalArgs& a) {
    EvalSweepOptions o;
    o.tasks = split_comma_list(a.tasks);
    if (o.tasks.size() == 1 && o.tasks[0] == "all")
        o.tasks = a.longbench_files.empty() ? ruler_task_names() : std::vector<std::string>{};
    o.lengths = parse_id_list(a.lengths, "--lengths");
    o.samples = a.samples;
    o.methods = parse_methods(a.methods);
    o.settings = a.settings;
    apply_model_codec_defaults(a.codec_flags, a.model, o.settings);
    o.budgets = a.budgets;
    o.mode = parse_mode(a.mode);
    o.ruler.seed = a.seed;
    o.ruler.chat = a.chat;
    if (!a.essay_file.empty()) o.ruler.essay_text = read_filler_file(a.essay_file, "essay", o.haystack_name);
    o.max_new_tokens = a.max_new_tokens;
    o.out_dir = a.out;
    o.reference = a.reference;
    o.bootstrap_resamples = a.bootstrap;
    if (!a.shard.empty()) o.shard = parse_shard(a.shard);
    for (const std::string& f : a.longbench_files) o.longbench_files.push_back(f);
    o.longbench_config = a.longbench_config;
    if (!o.longbench() && o.tasks.empty()) throw Error("--tasks: no task given (RULER tasks, or all)");
    return resolve_eval_suite(o);
}

int run_eval_cmd(const EvalArgs& a) {
    const EvalSweepOptions o = options_from(a);
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec || !std::filesystem::is_directory(o.out_dir))
        throw Error(a.out + ": cannot create the output directory");
    SigintGuard sigint;
    JobControl job;
    job.cancel = &sigint_flag();
    auto session = Session::open(a.model, runtime_options(a.runtime), a.basis, job);
    SweepStats stats;
    const auto run = [&](const JobControl& j, const SweepProgressFn& progress) {
        return run_eval_sweep(*session, o, j, progress);
    };
    if (!run_sweep_command("eval", a.out, o.shard, job, run, stats)) return 0;
    const EvalSummary summary = summarize_eval(o);
    write_eval_summary(summary, o);
    print_summary(summary);
    write_plots(summary, o.out_dir);
    std::cout << fmt::format("{} records: {} computed, {} reused ({} documents); wrote {} and {}\n",
                             stats.total, stats.computed, stats.skipped, stats.documents,
                             (o.out_dir / "summary.json").string(), (o.out_dir / "kvpress").string());
    return 0;
}

}  // namespace

int summarize_eval_folder(const std::filesystem::path& dir) {
    const EvalSweepOptions o = read_eval_grid(dir);
    const EvalSummary summary = summarize_eval(o);
    write_eval_summary(summary, o);
    print_summary(summary);
    write_plots(summary, dir);
    std::cout << fmt::format("wrote {}\n", (dir / "summary.json").string());
    return 0;
}

Command add_eval(CLI::App& root) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* sub = root.add_subcommand("eval",
                                        "Task-suite sweep (RULER-style tasks, or LongBench-format files): "
                                        "tasks x lengths x samples x methods x budgets, resumable, with "
                                        "paired statistics and kvpress-layout results");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--basis", a->basis,
                    "codec basis file (default: beside the model, else self-calibrated)");
    sub->add_option("--tasks", a->tasks,
                    "comma-separated RULER tasks, or all (" +
                        fmt::format("{}", fmt::join(ruler_task_names(), ", ")) +
                        "); with --longbench, the datasets to run (default: every one in the files)");
    sub->add_option(
           "--lengths", a->lengths,
           "RULER: target lengths in the model's tokens (prompt + tokens to generate), e.g. 1024,2048; "
           "LongBench: prompts truncated from the middle to this many tokens")
        ->required();
    sub->add_option(
           "--longbench", a->longbench_files,
           "LongBench-format JSONL file(s) (input, context, answers, length, dataset, all_classes, _id): "
           "run LongBench's prompts and metrics on them instead of RULER's tasks")
        ->check(CLI::ExistingFile);
    sub->add_option("--longbench-config", a->longbench_config,
                    "per-dataset prompt templates, generation lengths and metrics (default: the shipped "
                    "eval/longbench.json)")
        ->check(CLI::ExistingFile);
    sub->add_option("--samples", a->samples, "samples per (task, length), each with its own keys and needles")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub->add_option("--seed", a->seed, "seed of the samples")->capture_default_str();
    sub->add_option("--methods", a->methods,
                    "comma-separated methods (" + fmt::format("{}", fmt::join(method_names(), ", ")) + ")")
        ->capture_default_str();
    sub->add_option("--mode", a->mode, "query-aware or query-agnostic")->capture_default_str();
    a->codec_flags = add_codec_options(*sub, a->settings, BudgetOption::One, &a->budgets);
    sub->add_option("--reference", a->reference,
                    "the method every other one is compared with, sample by sample")
        ->capture_default_str();
    sub->add_option("--bootstrap", a->bootstrap, "bootstrap resamples of the paired intervals")
        ->capture_default_str()
        ->check(CLI::Range(kMinBootstrapResamples, int64_t{10000000}));
    sub->add_option("--essay-file", a->essay_file,
                    "text of the essay haystacks (default: the procedural filler)")
        ->check(CLI::ExistingFile);
    sub->add_flag("--chat", a->chat, "wrap context and question in the model's chat template");
    sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per answer (0: each task's own, as RULER)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
    sub->add_option(
        "--shard", a->shard,
        "run only part I of N of the samples (I/N, 0-based); the shards share --out, and `varrate "
        "summarize OUT` merges them once all have finished");
    sub->add_option("--out", a->out,
                    "output directory (records/, sweep.json, summary.json, summary.csv, kvpress/<run>/)")
        ->required();
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_eval_cmd(*a); }};
}

}  // namespace varrate::cli

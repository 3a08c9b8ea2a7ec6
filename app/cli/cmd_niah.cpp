// varrate niah: a resumable needle-in-a-haystack sweep over methods x budgets x context lengths x depths x
// samples, with one JSON record per cell, an accuracy summary with 95 % intervals (JSON, CSV, the terminal)
// and a heatmap per method and budget.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/cli/niah_heatmap.h"
#include "base/error.h"
#include "base/file_io.h"
#include "codec/methods/pyramidkv_method.h"
#include "codec/registry.h"
#include "core/session.h"
#include "core/suites/niah.h"

namespace varrate::cli {

namespace {

std::vector<double> parse_depths(const std::string& text) {
    std::vector<double> out;
    for (const std::string& item : split_comma_list(text)) {
        size_t used = 0;
        double v = -1;
        try {
            v = std::stod(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || !(v >= 0 && v <= 100))
            throw Error("--depths: '" + item + "' is not a percent between 0 and 100");
        out.push_back(v);
    }
    if (out.empty()) throw Error("--depths: no depth given");
    return out;
}

struct NiahArgs {
    std::string model, basis, haystack_file, out;
    RuntimeArgs runtime;
    std::string methods = join_method_names();  // the default methods
    std::string lengths, depths = "0,25,50,75,100";
    std::string mode = "query-agnostic";
    std::string needles = "fresh";
    CodecSettings settings;
    CodecFlags codec_flags;
    std::vector<double> budgets;  // --budget's list; empty: the model's default budget
    int64_t samples = 1, distractors = 0, max_new_tokens = 32;
    uint64_t seed = 42;
    bool chat = false;
    std::string shard;  // "I/N", or "" for the whole sweep
};

// summary.json, summary.csv and heatmap.png from the records on disk.
NiahSummary write_outputs(const NiahSweepOptions& o) {
    const NiahSummary summary = summarize_niah(o);
    write_niah_summary(summary, o.out_dir);
    std::string why_not;
    if (!write_niah_heatmap(summary, o.out_dir / "heatmap.png", why_not))
        spdlog::warn("heatmap.png skipped: {}", why_not);
    return summary;
}

// One line per outcome: the share of the needle value's K/V the method kept, layer by layer, so that "the
// method dropped the needle" and "the model misread a kept needle" can be told apart.
void print_retention(const NiahSummary& s, const NiahSeries& series) {
    const auto it = s.retention.find(series.key());
    if (!method_takes_budget(series.method) || it == s.retention.end()) return;
    auto line = [](const char* what, const RetentionTally& t) {
        if (t.n == 0) return;
        std::string layers;
        for (double k : t.mean_layer_kept_fraction()) layers += fmt::format(" {:.2f}", k);
        std::string salience;
        if (t.mean_salience_percentile() >= 0)
            salience = fmt::format(", salience percentile {:.2f}", t.mean_salience_percentile());
        std::cout << fmt::format("  {} ({}): kept per layer{}; error {:.2f}{}\n", what, t.n, layers,
                                 t.mean_rel_error(), salience);
    };
    line("needle value, answered right", it->second.needle_correct);
    line("needle value, answered wrong", it->second.needle_wrong);
    line("distractor values", it->second.distractors);
}

// "90% [60-98]": an accuracy and its Wilson 95 % interval, in percent.
std::string accuracy_text(const NiahCell& c) {
    const Interval ci = c.interval();
    return fmt::format("{:.0f}% [{:.0f}-{:.0f}]", 100.0 * c.accuracy(), 100.0 * ci.low, 100.0 * ci.high);
}

void print_summary(const NiahSummary& s) {
    std::cout << fmt::format(
        "needles {} ({}); accuracy [95% Wilson interval] per method and budget, cell and overall\n",
        s.needles,
        s.needles == "fixed" ? "a sample's needle at every length and depth"
                             : "a new needle in every document");
    int64_t infeasible = 0;
    for (size_t m = 0; m < s.series.size(); ++m) {
        const NiahCell all = s.overall(m);
        // A method set by its own settings (KIVI) ran once: named with the footprint it measured.
        const std::string title =
            !method_takes_budget(s.series[m].method) && method_compresses(s.series[m].method) && all.n > 0
                ? fmt::format("{} (measured footprint {:.3f})", s.series[m].label(), s.footprint.at(m))
                : s.series[m].label();
        if (!s.schedule_fallback.empty() && s.schedule_fallback[m] > 0)
            spdlog::warn(
                "{}: in {} of {} records the depth schedule was invalid (L x kappa below {} x the window) "
                "and every layer kept SnapKV's count, as kvpress does: those runs are SnapKV's",
                s.series[m].label(), s.schedule_fallback[m], all.n, PyramidKVMethod::kBeta);
        std::cout << fmt::format(
            "{}: {} of {} correct{}\n", title, all.correct, all.n,
            all.n > 0 ? fmt::format(" ({:.1f}%, 95% CI {:.1f}-{:.1f}%)", 100.0 * all.accuracy(),
                                    100.0 * all.interval().low, 100.0 * all.interval().high)
                      : "");
        std::string row = fmt::format("  {:>7}", "depth");
        for (int64_t l : s.lengths) row += fmt::format(" {:>14}", l);
        std::cout << row << "\n";
        for (size_t d = 0; d < s.depths.size(); ++d) {
            row = fmt::format("  {:>6}%", fmt::format("{:g}", s.depths[d]));
            for (size_t l = 0; l < s.lengths.size(); ++l) {
                const NiahCell& c = s.cell(m, d, l);
                row += fmt::format(" {:>14}", c.n > 0 ? accuracy_text(c) : c.infeasible > 0 ? "n/a" : "-");
                infeasible += c.infeasible;
            }
            std::cout << row << "\n";
        }
        print_retention(s, s.series[m]);
    }
    if (infeasible > 0)
        std::cout << fmt::format(
            "n/a: {} record{} where the budget cannot be met at that length (their \"infeasible\" "
            "field names the smallest feasible kappa)\n",
            infeasible, infeasible == 1 ? "" : "s");
}

int run_niah_cmd(const NiahArgs& a) {
    NiahSweepOptions o;
    for (int64_t l : parse_id_list(a.lengths, "--lengths")) {
        if (l < 1) throw Error("--lengths: context lengths must be positive");
        o.lengths.push_back(l);
    }
    o.depths = parse_depths(a.depths);
    o.samples = a.samples;
    o.methods = parse_methods(a.methods);
    o.settings = a.settings;
    apply_model_codec_defaults(a.codec_flags, a.model, o.settings);
    o.budgets = a.budgets;  // empty (no --budget): the model's default, o.settings.budget
    o.mode = parse_mode(a.mode);
    o.doc.needles = parse_needle_protocol(a.needles);
    o.doc.seed = a.seed;
    o.doc.distractors = a.distractors;
    o.doc.chat = a.chat;
    if (!a.haystack_file.empty())
        o.doc.haystack_text = read_filler_file(a.haystack_file, "haystack", o.haystack_name);
    o.max_new_tokens = a.max_new_tokens;
    o.out_dir = a.out;
    if (!a.shard.empty()) o.shard = parse_shard(a.shard);
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec || !std::filesystem::is_directory(o.out_dir))
        throw Error(a.out + ": cannot create the output directory");

    SigintGuard sigint;
    JobControl job;
    job.cancel = &sigint_flag();
    auto session = Session::open(a.model, runtime_options(a.runtime), a.basis, job);
    const int64_t longest = *std::max_element(o.lengths.begin(), o.lengths.end());
    const std::string beyond = positions_warning(
        session->model().config(), longest + o.max_new_tokens,
        fmt::format("the longest document ({} tokens) plus its question and up to {} generated tokens",
                    longest, o.max_new_tokens));
    if (!beyond.empty()) spdlog::warn("{}", beyond);
    SweepStats stats;
    const auto run = [&](const JobControl& j, const SweepProgressFn& progress) {
        return run_niah_sweep(*session, o, j, progress);
    };
    // Interrupted, the whole sweep's summary covers the records written so far.
    const auto summarise_so_far = [&] {
        if (o.shard.whole()) write_outputs(o);
    };
    if (!run_sweep_command("niah", a.out, o.shard, job, run, stats, summarise_so_far)) return 0;
    const NiahSummary summary = write_outputs(o);
    print_summary(summary);
    std::cout << fmt::format("{} records: {} computed, {} reused ({} documents); wrote {}\n", stats.total,
                             stats.computed, stats.skipped, stats.documents,
                             (o.out_dir / "summary.json").string());
    return 0;
}

}  // namespace

Command add_niah(CLI::App& root) {
    auto a = std::make_shared<NiahArgs>();
    CLI::App* sub = root.add_subcommand(
        "niah",
        "Needle-in-a-haystack sweep: methods x budgets x context lengths x depths, resumable, with accuracy "
        "intervals and heatmaps");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--basis", a->basis,
                    "codec basis file (default: beside the model, else self-calibrated)");
    sub->add_option("--haystack-file", a->haystack_file,
                    "haystack text (repeated as needed; default: the procedural filler)")
        ->check(CLI::ExistingFile);
    sub->add_option("--lengths", a->lengths, "context lengths in the model's tokens, e.g. 512,1024,2048")
        ->required();
    sub->add_option("--depths", a->depths, "needle depths in percent")->capture_default_str();
    sub->add_option("--samples", a->samples, "documents per (length, depth)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub->add_option("--seed", a->seed, "seed of the needles and the filler")->capture_default_str();
    sub->add_option("--needles", a->needles,
                    "fresh: every document draws its own needle and distractors (RULER); fixed: a sample's "
                    "needles at every length and depth (the paper's protocol, and sweeps made before this "
                    "option)")
        ->capture_default_str()
        ->check(CLI::IsMember({"fresh", "fixed"}));
    sub->add_option("--methods", a->methods,
                    "comma-separated methods (" + fmt::format("{}", fmt::join(method_names(), ", ")) + ")")
        ->capture_default_str();
    sub->add_option("--mode", a->mode, "query-aware or query-agnostic")->capture_default_str();
    a->codec_flags = add_codec_options(*sub, a->settings, BudgetOption::One, &a->budgets);
    sub->add_option("--distractors", a->distractors, "extra needles with other keys")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1000}));
    sub->add_flag("--chat", a->chat, "wrap context and question in the model's chat template");
    sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per answer")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_option(
           "--out", a->out,
           "output directory (records/<method>[/k<budget>]/, summary.json, summary.csv, heatmap.png)")
        ->required();
    sub->add_option("--shard", a->shard,
                    "run only part I of N of the documents (I/N, 0-based), e.g. one task of a job array; the "
                    "shards share --out, and `varrate summarize OUT` merges them once all have finished");
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_niah_cmd(*a); }};
}

int summarize_niah_folder(const std::filesystem::path& dir) {
    const NiahSweepOptions o = read_niah_grid(dir);
    const NiahSummary summary = write_outputs(o);
    print_summary(summary);
    std::cout << fmt::format("wrote {}\n", (dir / "summary.json").string());
    return 0;
}

}  // namespace varrate::cli

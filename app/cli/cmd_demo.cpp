// varrate demo: the side-by-side demonstration on one generated needle document — its question, and the
// answers of every method in both compression modes with the accounted footprints. Defaults to the embedded
// demo model (core/data_paths.h: the checkout's resources/ or the installed share/varrate-studio/), so a
// fresh checkout or an installed package runs it without downloading weights.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "core/compare.h"
#include "core/data_paths.h"
#include "core/session.h"
#include "core/suites/niah.h"

namespace varrate::cli {

namespace {

// kappa unless --budget is given (the model's recorded budget is for general use).
constexpr double kDemoBudget = DemoRegime{}.budget;

struct DemoArgs {
    std::string model;  // empty: the embedded demo model
    std::string basis;
    std::string methods = join_method_names();  // the default methods
    // The regime where the methods part ways on the demo model (core/data_paths.h DemoRegime), so that a
    // first run shows what the allocation changes rather than identical right answers.
    int64_t length = DemoRegime{}.length, distractors = DemoRegime{}.distractors;
    double depth = DemoRegime{}.depth_percent;
    uint64_t seed = DemoRegime{}.seed;
    CodecSettings settings;
    CodecFlags codec_flags;
    RuntimeArgs runtime;
};

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    const auto b = s.find_first_not_of(' ');
    return b == std::string::npos ? std::string() : s.substr(b);
}

std::string demo_model_or_throw() {
    const std::string dir = find_demo_model();
    if (!dir.empty()) return dir;
    std::string looked;
    for (const std::string& root : data_roots())
        looked += (looked.empty() ? "" : ", ") + root + "/models/" + kDemoModelName;
    throw Error("varrate demo: no embedded demo model found (looked in " + looked + "): give --model DIR");
}

int run_demo(DemoArgs a) {
    if (a.model.empty()) a.model = demo_model_or_throw();
    auto session = Session::open(a.model, runtime_options(a.runtime), a.basis);
    CodecSettings settings = a.settings;
    apply_model_codec_defaults(a.codec_flags, a.model, settings);
    if (a.codec_flags.budget->count() == 0) settings.budget = kDemoBudget;
    NiahDocOptions doc_options;
    doc_options.seed = a.seed;
    doc_options.distractors = a.distractors;
    // One document, not a grid: keep the needle a (seed, sample) has always had, so --seed reproduces it.
    doc_options.needles = NeedleProtocol::Fixed;
    NiahGenerator generator(session->tokenizer(), doc_options);
    const NiahDocument doc = generator.generate(a.length, a.depth, 0);

    std::cout << fmt::format("model     {}\n", a.model);
    const RuntimeOptions& ro = session->model().options();
    std::cout << fmt::format("runtime   {}, {}\n", ro.device.str(), ro.dtype_reason);
    std::cout << fmt::format("document  {} tokens, needle at {:g}% depth, {} distractor needle(s)\n",
                             doc.context_tokens, a.depth, doc.distractor_needles.size());
    std::cout << fmt::format("needle    {}\n", doc.needle);
    for (const auto& d : doc.distractor_needles) std::cout << fmt::format("distractor {}\n", d);
    std::cout << fmt::format("question  {}\n", doc.question);
    std::cout << fmt::format("prompt    ... Answer: {}\n", doc.answer_prefix);
    std::cout << fmt::format("expected  {}\n", doc.expected);
    std::cout << fmt::format(
        "budget    kappa {:g}, r_min {}, rank {}, stride {}, anchors {}, window {}, "
        "obs-window {}\n\n",
        settings.budget, settings.r_min, settings.rank, settings.stride, settings.anchors, settings.window,
        settings.obs_window);

    CompareRequest req;
    req.context = doc.context;
    req.questions = {doc.question};
    req.answers = {doc.expected};
    req.answer_prefixes = {doc.answer_prefix};
    req.methods = parse_methods(a.methods);
    req.settings = settings;
    req.max_new_tokens = 24;
    size_t width = 8;  // the method column fits the longest name asked for (varrate@observed-attention)
    for (const std::string& m : req.methods) width = std::max(width, m.size());
    std::cout << fmt::format("{:<15} {:<{}} {:>9} {:>9} {:>8}  {}\n", "mode", "method", width, "accounted",
                             "resident", "correct", "answer");
    for (const CompressionMode mode : {CompressionMode::QueryAware, CompressionMode::QueryAgnostic}) {
        req.mode = mode;
        const CompareResult r = run_compare(*session, req, terminal_job());
        if (mode == CompressionMode::QueryAware)
            for (const std::string& w : r.warnings) spdlog::warn("{}", w);
        for (const MethodRun& run : r.runs)
            std::cout << fmt::format(
                "{:<15} {:<{}} {:>8.1f}% {:>8.1f}% {:>8}  {}{}\n", to_string(mode), run.method, width,
                100.0 * run.footprint_fraction, 100.0 * run.resident_fraction(),
                run.correct.at(0) ? "yes" : "no", one_line(run.answers.at(0)),
                run.self_calibrated ? " (self-calibrated, " + run.basis_accounting + ")" : "");
    }
    std::cout << fmt::format(
        "\nbasis: {}. accounted: the bytes the budget counts; resident: the bytes the cache the answers were "
        "decoded from holds, measured (VarRate/flat: the compressed store: the exact rows, each coded "
        "token's anchor set, rank (none for flat: its ranks follow from the budget) and coefficients; "
        "positions are derived and the shared basis is apart). query-aware: the question is in the cache "
        "when it is compressed; query-agnostic: the cache is compressed once, before any question (paper "
        "4.3).\n",
        session->basis_source().empty() ? "self-calibrated" : session->basis_source());
    return 0;
}

}  // namespace

Command add_demo(CLI::App& root) {
    auto a = std::make_shared<DemoArgs>();
    CLI::App* sub = root.add_subcommand(
        "demo", "Side by side on one generated needle document: every method, both modes, with footprints");
    sub->add_option("--model", a->model,
                    "Hugging Face model directory (default: the embedded demo model, from resources/models "
                    "in a checkout or share/varrate-studio/models beside an installed varrate)")
        ->check(CLI::ExistingDirectory);
    sub->add_option("--basis", a->basis,
                    "codec basis file (default: beside the model, else self-calibrated)");
    sub->add_option("--methods", a->methods, "comma-separated methods")->capture_default_str();
    sub->add_option("--length", a->length, "document length in the model's tokens")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
    sub->add_option("--depth", a->depth, "needle depth in percent")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 100.0));
    sub->add_option("--distractors", a->distractors, "needles with other keys")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{100}));
    sub->add_option("--seed", a->seed, "seed of the document")->capture_default_str();
    a->settings.budget = kDemoBudget;  // shown as --budget's default
    a->codec_flags = add_codec_options(*sub, a->settings);
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_demo(*a); }};
}

}  // namespace varrate::cli

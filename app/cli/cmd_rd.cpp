// varrate rd: rate-distortion curves. Every method over a grid of budgets on one context file or on
// generated needle documents, one prefill per document; writes rd.json and rd.csv and prints the curves.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "core/session.h"
#include "core/suites/rate_distortion.h"

namespace varrate::cli {

namespace {

struct RdArgs {
    std::string model, basis, out;
    RuntimeArgs runtime;
    std::string methods = join_method_names();  // the default methods, `full` as the reference
    std::vector<double> kappas = default_budget_grid();
    std::vector<double> answer_at;  // empty: the default points that lie on the grid
    CLI::Option* answer_at_opt = nullptr;
    std::string mode = "query-agnostic";
    CodecSettings settings;
    CodecFlags codec_flags;
    int64_t max_new_tokens = 32;
    bool chat = false;
    // One context file ...
    std::string context_file;
    std::vector<std::string> questions, answers, answer_prefixes;
    // ... or generated needle documents.
    std::vector<int64_t> lengths;
    std::vector<double> depths = {0, 25, 50, 75, 100};
    int64_t samples = 1, distractors = 0;
    uint64_t seed = 42;
    std::string haystack_file;
};

std::vector<RdDocument> documents(const RdArgs& a, const Tokenizer& tok) {
    if (!a.context_file.empty()) {
        RdDocument d;
        d.id = "file";
        d.context = read_document_file(a.context_file);
        d.questions = a.questions;
        d.answers = a.answers;
        d.answer_prefixes = a.answer_prefixes;
        return {d};
    }
    NiahDocOptions o;
    o.seed = a.seed;
    o.distractors = a.distractors;
    o.chat = a.chat;
    if (!a.haystack_file.empty()) {
        o.haystack_text = read_document_file(a.haystack_file);
        if (o.haystack_text.find_first_not_of(" \t\r\n") == std::string::npos)
            throw Error(a.haystack_file + ": the haystack file is empty");
    }
    return niah_rd_documents(tok, o, a.lengths, a.depths, a.samples);
}

std::string pct(double v) {
    return v >= 0 ? fmt::format("{:.4f}", v) : "-";
}

void print_table(const RdResult& r) {
    std::cout << fmt::format("{:<8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>5} {:>5}  {}\n", "method", "kappa",
                             "accounted", "K/V err", "weighted", "attn out", "docs", "n/a",
                             "accuracy [Wilson 95 %]");
    for (const RdPoint& p : r.points) {
        std::string acc;
        if (p.answer_point && p.answered > 0)
            acc = fmt::format("{}/{} {:.1f}% [{:.1f}, {:.1f}]", p.correct, p.answered, 100.0 * p.accuracy(),
                              100.0 * p.ci.low, 100.0 * p.ci.high);
        std::cout << fmt::format("{:<8} {:>6g} {:>9} {:>9} {:>9} {:>9} {:>5} {:>5}  {}\n", p.method, p.kappa,
                                 p.footprint >= 0 ? fmt::format("{:.2f}%", 100.0 * p.footprint) : "-",
                                 pct(p.mean_rel_error), pct(p.weighted_rel_error), pct(p.attn_output_error),
                                 p.documents, p.infeasible, acc);
    }
    const bool any_infeasible =
        std::any_of(r.points.begin(), r.points.end(), [](const RdPoint& p) { return p.infeasible > 0; });
    if (any_infeasible)
        std::cout
            << "n/a: documents whose length cannot meet that kappa (rd.json's samples name the smallest "
               "feasible kappa)\n";
    // Where the attention output goes wrong, layer by layer, at the points answers were decoded.
    std::cout << "attention-output error per layer at the answer points:\n";
    for (const RdPoint& p : r.points) {
        if (!p.answer_point || !method_compresses(p.method) || p.layers.empty()) continue;
        std::string row = fmt::format("  {:<8} {:>6g}", p.method, p.kappa);
        for (const RdLayer& l : p.layers) row += fmt::format(" {:.4f}", l.attn_output_error);
        std::cout << row << "\n";
    }
}

int run_rd_cmd(RdArgs a) {
    const bool from_file = !a.context_file.empty();
    if (from_file == !a.lengths.empty())
        throw Error(
            "give either --context-file (with --question/--answer) or --lengths (generated needle "
            "documents), not both");
    if (!from_file && (!a.questions.empty() || !a.answers.empty() || !a.answer_prefixes.empty()))
        throw Error(
            "--question, --answer and --answer-prefix go with --context-file; generated documents ask "
            "their own needle question");
    RdRequest req;
    req.methods = parse_methods(a.methods);
    req.kappas = a.kappas;
    if (a.answer_at_opt->count() > 0) {
        req.answer_at = a.answer_at;
    } else {
        req.answer_at.clear();
        for (double k : default_rd_answer_at())
            for (double g : a.kappas)
                if (std::abs(k - g) <= 1e-12) req.answer_at.push_back(k);
    }
    req.mode = parse_mode(a.mode);
    req.settings = a.settings;
    apply_model_codec_defaults(a.codec_flags, a.model, req.settings);
    req.max_new_tokens = a.max_new_tokens;
    req.chat = a.chat;
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (ec || !std::filesystem::is_directory(a.out))
        throw Error(a.out + ": cannot create the output directory");

    const auto t0 = std::chrono::steady_clock::now();
    auto session = Session::open(a.model, runtime_options(a.runtime), a.basis);
    req.documents = documents(a, session->tokenizer());
    const RdResult r = run_rate_distortion(*session, req, terminal_job());
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& w : r.warnings) spdlog::warn("{}", w);

    nlohmann::json j = to_json(r, req);
    std::filesystem::path dir = session->model_dir();
    if (dir.filename().empty()) dir = dir.parent_path();
    j["model"] = dir.filename().string();
    j["model_dir"] = session->model_dir().string();
    j["model_fingerprint"] = session->fingerprint();
    if (from_file) {
        j["source"] = {{"context_file", a.context_file}};
    } else {
        j["source"] = {{"niah",
                        {{"lengths", a.lengths},
                         {"depths", a.depths},
                         {"samples", a.samples},
                         {"distractors", a.distractors},
                         {"seed", a.seed},
                         {"haystack", a.haystack_file.empty() ? "procedural" : a.haystack_file}}}};
    }
    j["wall_s"] = wall_s;
    const std::filesystem::path out(a.out);
    write_file_atomic(out / "rd.json", j.dump(2) + "\n");
    write_file_atomic(out / "rd.csv", rd_csv(r));

    std::cout << fmt::format(
        "{} document{}, {}, basis: {}; footprints accounted (kappa = fraction of the cache "
        "kept)\n",
        req.documents.size(), req.documents.size() == 1 ? "" : "s", to_string(req.mode),
        r.basis_source.empty() ? "none needed" : r.basis_source);
    print_table(r);
    const RdTiming& t = r.timing;
    std::cout << fmt::format(
        "wall {:.1f} s (prefill {:.1f} s, basis {:.1f} s, analyse {:.1f} s, allocate {:.1f} s, materialise "
        "{:.1f} "
        "s, decode {:.1f} s); wrote {} and {}\n",
        wall_s, t.prefill / 1e3, t.basis / 1e3, t.analyse / 1e3, t.allocate / 1e3, t.materialise / 1e3,
        t.decode / 1e3, (out / "rd.json").string(), (out / "rd.csv").string());
    return 0;
}

}  // namespace

Command add_rd(CLI::App& root) {
    auto a = std::make_shared<RdArgs>();
    CLI::App* sub = root.add_subcommand(
        "rd",
        "Rate-distortion curves: every method's error and accuracy over a grid of budgets, one prefill per "
        "document");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--basis", a->basis,
                    "codec basis file (default: beside the model, else self-calibrated)");
    sub->add_option("--context-file", a->context_file, "one document (with --question/--answer)")
        ->check(CLI::ExistingFile);
    sub->add_option("--question", a->questions, "a question about the context file (repeatable)");
    sub->add_option("--answer", a->answers,
                    "the expected answer of each question (repeatable, containment match)");
    sub->add_option("--answer-prefix", a->answer_prefixes,
                    "the start of each question's reply, given after the question (repeatable)");
    sub->add_option("--lengths", a->lengths,
                    "generated needle documents: context lengths in tokens, e.g. 512,1024")
        ->delimiter(',')
        ->check(CLI::PositiveNumber);
    sub->add_option("--depths", a->depths, "needle depths in percent")
        ->delimiter(',')
        ->check(CLI::Range(0.0, 100.0))
        ->capture_default_str();
    sub->add_option("--samples", a->samples, "documents per (length, depth)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub->add_option("--distractors", a->distractors, "extra needles with other keys")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1000}));
    sub->add_option("--seed", a->seed, "seed of the needles and the filler")->capture_default_str();
    sub->add_option("--haystack-file", a->haystack_file,
                    "haystack text (repeated as needed; default: the procedural filler)")
        ->check(CLI::ExistingFile);
    sub->add_option("--methods", a->methods,
                    "comma-separated methods (" + fmt::format("{}", fmt::join(method_names(), ", ")) +
                        "); full is the reference point at kappa 1")
        ->capture_default_str();
    sub->add_option("--kappas", a->kappas, "the budget grid: fractions of the cache kept, in (0, 1]")
        ->delimiter(',')
        ->capture_default_str();
    a->answer_at_opt =
        sub->add_option("--answer-at", a->answer_at,
                        "grid points where answers are decoded (default: those of 0.05,0.1,0.2 "
                        "on the grid)")
            ->delimiter(',');
    sub->add_option("--mode", a->mode, "query-agnostic or query-aware")->capture_default_str();
    a->codec_flags = add_codec_options(*sub, a->settings, BudgetOption::None);  // the grid replaces --budget
    sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per answer")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_flag("--chat", a->chat, "wrap context and question in the model's chat template");
    sub->add_option("--out", a->out, "output directory (rd.json, rd.csv)")->required();
    add_runtime_options(*sub, a->runtime);
    return {sub, [a] { return run_rd_cmd(*a); }};
}

}  // namespace varrate::cli

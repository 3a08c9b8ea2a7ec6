// varrate compare / varrate ppl: compression methods side by side on one document, and perplexity over a
// compressed prefix.
#include <algorithm>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "core/compare.h"

namespace varrate::cli {

namespace {

struct SessionArgs {
    std::string model, basis;
    RuntimeArgs runtime;
    std::string methods = join_method_names();  // the default methods
    CodecSettings settings;
    std::vector<double> budgets;  // --budget as a list
    CodecFlags codec_flags;
};

void add_session_options(CLI::App& sub, SessionArgs& a) {
    sub.add_option("--model", a.model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub.add_option("--basis", a.basis, "codec basis file (default: beside the model, else self-calibrated)");
    sub.add_option("--methods", a.methods,
                   "comma-separated methods (" + fmt::format("{}", fmt::join(method_names(), ", ")) + ")")
        ->capture_default_str();
    a.codec_flags = add_codec_options(sub, a.settings, BudgetOption::One, &a.budgets);
    add_runtime_options(sub, a.runtime);
}

// " (self-calibrated, basis charged)" / " (self-calibrated, basis not charged)" / "".
std::string basis_note(bool self_calibrated, const std::string& accounting) {
    return self_calibrated ? " (self-calibrated, " + accounting + ")" : "";
}

std::unique_ptr<Session> open_session(const SessionArgs& a) {
    return Session::open(a.model, runtime_options(a.runtime), a.basis);
}

struct CompareArgs {
    SessionArgs session;
    std::string context_file;
    std::vector<std::string> questions, answers, answer_prefixes;
    std::string mode = "query-aware";
    int64_t max_new_tokens = 32;
    bool chat = false;
    std::string json_out, rank_log;
};

int run_compare_cmd(const CompareArgs& a) {
    CompareRequest req;
    req.methods = parse_methods(a.session.methods);
    req.settings = a.session.settings;
    apply_model_codec_defaults(a.session.codec_flags, a.session.model, req.settings);
    req.budgets = a.session.budgets;
    req.mode = parse_mode(a.mode);
    req.context = read_document_file(a.context_file);
    req.questions = a.questions;
    req.answers = a.answers;
    req.answer_prefixes = a.answer_prefixes;
    req.max_new_tokens = a.max_new_tokens;
    req.chat = a.chat;
    auto session = open_session(a.session);
    const CompareResult r = run_compare(*session, req, terminal_job());
    const nlohmann::json j = to_json(r, req);
    if (!a.json_out.empty()) write_file_atomic(a.json_out, j.dump(2) + "\n");
    if (!a.rank_log.empty()) write_file_atomic(a.rank_log, rank_log_csv(r, session->tokenizer()));
    for (const std::string& w : r.warnings) spdlog::warn("{}", w);
    std::cout << fmt::format(
        "{} tokens of context, {}, basis: {}; one prefill capture ({:.1f} MiB) for every "
        "method and budget\n",
        r.runs.empty() ? 0 : r.runs[0].context_ids.size(), to_string(req.mode),
        r.basis_source.empty() ? "none needed" : r.basis_source,
        static_cast<double>(r.capture_bytes) / (1024.0 * 1024.0));
    std::cout
        << (req.settings.paper_accounting
                ? "accounted footprints under the paper's convention (anchor indices and a "
                  "self-calibrated basis not charged); resident: what the decoded cache holds, measured\n"
                : "accounted footprints (anchor indices and a self-calibrated basis charged); resident: what "
                  "the decoded cache holds, measured (VarRate/flat: the compressed store)\n");
    // The method column as wide as the longest name (registered names reach 18 characters).
    size_t width = 6;
    for (const MethodRun& run : r.runs) width = std::max(width, run.method.size());
    std::cout << fmt::format("{:<{}} {:>6} {:>9} {:>9} {:>8} {:>7} {:>7} {:>11} {:>11}  {}\n", "method",
                             width, "kappa", "accounted", "resident", "basis", "kv err", "quant",
                             "prefill ms", "codec ms", "answers");
    for (const MethodRun& run : r.runs) {
        std::string answers;
        for (size_t i = 0; i < run.answers.size(); ++i) {
            std::string ans = run.answers[i];
            for (char& c : ans)
                if (c == '\n') c = ' ';
            answers += (i ? " | " : "") + ans;
            if (i < run.correct.size()) answers += run.correct[i] ? " [ok]" : " [wrong]";
        }
        const double basis_share =
            run.full_bytes > 0 ? static_cast<double>(run.basis_bytes) / static_cast<double>(run.full_bytes)
                               : 0;
        if (!run.infeasible.empty()) {
            std::cout << fmt::format("{:<{}} {:>6g} infeasible: {}\n", run.method, width, run.budget,
                                     run.infeasible);
            continue;
        }
        // Mean over layers of the per-token relative error, and of its quantization part (the rest is
        // truncation or eviction).
        double err = 0, quant = 0;
        for (const LayerDiagnostics& d : run.layers) {
            err += d.mean_rel_error / static_cast<double>(run.layers.size());
            quant += d.mean_quant_error / static_cast<double>(run.layers.size());
        }
        std::cout << fmt::format(
            "{:<{}} {:>6g} {:>8.2f}% {:>8.2f}% {:>7.2f}% {:>7.3f} {:>7.3f} {:>11.1f} {:>11.1f}  {}{}\n",
            run.method, width, run.budget, 100.0 * run.footprint_fraction, 100.0 * run.resident_fraction(),
            100.0 * basis_share, err, quant, run.prefill_ms, run.compress_ms, answers,
            basis_note(run.self_calibrated, run.basis_accounting));
    }
    return 0;
}

struct PplArgs {
    SessionArgs session;
    std::string text_file;
    int64_t prefix_tokens = 0;
    bool json = false;
    bool allow_beyond_positions = false;
};

int run_ppl_cmd(const PplArgs& a) {
    auto session = open_session(a.session);
    PplRequest req;
    req.methods = parse_methods(a.session.methods);
    req.settings = a.session.settings;
    apply_model_codec_defaults(a.session.codec_flags, a.session.model, req.settings);
    req.budgets = a.session.budgets;
    req.ids = session->tokenizer().encode(read_document_file(a.text_file), true);
    req.prefix_tokens = a.prefix_tokens;
    req.allow_beyond_positions = a.allow_beyond_positions;
    const std::string beyond =
        positions_warning(session->model().config(), static_cast<int64_t>(req.ids.size()),
                          fmt::format("the scored text ({} tokens)", req.ids.size()));
    if (!beyond.empty() && a.allow_beyond_positions) spdlog::warn("{} (--allow-beyond-positions)", beyond);
    const auto runs = run_perplexity(*session, req, terminal_job());
    nlohmann::json j;
    j["text_file"] = a.text_file;
    j["tokens"] = static_cast<int64_t>(req.ids.size());
    j["prefix_tokens"] = a.prefix_tokens;
    j["budget"] = req.settings.budget;
    j["budgets"] = req.budgets;
    j["basis"] = session->basis() ? session->basis_source() : "self-calibrated";
    j["footprint"] = "accounted";
    j["paper_accounting"] = req.settings.paper_accounting;
    j["warnings"] = beyond.empty() ? nlohmann::json::array() : nlohmann::json::array({beyond});
    j["methods"] = nlohmann::json::array();
    for (const auto& r : runs) {
        j["methods"].push_back({{"method", r.method},
                                {"budget", r.budget},
                                {"ppl", r.ppl},
                                {"nll", r.nll},
                                {"scored_tokens", r.scored_tokens},
                                {"footprint_fraction", r.footprint_fraction},
                                {"basis_bytes", r.basis_bytes},
                                {"basis_accounting", r.basis_accounting},
                                {"self_calibrated", r.self_calibrated}});
    }
    if (a.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << fmt::format(
            "perplexity over tokens {}..{} after a compressed prefix of {} (one prefill for every method "
            "and budget)\n",
            a.prefix_tokens, req.ids.size() - 1, a.prefix_tokens);
        size_t width = 6;
        for (const auto& r : runs) width = std::max(width, r.method.size());
        for (const auto& r : runs)
            std::cout << fmt::format("{:<{}} kappa {:<6g} ppl {:>10.4f}  accounted footprint {:>6.2f}%{}\n",
                                     r.method, width, r.budget, r.ppl, 100.0 * r.footprint_fraction,
                                     basis_note(r.self_calibrated, r.basis_accounting));
    }
    return 0;
}

}  // namespace

Command add_compare(CLI::App& root) {
    auto a = std::make_shared<CompareArgs>();
    CLI::App* sub =
        root.add_subcommand("compare", "Answers, footprints and diagnostics of methods side by side");
    add_session_options(*sub, a->session);
    sub->add_option("--context-file", a->context_file, "the document")->required()->check(CLI::ExistingFile);
    sub->add_option("--question", a->questions, "a question (repeatable)");
    sub->add_option("--answer", a->answers,
                    "the expected answer of each question (repeatable, containment match)");
    sub->add_option("--answer-prefix", a->answer_prefixes,
                    "the start of each question's reply, given to the model after the question and decoded "
                    "after compression (repeatable; RULER-style prompts)");
    sub->add_option("--mode", a->mode, "query-aware or query-agnostic")->capture_default_str();
    sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per answer")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_flag("--chat", a->chat, "wrap context and question in the model's chat template");
    sub->add_option(
        "--json", a->json_out,
        "write the full results as JSON to this file (accounted footprints: stored_bytes includes "
        "basis_bytes, the R x D of a self-calibrated basis unless --paper-accounting)");
    sub->add_option("--rank-log", a->rank_log, "write per-token salience/rank/error as CSV to this file");
    return {sub, [a] { return run_compare_cmd(*a); }};
}

Command add_ppl(CLI::App& root) {
    auto a = std::make_shared<PplArgs>();
    CLI::App* sub = root.add_subcommand("ppl", "Perplexity after compressing the first N tokens' cache");
    add_session_options(*sub, a->session);
    sub->add_option("--text-file", a->text_file, "the scored text")->required()->check(CLI::ExistingFile);
    sub->add_option("--prefix-tokens", a->prefix_tokens, "tokens whose cache is compressed")->required();
    sub->add_flag("--json", a->json, "print JSON");
    sub->add_flag("--allow-beyond-positions", a->allow_beyond_positions,
                  "score a text longer than the model's max_position_embeddings (refused otherwise)");
    return {sub, [a] { return run_ppl_cmd(*a); }};
}

}  // namespace varrate::cli

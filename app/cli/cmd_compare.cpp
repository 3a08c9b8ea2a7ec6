// varrate compare / varrate ppl: compression methods side by side on one document, and perplexity over a
// compressed prefix.
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "codec/registry.h"
#include "core/compare.h"
#include "core/base/error.h"
#include "core/base/file_io.h"

namespace varrate::cli {

namespace {

struct SessionArgs {
    std::string model, basis;
    RuntimeArgs runtime;
    std::string methods = join_method_names();  // every registered method
    CodecSettings settings;
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
    a.codec_flags = add_codec_options(sub, a.settings);
    add_runtime_options(sub, a.runtime);
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
    req.mode = parse_mode(a.mode);
    req.context = read_text_file(a.context_file);
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
    std::cout << fmt::format("{} tokens of context, {}, basis: {}\n",
                             r.runs.empty() ? 0 : r.runs[0].context_ids.size(), to_string(req.mode),
                             r.basis_source.empty() ? "none needed" : r.basis_source);
    std::cout << fmt::format("{:<9} {:>9} {:>11} {:>11}  {}\n", "method", "footprint", "prefill ms",
                             "codec ms", "answers");
    for (const MethodRun& run : r.runs) {
        std::string answers;
        for (size_t i = 0; i < run.answers.size(); ++i) {
            std::string ans = run.answers[i];
            for (char& c : ans)
                if (c == '\n') c = ' ';
            answers += (i ? " | " : "") + ans;
            if (i < run.correct.size()) answers += run.correct[i] ? " [ok]" : " [wrong]";
        }
        std::cout << fmt::format("{:<9} {:>8.2f}% {:>11.1f} {:>11.1f}  {}{}\n", run.method,
                                 100.0 * run.footprint_fraction, run.prefill_ms, run.compress_ms, answers,
                                 run.self_calibrated ? " (self-calibrated)" : "");
    }
    return 0;
}

struct PplArgs {
    SessionArgs session;
    std::string text_file;
    int64_t prefix_tokens = 0;
    bool json = false;
};

int run_ppl_cmd(const PplArgs& a) {
    auto session = open_session(a.session);
    PplRequest req;
    req.methods = parse_methods(a.session.methods);
    req.settings = a.session.settings;
    apply_model_codec_defaults(a.session.codec_flags, a.session.model, req.settings);
    req.ids = session->tokenizer().encode(read_text_file(a.text_file), true);
    req.prefix_tokens = a.prefix_tokens;
    const auto runs = run_perplexity(*session, req, terminal_job());
    nlohmann::json j;
    j["text_file"] = a.text_file;
    j["tokens"] = static_cast<int64_t>(req.ids.size());
    j["prefix_tokens"] = a.prefix_tokens;
    j["budget"] = req.settings.budget;
    j["basis"] = session->basis() ? session->basis_source() : "self-calibrated";
    j["methods"] = nlohmann::json::array();
    for (const auto& r : runs) {
        j["methods"].push_back({{"method", r.method},
                                {"ppl", r.ppl},
                                {"nll", r.nll},
                                {"scored_tokens", r.scored_tokens},
                                {"footprint_fraction", r.footprint_fraction},
                                {"self_calibrated", r.self_calibrated}});
    }
    if (a.json) {
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << fmt::format(
            "perplexity over tokens {}..{} after a compressed prefix of {} (budget {})\n", a.prefix_tokens,
            req.ids.size() - 1, a.prefix_tokens, req.settings.budget);
        for (const auto& r : runs)
            std::cout << fmt::format("{:<9} ppl {:>10.4f}  footprint {:>6.2f}%{}\n", r.method, r.ppl,
                                     100.0 * r.footprint_fraction,
                                     r.self_calibrated ? " (self-calibrated)" : "");
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
    sub->add_option("--json", a->json_out, "write the full results as JSON to this file");
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
    return {sub, [a] { return run_ppl_cmd(*a); }};
}

}  // namespace varrate::cli

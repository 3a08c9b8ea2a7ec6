// varrate ask: questions answered from a cache file written by `varrate compress`, without prefilling the
// document: the file is checked against the model (identity, weights, tokenizer, integrity), its cache is
// restored, and each question is decoded after it as `compare --mode query-agnostic` does.
#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "codec/codec_json.h"
#include "codec/compressed_layer.h"
#include "codec/registry.h"
#include "core/cache_file.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate::cli {

namespace {

struct AskArgs {
    std::string model, cache;
    std::vector<std::string> questions, answer_prefixes;
    int64_t max_new_tokens = 32;
    bool json = false;
    RuntimeArgs runtime;
    const CLI::Option* dtype = nullptr;
};

int run_ask(AskArgs a) {
    // The model runs at the cache's dtype unless --dtype says otherwise (then the file is refused, naming
    // it).
    if (a.dtype->count() == 0)
        a.runtime.dtype = read_cache_file_info(a.cache).model.value("cache_dtype", "fp32");
    auto session = Session::open(a.model, runtime_options(a.runtime));
    const auto t0 = std::chrono::steady_clock::now();
    const CompressedContext ctx = read_cache_file(a.cache, *session);
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const CacheFileInfo& info = ctx.info;
    size_t longest = 0;
    for (const std::string& q : a.questions) longest = std::max(longest, q.size());
    const std::string beyond = positions_warning(
        session->model().config(), info.next_position + static_cast<int64_t>(longest) + a.max_new_tokens,
        fmt::format("the context ({} tokens), a question and up to {} generated tokens", info.next_position,
                    a.max_new_tokens));
    if (!beyond.empty()) spdlog::warn("{} (question length counted in bytes, an upper bound)", beyond);
    const std::vector<std::vector<int64_t>> ids =
        answer_from_cache(*session, ctx, a.questions, a.answer_prefixes, a.max_new_tokens, terminal_job());
    std::vector<std::string> answers;
    for (const auto& answer : ids) answers.push_back(session->tokenizer().decode(answer, true));
    const double budget = method_takes_budget(info.method) ? info.settings.budget : 1.0;
    if (a.json) {
        const nlohmann::json j = {{"cache", a.cache},
                                  {"method", info.method},
                                  {"budget", budget},
                                  {"settings", to_json(info.settings)},
                                  {"mode", "query-agnostic"},
                                  {"chat", info.chat},
                                  {"context_tokens", info.next_position},
                                  {"stored_bytes", info.stored_bytes},
                                  {"full_bytes", info.full_bytes},
                                  {"footprint_fraction", info.footprint_fraction()},
                                  {"resident_bytes", info.resident_bytes},
                                  {"saved_shared_bytes", info.saved_shared_bytes},
                                  {"load_ms", load_ms},
                                  {"store_attention", store_attention_summary(ctx.stores)},
                                  {"questions", a.questions},
                                  {"answers", answers},
                                  {"answer_ids", ids}};
        std::cout << j.dump(2) << std::endl;
        return 0;
    }
    std::cout << fmt::format(
        "{}: {} at kappa {:g}, {} tokens of context, accounted {:.2f}%, resident {:.2f}% of the full cache "
        "(loaded in {:.0f} ms, no prefill)\n",
        a.cache, info.method, budget, info.next_position, 100.0 * info.footprint_fraction(),
        100.0 * info.resident_fraction(), load_ms);
    if (const std::string how = store_attention_summary(ctx.stores); !how.empty())
        std::cout << "attention through the store: " << how << "\n";
    for (size_t i = 0; i < answers.size(); ++i) {
        std::string one_line = answers[i];
        for (char& c : one_line)
            if (c == '\n') c = ' ';
        std::cout << fmt::format("Q: {}\nA: {}\n", a.questions[i], one_line);
    }
    return 0;
}

}  // namespace

Command add_ask(CLI::App& root) {
    auto a = std::make_shared<AskArgs>();
    CLI::App* sub = root.add_subcommand(
        "ask", "Answer questions from a cache file written by varrate compress (no prefill)");
    sub->add_option("--model", a->model, "the model directory the cache was made with")
        ->required()
        ->check(CLI::ExistingDirectory);
    sub->add_option("--cache", a->cache, "the cache file (.vrkv)")->required()->check(CLI::ExistingFile);
    sub->add_option("--question", a->questions, "a question (repeatable)")->required();
    sub->add_option("--answer-prefix", a->answer_prefixes,
                    "the start of each question's reply, given to the model after the question (repeatable)");
    sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per answer")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_flag("--json", a->json, "print JSON");
    add_runtime_options(*sub, a->runtime);
    a->dtype = sub->get_option("--dtype");
    sub->footer("--dtype defaults to the dtype the cache was made at.");
    return {sub, [a] { return run_ask(*a); }};
}

}  // namespace varrate::cli

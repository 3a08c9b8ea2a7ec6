// varrate generate: greedy generation with a Hugging Face model directory.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "base/error.h"
#include "base/file_io.h"
#include "core/session.h"
#include "models/generate.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate::cli {

namespace {

struct GenerateArgs {
    std::string model;
    std::string prompt, prompt_file, prompt_ids;
    bool chat = false;
    std::string chat_date, chat_tools_file;
    int64_t max_new_tokens = 128;
    RuntimeArgs runtime;
    int64_t chunk_size = 512;
    bool json = false;
};

// What the generation adds to the decoded prompt. Decoding the new ids alone would differ at the seam (a
// SentencePiece decoder strips the leading space of the first piece it sees).
std::string appended_text(const Tokenizer& tok, const std::vector<int64_t>& prompt,
                          const std::vector<int64_t>& generated) {
    std::vector<int64_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    const std::string full = tok.decode(all, true), head = tok.decode(prompt, true);
    if (full.compare(0, head.size(), head) == 0) return full.substr(head.size());
    return tok.decode(generated, true);
}

int run_generate(const GenerateArgs& a) {
    const std::filesystem::path dir(a.model);
    const bool have_tokenizer = std::filesystem::exists(dir / "tokenizer.json");
    std::optional<Tokenizer> tok;
    if (have_tokenizer) tok.emplace(Tokenizer::load(dir));

    std::vector<int64_t> prompt;
    if (!a.prompt_ids.empty()) {
        prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
    } else {
        if (!tok) throw Error(a.model + ": no tokenizer.json in the model directory (use --prompt-ids)");
        std::string text = a.prompt_file.empty() ? a.prompt : read_document_file(a.prompt_file);
        if (a.chat) {
            ChatOptions chat;
            chat.date_string = a.chat_date;
            if (!a.chat_tools_file.empty()) {
                const auto tools =
                    nlohmann::ordered_json::parse(read_text_file(a.chat_tools_file), nullptr, false);
                if (!tools.is_array())
                    throw Error(a.chat_tools_file + ": --chat-tools needs a JSON array of tool definitions");
                chat.tools.emplace();
                for (const auto& t : tools) chat.tools->push_back(t.dump());
            }
            const std::string rendered = render_chat(*tok, {{"user", text}}, true, chat);
            prompt = tok->encode(rendered, false);
        } else {
            prompt = tok->encode(text, true);
        }
    }
    if (prompt.empty()) throw Error("the prompt is empty (an empty text with a tokenizer that adds no BOS)");

    auto model = load_model_for_cli(dir, a.runtime);
    const auto& cfg = model->config();
    for (int64_t id : prompt) {
        if (id < 0 || id >= cfg.vocab_size)
            throw Error("prompt id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(cfg.vocab_size) + ")");
    }

    const std::string beyond =
        positions_warning(cfg, static_cast<int64_t>(prompt.size()) + a.max_new_tokens,
                          fmt::format("the prompt ({} tokens) plus up to {} generated tokens", prompt.size(),
                                      a.max_new_tokens));
    if (!beyond.empty()) spdlog::warn("{}", beyond);

    GenerateOptions opt;
    opt.max_new_tokens = a.max_new_tokens;
    opt.stop_ids = cfg.eos_token_ids;
    if (tok && tok->eos_id()) opt.stop_ids.push_back(*tok->eos_id());
    opt.prefill.chunk_size = a.chunk_size;
    std::vector<int64_t> streamed;
    std::string printed;
    if (!a.json && tok) {
        opt.on_token = [&](int64_t id) {
            streamed.push_back(id);
            std::string text = appended_text(*tok, prompt, streamed);
            // Print only what extends the text already shown (byte-fallback tokens can complete a character
            // later).
            if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
                std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
                std::fflush(stdout);
                printed = text;
            }
        };
    }
    KVCache cache = model->new_cache();
    GenerateResult r = generate_greedy(*model, cache, prompt, opt);
    const std::string text = tok ? appended_text(*tok, prompt, r.generated) : std::string();

    if (a.json) {
        nlohmann::json j;
        j["model"] = a.model;
        j["device"] = model->options().device.str();
        j["dtype"] = dtype_name(model->options().dtype);
        j["prompt_ids"] = prompt;
        j["generated_ids"] = r.generated;
        j["text"] = text;
        j["stopped_on_eos"] = r.stopped;
        j["prefill_ms"] = r.prefill_ms;
        j["decode_ms"] = r.decode_ms;
        j["decode_tokens_per_s"] =
            r.decode_ms > 0 ? 1000.0 * static_cast<double>(r.generated.size()) / r.decode_ms : 0.0;
        std::cout << j.dump() << std::endl;
    } else if (tok) {
        if (printed != text) std::cout << text.substr(std::min(printed.size(), text.size()));
        std::cout << std::endl;
    } else {
        for (size_t i = 0; i < r.generated.size(); ++i) std::cout << (i ? "," : "") << r.generated[i];
        std::cout << std::endl;
    }
    return 0;
}

}  // namespace

Command add_generate(CLI::App& root) {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* sub = root.add_subcommand("generate", "Greedy generation from a prompt");
    sub->add_option("--model", a->model, "Hugging Face model directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    auto* p = sub->add_option("--prompt", a->prompt, "Prompt text");
    auto* pf = sub->add_option("--prompt-file", a->prompt_file, "File holding the prompt text");
    auto* pi = sub->add_option("--prompt-ids", a->prompt_ids, "Comma-separated token ids, e.g. 1,2,3");
    p->excludes(pf)->excludes(pi);
    pf->excludes(pi);
    sub->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template");
    sub->add_option(
        "--chat-date", a->chat_date,
        "With --chat: the \"Today Date\" of a Llama-3.1 template (default: the template's, 26 Jul 2024)");
    sub->add_option(
           "--chat-tools", a->chat_tools_file,
           "With --chat: a JSON file holding an array of tool definitions, rendered into the prompt as a "
           "Llama-3.1 template does (other templates reject tools)")
        ->check(CLI::ExistingFile);
    sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    sub->add_option("--chunk-size", a->chunk_size, "Prefill chunk length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    add_runtime_options(*sub, a->runtime);
    sub->add_flag("--json", a->json, "Print one JSON object (prompt_ids, generated_ids, text, timings)");
    return {sub, [a] {
                if (a->prompt.empty() && a->prompt_file.empty() && a->prompt_ids.empty())
                    throw Error("generate: give one of --prompt, --prompt-file or --prompt-ids");
                if (!a->chat && (!a->chat_date.empty() || !a->chat_tools_file.empty()))
                    throw Error("generate: --chat-date and --chat-tools need --chat");
                if (a->chat && !a->prompt_ids.empty())
                    throw Error("generate: --chat needs a text prompt, not --prompt-ids");
                return run_generate(*a);
            }};
}

}  // namespace varrate::cli

// `varrate tokenize`: encode text with a Hugging Face tokenizer.json and print the ids as JSON lines.
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "base/error.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate::cli {

namespace {

struct TokenizeOptions {
    std::string tokenizer;
    std::string text;
    std::string jsonl;
    bool no_special = false;
    CLI::Option* text_opt = nullptr;  // counted, so that --text "" still means "encode the empty string"
    CLI::Option* jsonl_opt = nullptr;
};

// Non-UTF-8 bytes cannot come from the tokenizer, but a dump must never throw on output.
// Ordered, so the fields print as text, ids, tokens.
std::string dump_line(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int run_tokenize(const TokenizeOptions& opt) {
    const bool has_text = opt.text_opt->count() > 0, has_jsonl = opt.jsonl_opt->count() > 0;
    if (has_text == has_jsonl) throw Error("tokenize: give exactly one of --text or --jsonl");
    const Tokenizer tok = Tokenizer::load(opt.tokenizer);
    const bool add_special = !opt.no_special;

    if (has_text) {
        const auto ids = tok.encode(opt.text, add_special);
        nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
        for (int64_t id : ids) tokens.push_back(tok.token_string(id));
        std::cout << dump_line({{"text", opt.text}, {"ids", ids}, {"tokens", tokens}}) << "\n";
        return 0;
    }

    std::ifstream in(opt.jsonl, std::ios::binary);
    if (!in) throw Error(opt.jsonl + ": cannot open for reading");
    std::string line;
    for (size_t line_no = 1; std::getline(in, line); ++line_no) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        const std::string where = opt.jsonl + ":" + std::to_string(line_no);
        nlohmann::json row;
        try {
            row = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
            throw Error(where + ": invalid JSON: " + e.what());
        }
        if (!row.is_object() || !row.contains("text") || !row["text"].is_string())
            throw Error(where + ": expected an object with a \"text\" string");
        const std::string text = row["text"].get<std::string>();
        std::vector<int64_t> ids;
        try {
            ids = tok.encode(text, add_special);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        std::cout << dump_line({{"text", text}, {"ids", ids}}) << "\n";
    }
    if (in.bad()) throw Error(opt.jsonl + ": read error");
    return 0;
}

}  // namespace

Command add_tokenize(CLI::App& root) {
    auto opt = std::make_shared<TokenizeOptions>();
    CLI::App* app =
        root.add_subcommand("tokenize", "Encode text with a tokenizer.json and print the token ids");
    app->add_option("--tokenizer", opt->tokenizer, "tokenizer.json, or a model directory holding one")
        ->required();
    opt->text_opt =
        app->add_option("--text", opt->text, "text to encode; prints {\"text\", \"ids\", \"tokens\"}");
    opt->jsonl_opt = app->add_option("--jsonl", opt->jsonl,
                                     "file of {\"text\": ...} lines; prints {\"text\", \"ids\"} per line");
    app->add_flag("--no-special", opt->no_special, "do not add BOS or other template special tokens");
    return {app, [opt] { return run_tokenize(*opt); }};
}

}  // namespace varrate::cli

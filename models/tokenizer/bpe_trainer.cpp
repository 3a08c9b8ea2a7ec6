#include "models/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "base/error.h"
#include "base/file_io.h"
#include "models/tokenizer/tokenizer_pretokenize.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

namespace {

using json = nlohmann::json;

json pre_tokenizer_json(const std::string& regex) {
    return {{"type", "Sequence"},
            {"pretokenizers", json::array({{{"type", "Split"},
                                            {"pattern", {{"Regex", regex}}},
                                            {"behavior", "Isolated"},
                                            {"invert", false}},
                                           {{"type", "ByteLevel"},
                                            {"add_prefix_space", false},
                                            {"trim_offsets", true},
                                            {"use_regex", false}}})}};
}

// Splits a byte-level piece (UTF-8 of mapped bytes) into its code points.
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const size_t n = std::min(unicode::utf8_char_len(static_cast<unsigned char>(s[i])), s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

struct Word {
    std::vector<int32_t> symbols;
    int64_t count = 0;
};

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

TrainedTokenizer train_byte_level_bpe(const std::vector<std::string>& texts, const BpeTrainerOptions& opt,
                                      const std::vector<int64_t>& weights) {
    const std::string where = "BPE trainer";
    if (!weights.empty() && weights.size() != texts.size())
        throw Error(where + ": " + std::to_string(weights.size()) + " weights for " +
                    std::to_string(texts.size()) + " texts");
    for (int64_t w : weights)
        if (w < 1) throw Error(where + ": text weights must be positive, got " + std::to_string(w));
    for (const std::string* t : {&opt.bos_token, &opt.eos_token, &opt.unk_token, &opt.pad_token})
        if (!t->empty() &&
            std::find(opt.special_tokens.begin(), opt.special_tokens.end(), *t) == opt.special_tokens.end())
            throw Error(where + ": special token '" + *t + "' is not in special_tokens");
    const json pre_json = pre_tokenizer_json(opt.split_regex);
    const TokenizerPreTokenizer pre(pre_json, where);

    // Piece frequencies, in a sorted map so that everything below is deterministic.
    std::map<std::string, int64_t> piece_counts;
    std::vector<PreToken> pieces;
    for (size_t t = 0; t < texts.size(); ++t) {
        if (texts[t].empty()) continue;
        pieces.assign(1, PreToken{texts[t], true});
        pre.apply(pieces);
        for (const auto& p : pieces) piece_counts[p.text] += weights.empty() ? 1 : weights[t];
    }
    if (piece_counts.empty()) throw Error(where + ": no training text");

    // Vocabulary: special tokens, the 256 byte symbols (in byte order), then one token per merge.
    std::vector<std::string> vocab(opt.special_tokens.begin(), opt.special_tokens.end());
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = 0; i < vocab.size(); ++i)
        if (!ids.emplace(vocab[i], static_cast<int32_t>(i)).second)
            throw Error(where + ": special token '" + vocab[i] + "' is listed twice");
    for (int b = 0; b < 256; ++b) {
        const std::string& sym = unicode::byte_to_unicode()[b];
        if (ids.count(sym)) throw Error(where + ": special token '" + sym + "' collides with a byte symbol");
        ids.emplace(sym, static_cast<int32_t>(vocab.size()));
        vocab.push_back(sym);
    }

    std::vector<Word> words;
    for (const auto& [piece, count] : piece_counts) {
        if (opt.max_vocab_size == 0 && count < opt.min_frequency) continue;
        Word w;
        w.count = count;
        for (const auto& cp : code_points(piece)) {
            const auto it = ids.find(cp);
            if (it == ids.end()) throw Error(where + ": piece '" + piece + "' holds a non-byte symbol");
            w.symbols.push_back(it->second);
        }
        words.push_back(std::move(w));
    }

    std::vector<std::pair<int32_t, int32_t>> merges;
    std::unordered_map<uint64_t, int64_t> pair_counts;
    while (opt.max_vocab_size == 0 || static_cast<int64_t>(vocab.size()) < opt.max_vocab_size) {
        pair_counts.clear();
        for (const Word& w : words)
            for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
                pair_counts[pair_key(w.symbols[i], w.symbols[i + 1])] += w.count;
        if (pair_counts.empty()) break;
        // Most frequent pair; ties go to the lexicographically smaller (left, right) strings.
        uint64_t best = 0;
        int64_t best_count = -1;
        for (const auto& [key, count] : pair_counts) {
            if (count < best_count) continue;
            if (count == best_count) {
                const auto a = std::tie(vocab[key >> 32], vocab[key & 0xffffffffu]);
                const auto b = std::tie(vocab[best >> 32], vocab[best & 0xffffffffu]);
                if (!(a < b)) continue;
            }
            best = key;
            best_count = count;
        }
        const auto left = static_cast<int32_t>(best >> 32), right = static_cast<int32_t>(best & 0xffffffffu);
        const std::string merged = vocab[left] + vocab[right];
        int32_t merged_id;
        if (const auto it = ids.find(merged); it != ids.end()) {
            merged_id = it->second;  // the same string reached by another pair
        } else {
            merged_id = static_cast<int32_t>(vocab.size());
            ids.emplace(merged, merged_id);
            vocab.push_back(merged);
        }
        merges.emplace_back(left, right);
        for (Word& w : words) {
            auto& s = w.symbols;
            size_t out = 0;
            for (size_t i = 0; i < s.size(); ++i) {
                if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
                    s[out++] = merged_id;
                    ++i;
                } else {
                    s[out++] = s[i];
                }
            }
            s.resize(out);
        }
    }

    TrainedTokenizer result;
    result.vocab_size = static_cast<int64_t>(vocab.size());
    result.n_merges = static_cast<int64_t>(merges.size());
    result.n_pieces = static_cast<int64_t>(piece_counts.size());

    json vocab_json = json::object();
    for (size_t i = 0; i < vocab.size(); ++i) vocab_json[vocab[i]] = i;
    json merges_json = json::array();
    for (const auto& [a, b] : merges) merges_json.push_back(vocab[a] + " " + vocab[b]);
    json added = json::array();
    for (size_t i = 0; i < opt.special_tokens.size(); ++i)
        added.push_back({{"id", i},
                         {"content", opt.special_tokens[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    json post = nullptr;
    if (!opt.bos_token.empty() && opt.add_bos_token) {
        const int32_t bos = ids.at(opt.bos_token);
        post = {{"type", "TemplateProcessing"},
                {"single", json::array({{{"SpecialToken", {{"id", opt.bos_token}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                {"pair", json::array({{{"SpecialToken", {{"id", opt.bos_token}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                      {{"SpecialToken", {{"id", opt.bos_token}, {"type_id", 1}}}},
                                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
                {"special_tokens",
                 {{opt.bos_token, {{"id", opt.bos_token}, {"ids", {bos}}, {"tokens", {opt.bos_token}}}}}}};
    }
    result.tokenizer = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer", pre_json},
        {"post_processor", post},
        {"decoder",
         {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab_json},
          {"merges", merges_json}}}};

    json config = {{"add_bos_token", opt.add_bos_token && !opt.bos_token.empty()},
                   {"add_eos_token", false},
                   {"clean_up_tokenization_spaces", false},
                   {"model_max_length", opt.model_max_length},
                   {"tokenizer_class", "PreTrainedTokenizerFast"}};
    json decoder_map = json::object();
    for (size_t i = 0; i < opt.special_tokens.size(); ++i)
        decoder_map[std::to_string(i)] = {{"content", opt.special_tokens[i]},
                                          {"lstrip", false},
                                          {"normalized", false},
                                          {"rstrip", false},
                                          {"single_word", false},
                                          {"special", true}};
    config["added_tokens_decoder"] = decoder_map;
    config["bos_token"] = opt.bos_token.empty() ? json(nullptr) : json(opt.bos_token);
    config["eos_token"] = opt.eos_token.empty() ? json(nullptr) : json(opt.eos_token);
    config["unk_token"] = opt.unk_token.empty() ? json(nullptr) : json(opt.unk_token);
    config["pad_token"] = opt.pad_token.empty() ? json(nullptr) : json(opt.pad_token);
    result.tokenizer_config = config;
    return result;
}

void write_tokenizer_files(const TrainedTokenizer& tok, const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(dir.string() + ": cannot create directory: " + ec.message());
    write_file_atomic(dir / "tokenizer.json", tok.tokenizer.dump(1) + "\n");
    write_file_atomic(dir / "tokenizer_config.json", tok.tokenizer_config.dump(2) + "\n");
}

}  // namespace varrate

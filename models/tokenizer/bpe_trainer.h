#pragma once
// Trains a byte-level BPE tokenizer and writes it in Hugging Face tokenizer.json form (pre_tokenizer Split +
// ByteLevel, ByteLevel decoder, BPE model with vocab and merges, special tokens as added tokens) plus a
// tokenizer_config.json. Merging continues until every piece of the training text is one token, so a
// word-level vocabulary comes out when the text is made of a closed lexicon (the demo corpus).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace varrate {

// Isolates a word with its leading space, a single digit with its leading space, one punctuation character,
// and whitespace runs (GPT-2's trailing-whitespace rule).
inline constexpr const char* kWordDigitSplitRegex = " ?[A-Za-z]+| ?[0-9]| ?[^\\sA-Za-z0-9]|\\s+(?!\\S)|\\s+";

struct BpeTrainerOptions {
    std::string split_regex = kWordDigitSplitRegex;
    // Special tokens get the first ids, in this order; bos/eos/unk/pad must be among them (or empty).
    std::vector<std::string> special_tokens = {"<unk>", "<s>", "</s>", "<pad>"};
    std::string bos_token = "<s>", eos_token = "</s>", unk_token = "<unk>", pad_token = "<pad>";
    bool add_bos_token = true;
    int64_t model_max_length = 4096;
    // 0: merge until no piece of the training text has two symbols left; otherwise stop at this vocab size.
    int64_t max_vocab_size = 0;
    // Pieces seen fewer times than this take part only when max_vocab_size is 0.
    int64_t min_frequency = 1;
};

struct TrainedTokenizer {
    nlohmann::json tokenizer;         // tokenizer.json
    nlohmann::json tokenizer_config;  // tokenizer_config.json
    int64_t vocab_size = 0;           // including special tokens
    int64_t n_merges = 0;
    int64_t n_pieces = 0;  // distinct pre-tokenized pieces of the training text
};

// Counts the pieces of `texts` (split as the written pre_tokenizer splits them) and learns merges: at each
// step the most frequent adjacent pair (ties: the smaller pair of strings) is merged everywhere, left to
// right. Deterministic. The base vocabulary holds all 256 byte symbols, so any text can be encoded.
// weights (empty = 1 each): how many times each text counts, so that a closed vocabulary can be merged
// before the pieces of a larger, rarer text (with max_vocab_size) without repeating it in memory.
TrainedTokenizer train_byte_level_bpe(const std::vector<std::string>& texts,
                                      const BpeTrainerOptions& options = {},
                                      const std::vector<int64_t>& weights = {});

// Writes dir/tokenizer.json and dir/tokenizer_config.json (atomically; dir is created when missing).
void write_tokenizer_files(const TrainedTokenizer& tok, const std::filesystem::path& dir);

}  // namespace varrate

#pragma once
// How a single token reads on screen, in the rank log and in NIAH probes, and where a piece of text sits in
// a token sequence. The one home of the SentencePiece leading-space fix: a lone "▁word" piece decodes to
// "word", which would glue words together when the pieces are shown one by one.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace varrate {

class Tokenizer;

// The token's text on its own (UTF-8), with a SentencePiece word-start piece given back its leading space.
std::string token_display_text(const Tokenizer& tokenizer, int64_t id);
std::vector<std::string> token_display_texts(const Tokenizer& tokenizer, const std::vector<int64_t>& ids);

// Token positions [begin, end) whose concatenated texts contain the first occurrence of `text` (from the
// token holding its first byte through the one holding its last); nullopt when empty or absent.
std::optional<std::pair<int64_t, int64_t>> find_text_token_span(const std::vector<std::string>& token_texts,
                                                                std::string_view text);

}  // namespace varrate

#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) for the tokenizer's Split
// pre-tokenizer and Replace normaliser. Compiled once at load; matching is thread-safe (each call makes its
// own match-data block and reuses it for every match in the text).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace varrate {

class TokenizerRegex {
  public:
    // Throws varrate::Error naming `where` and the PCRE2 message when the pattern does not compile.
    TokenizerRegex(const std::string& pattern, const std::string& where);
    ~TokenizerRegex();
    TokenizerRegex(const TokenizerRegex&) = delete;
    TokenizerRegex& operator=(const TokenizerRegex&) = delete;

    // All non-overlapping, non-empty matches in `text` (valid UTF-8) as [begin, end) byte offsets.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
    // `text` with every match replaced by `content` (HF Replace with a Regex pattern).
    std::string replace_all(const std::string& text, const std::string& content) const;

  private:
    struct Code;
    std::unique_ptr<Code> code_;
};

}  // namespace varrate

#pragma once
// tokenizer.json "pre_tokenizer": Split (string or PCRE2 regex, all split behaviours, invert), ByteLevel
// (GPT-2 byte -> printable-char mapping, optional prefix space and GPT-2 regex), Metaspace (SentencePiece
// "▁" with prepend_scheme first/always/never), Digits, Whitespace, WhitespaceSplit and Sequence. Each turns
// a list of pieces into a finer list; the BPE model then encodes every piece on its own.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

struct PreToken {
    std::string text;
    bool at_start = false;  // begins at byte 0 of the original input (Metaspace prepend_scheme "first")
};

class TokenizerPreTokenizer {
  public:
    // `spec` is the "pre_tokenizer" value (null = the whole segment is one piece).
    TokenizerPreTokenizer(const nlohmann::json& spec, const std::string& where);
    ~TokenizerPreTokenizer();
    TokenizerPreTokenizer(TokenizerPreTokenizer&&) noexcept;

    void apply(std::vector<PreToken>& pieces) const;

  private:
    struct Step;
    void add(const nlohmann::json& spec, const std::string& where);
    std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace varrate

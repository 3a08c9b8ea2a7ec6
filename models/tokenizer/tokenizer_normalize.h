#pragma once
// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace (string or regex) and
// Sequence of these. Applied to each text segment between added tokens, before pre-tokenisation.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

class TokenizerNormalizer {
  public:
    // `spec` is the "normalizer" value (null = identity). Throws varrate::Error naming `where` for unknown
    // types or malformed entries.
    TokenizerNormalizer(const nlohmann::json& spec, const std::string& where);
    ~TokenizerNormalizer();
    TokenizerNormalizer(TokenizerNormalizer&&) noexcept;

    std::string apply(std::string text) const;  // `text` is valid UTF-8
    bool empty() const { return steps_.empty(); }

  private:
    struct Step;
    void add(const nlohmann::json& spec, const std::string& where);
    std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace varrate

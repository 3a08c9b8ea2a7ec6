#pragma once
// Hugging Face tokenizer.json: byte-level BPE (Llama-3, Qwen2/3: Split regex via PCRE2 + ByteLevel) and
// SentencePiece-style BPE (Llama-2/Mistral legacy: Prepend/Replace or Metaspace, byte_fallback), NFC
// normaliser, added tokens matched before the model, decoders, and BOS handling from tokenizer_config.json
// or the post_processor. Target: identical ids to the reference implementation.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

class Tokenizer {
  public:
    // `path` is a tokenizer.json or a directory holding one; tokenizer_config.json beside it is read when
    // present.
    static Tokenizer load(const std::filesystem::path& path);
    // From parsed JSON (tokenizer_config may be null). `where` names the source in errors.
    static Tokenizer from_json(const nlohmann::json& tokenizer, const nlohmann::json& tokenizer_config,
                               const std::string& where);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // add_special_tokens: prepend BOS (and whatever the post_processor template adds) as HF does by default.
    std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
    std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

    int64_t vocab_size() const;                  // including added tokens
    std::string token_string(int64_t id) const;  // the vocabulary piece (e.g. "Ġthe", "▁the", "<0x0A>")
    std::optional<int64_t> token_id(const std::string& piece) const;
    bool is_special(int64_t id) const;
    std::optional<int64_t> bos_id() const;
    std::optional<int64_t> eos_id() const;  // from tokenizer_config eos_token
    std::string bos_token() const;          // "" when none
    std::string eos_token() const;
    // tokenizer_config.json's chat_template ("" when none).
    const std::string& chat_template() const;
    // tokenizer_config.json's clean_up_tokenization_spaces (false when absent, as transformers >= 4.45):
    // whether transformers' decode() removes the space before punctuation and English contractions (" ." ->
    // "."), a step that decode() here does not take (it is the tokenizers library's decode); LongBench's
    // truncation and answers go through transformers' decode (core/longbench.h applies it).
    bool clean_up_tokenization_spaces() const;
    // 16 hex digits identifying what decides ids and prompts: tokenizer.json's content (vocabulary, merges,
    // added tokens, normaliser...) as loaded, BOS/EOS handling and the chat template. Saved caches record it
    // so that a cache is never read with another tokenizer's ids.
    const std::string& fingerprint() const;

  private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace varrate

#pragma once
// tokenizer.json "decoder": turns token pieces back into text. ByteLevel (GPT-2 char -> byte, then lossy
// UTF-8), Replace, ByteFallback (<0xNN> runs -> UTF-8 or U+FFFD per byte), Fuse, Strip, Metaspace and
// Sequence. No decoder joins the pieces with spaces, as the reference does.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate {

class TokenizerDecoder {
  public:
    TokenizerDecoder(const nlohmann::json& spec, const std::string& where);
    ~TokenizerDecoder();
    TokenizerDecoder(TokenizerDecoder&&) noexcept;

    std::string decode(std::vector<std::string> tokens) const;

  private:
    struct Step;
    void add(const nlohmann::json& spec, const std::string& where);
    bool present_ = false;
    std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace varrate

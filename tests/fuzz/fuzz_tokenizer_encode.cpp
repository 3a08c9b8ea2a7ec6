// Arbitrary bytes (not necessarily UTF-8) through two valid tokenizers of both kinds the project reads: the
// demo model's byte-level BPE and stories260k's SentencePiece-style BPE with byte fallback (a seed of the
// tokenizer target), each with and without special tokens, then decoded.
#include <vector>

#include "base/file_io.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<varrate::Tokenizer> tokenizers = [] {
        std::vector<varrate::Tokenizer> out;
        out.push_back(
            varrate::Tokenizer::load(varrate::fuzz::source_dir() / "resources/models/varrate-demo"));
        const auto sp = varrate::fuzz::source_dir() / "tests/fuzz/corpus/tokenizer/stories260k.json";
        out.push_back(varrate::Tokenizer::from_json(varrate::read_json_file(sp), nullptr, sp.string()));
        return out;
    }();
    return varrate::fuzz::run([&] {
        const std::string text = varrate::fuzz::text(data, size);
        for (const auto& tok : tokenizers) {
            (void)tok.decode(tok.encode(text));
            (void)tok.decode(tok.encode(text, /*add_special_tokens=*/false), /*skip_special_tokens=*/true);
        }
    });
}

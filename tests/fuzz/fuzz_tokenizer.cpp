// tokenizer.json (without a tokenizer_config.json): model, vocab and merges, added tokens, normaliser,
// pre-tokenizer, decoder and post_processor; a tokenizer that loads then encodes and decodes a fixed text.
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto j = varrate::fuzz::parse_json(data, size);
    if (!j) return 0;
    return varrate::fuzz::run([&] {
        const auto tok = varrate::Tokenizer::from_json(*j, nullptr, "tokenizer.json");
        const auto ids = tok.encode("Hello world! It's 2024 \xC3\xA9t\xC3\xA9 <s>\n\t  x");
        (void)tok.decode(ids);
        (void)tok.decode(ids, /*skip_special_tokens=*/true);
        for (int64_t id = 0; id < tok.vocab_size() && id < 16; ++id) (void)tok.token_string(id);
    });
}

// tokenizer_config.json over the demo model's tokenizer.json: bos/eos tokens (strings or AddedToken objects),
// add_bos_token / add_eos_token, chat_template (a string or a list of named templates), clean-up flag.
#include "base/file_io.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const nlohmann::json tokenizer_json =
        varrate::read_json_file(varrate::fuzz::source_dir() / "resources/models/varrate-demo/tokenizer.json");
    const auto j = varrate::fuzz::parse_json(data, size);
    if (!j) return 0;
    return varrate::fuzz::run([&] {
        const auto tok = varrate::Tokenizer::from_json(tokenizer_json, *j, "tokenizer_config.json");
        (void)tok.decode(tok.encode("Once upon a time"));
        (void)tok.bos_token();
        (void)tok.eos_id();
    });
}

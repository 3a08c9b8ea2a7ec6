// Chat templates: the bytes as tokenizer_config.json's chat_template (family and style detection, then a
// rendering of a short conversation carrying the bytes as a message), and as a Llama-3.1 tool given as JSON
// text (python_json_dumps, the template's tojson).
#include <vector>

#include "models/tokenizer/chat_template.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace varrate;
    const std::string text = fuzz::text(data, size);
    fuzz::run([&] {
        const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", text}};
        (void)render_chat(detect_chat_format(text), messages, true, "<s>", "</s>", detect_chat_style(text));
    });
    fuzz::run([&] {
        (void)python_json_dumps(text);
        (void)python_json_dumps(text, 4);
    });
    return fuzz::run([&] {
        ChatOptions options;
        options.tools = std::vector<std::string>{text};
        (void)render_chat(ChatFormat::Llama31, {{"user", "What is the weather?"}}, true, "<|begin_of_text|>",
                          "<|eot_id|>", {}, options);
    });
}

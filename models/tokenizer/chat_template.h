#pragma once
// Chat prompt rendering for the families we support, chosen from tokenizer_config.json's chat_template:
// Llama-3 header format (3.0, and 3.1 with its dated system header and JSON tools), ChatML (Qwen2/2.5; Qwen3
// with thinking disabled), Mistral [INST]. Models without a template use plain text. Output equals the Jinja
// rendering transformers would produce.
#include <optional>
#include <string>
#include <vector>

namespace varrate {

class Tokenizer;

// Llama31: Llama-3.1's template (also Llama-3.3's), told from 3.0's by its "Cutting Knowledge Date" line.
enum class ChatFormat { Plain, Llama3, Llama31, ChatML, Qwen3, Mistral };

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

ChatFormat detect_chat_format(const std::string& chat_template);
std::string to_string(ChatFormat f);

// Details of a family that vary between its templates, read from the template text.
struct ChatStyle {
    std::string default_system_prompt;     // ChatML (Qwen2/2.5): used when the first message is not "system"
    bool mistral_space_after_eos = false;  // Mistral v0.1: `content + eos_token + ' '`
};
ChatStyle detect_chat_style(const std::string& chat_template);

// What a caller passes to a template besides the messages (apply_chat_template's keyword arguments).
struct ChatOptions {
    // Llama-3.1: the "Today Date: " line of the system header; "" for the template's default.
    std::string date_string;
    // Llama-3.1: custom tools, one JSON object (as text) per tool, rendered as the template's
    // `tojson(indent=4)` (Python's json.dumps: key order kept, non-ASCII kept). nullopt: no tools; an empty
    // list still renders the tool preamble, as transformers does for tools=[]. Other formats reject tools.
    std::optional<std::vector<std::string>> tools;
    // Llama-3.1: the tools and their instructions go into the first user message (true, the template's
    // default) or into the system message.
    bool tools_in_user_message = true;
};

// The date Llama-3.1's template uses when none is given.
inline constexpr const char* kLlama31DefaultDate = "26 Jul 2024";

// The rendered prompt text (encode it with add_special_tokens = false, as apply_chat_template does).
// Mistral: roles must alternate user/assistant (varrate::Error otherwise); a leading system message is put
// before the first user message, separated by a blank line. Plain: the contents joined by newlines.
// Llama-3.1: a system header always comes first (with the date, and "Environment: ipython" when tools are
// given); "tool"/"ipython" messages render as ipython turns with their content as a JSON string; with tools
// in the user message the first message after the system one carries them (varrate::Error when there is
// none). Assistant tool calls (messages with tool_calls) and builtin_tools are not supported.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token, const ChatStyle& style = {},
                        const ChatOptions& options = {});
std::string render_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true, const ChatOptions& options = {});

// Python's json.dumps(value, ensure_ascii=False, indent=indent) of one JSON text (indent < 0: None), keys in
// the order written: what transformers' `tojson` filter renders. varrate::Error when the text is not JSON.
std::string python_json_dumps(const std::string& json_text, int indent = -1);

}  // namespace varrate

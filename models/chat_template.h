#pragma once
// Chat prompt rendering for the families we support, chosen from tokenizer_config.json's chat_template:
// Llama-3 header format, ChatML (Qwen2/2.5; Qwen3 with thinking disabled), Mistral [INST]. Models without a
// template use plain text. Output equals the Jinja rendering transformers would produce.
#include <string>
#include <vector>

namespace varrate {

class Tokenizer;

enum class ChatFormat { Plain, Llama3, ChatML, Qwen3, Mistral };

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

// The rendered prompt text (encode it with add_special_tokens = false, as apply_chat_template does).
// Mistral: roles must alternate user/assistant (varrate::Error otherwise); a leading system message is put
// before the first user message, separated by a blank line. Plain: the contents joined by newlines.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token, const ChatStyle& style = {});
std::string render_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true);

}  // namespace varrate

#include "models/chat_template.h"

#include "core/base/error.h"
#include "models/tokenizer.h"
#include "models/tokenizer_unicode.h"

namespace varrate {

namespace {

bool contains(const std::string& s, const char* needle) {
    return s.find(needle) != std::string::npos;
}

// Python str.isspace(), which Jinja's `trim` filter uses through str.strip().
bool py_space(char32_t cp) {
    return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::string py_strip(const std::string& s) {
    size_t begin = 0, end = s.size();
    while (begin < end) {
        size_t i = begin;
        if (!py_space(unicode::next_code_point(s, i))) break;
        begin = i;
    }
    while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!py_space(unicode::next_code_point(s, i))) break;
        end = start;
    }
    return s.substr(begin, end - begin);
}

// Python's str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string lstrip_nl(const std::string& s) {
    const size_t b = s.find_first_not_of('\n');
    return b == std::string::npos ? "" : s.substr(b);
}
std::string rstrip_nl(const std::string& s) {
    const size_t e = s.find_last_not_of('\n');
    return e == std::string::npos ? "" : s.substr(0, e + 1);
}
std::string strip_nl(const std::string& s) {
    return lstrip_nl(rstrip_nl(s));
}

bool starts_with(const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& bos) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos;
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
               py_strip(messages[i].content) + "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

// Qwen2 / Qwen2.5 (without tools): an optional default system turn, then every message as a ChatML turn.
std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& default_system) {
    std::string out;
    if (!default_system.empty() && (messages.empty() || messages[0].role != "system"))
        out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
    for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

// Qwen3's template without tools, with enable_thinking=false.
std::string render_qwen3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    std::string out;
    if (!messages.empty() && messages[0].role == "system")
        out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
    // The last user turn that is not a wrapped tool response: reasoning is only kept after it.
    long last_query = static_cast<long>(messages.size()) - 1;
    for (long i = last_query; i >= 0; --i) {
        const auto& m = messages[static_cast<size_t>(i)];
        if (m.role == "user" &&
            !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        const bool first = i == 0, last = i + 1 == messages.size();
        if (m.role == "user" || (m.role == "system" && !first)) {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            std::string content = m.content, reasoning;
            if (const size_t end = m.content.find("</think>"); end != std::string::npos) {
                content = lstrip_nl(m.content.substr(m.content.rfind("</think>") + 8));
                const std::string before = rstrip_nl(m.content.substr(0, end));
                const size_t open = before.rfind("<think>");
                reasoning = lstrip_nl(open == std::string::npos ? before : before.substr(open + 7));
            }
            if (static_cast<long>(i) > last_query && (last || !reasoning.empty()))
                out += "<|im_start|>" + m.role + "\n<think>\n" + strip_nl(reasoning) + "\n</think>\n\n" +
                       lstrip_nl(content);
            else
                out += "<|im_start|>" + m.role + "\n" + content;
            out += "<|im_end|>\n";
        } else if (m.role == "tool") {
            if (first || messages[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
            if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        }
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    return out;
}

std::string render_mistral(const std::vector<ChatMessage>& messages, const std::string& bos,
                           const std::string& eos, bool space_after_eos) {
    size_t start = 0;
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content;
        start = 1;
    }
    std::string out = bos;
    for (size_t i = start; i < messages.size(); ++i) {
        const auto& m = messages[i];
        const bool user_turn = (i - start) % 2 == 0;
        if (m.role != "user" && m.role != "assistant")
            throw Error(
                "chat: Mistral format supports only user and assistant messages (and a leading system "
                "message), got role '" +
                m.role + "'");
        if ((m.role == "user") != user_turn)
            throw Error("chat: Mistral format needs roles to alternate user/assistant/user/..., message " +
                        std::to_string(i) + " has role '" + m.role + "'");
        if (m.role == "user") {
            const bool first_user = i == start;
            out += "[INST] " + (first_user && !system.empty() ? system + "\n\n" : std::string()) + m.content +
                   " [/INST]";
        } else {
            out += m.content + eos + (space_after_eos ? " " : "");
        }
    }
    return out;
}

// The literal default system turn of a ChatML template, e.g. Qwen2.5's
// '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n'.
std::string chatml_default_system(const std::string& tpl) {
    const std::string head = "<|im_start|>system";
    for (size_t pos = tpl.find(head); pos != std::string::npos; pos = tpl.find(head, pos + 1)) {
        size_t text = pos + head.size();
        if (tpl.compare(text, 2, "\\n") == 0)
            text += 2;
        else if (tpl.compare(text, 1, "\n") == 0)
            text += 1;
        else
            continue;
        const size_t end = tpl.find("<|im_end|>", text);
        if (end == std::string::npos) continue;
        const std::string prompt = tpl.substr(text, end - text);
        // Only a plain literal counts: quotes, concatenation or tags mean the text is built from messages.
        if (!prompt.empty() && prompt.find_first_of("'\"+{}\\") == std::string::npos) return prompt;
    }
    return "";
}

}  // namespace

ChatFormat detect_chat_format(const std::string& t) {
    if (contains(t, "<|start_header_id|>")) return ChatFormat::Llama3;
    if (contains(t, "<|im_start|>"))
        return contains(t, "enable_thinking") || contains(t, "<think>") ? ChatFormat::Qwen3
                                                                        : ChatFormat::ChatML;
    if (contains(t, "[INST]")) return ChatFormat::Mistral;
    return ChatFormat::Plain;
}

std::string to_string(ChatFormat f) {
    switch (f) {
        case ChatFormat::Plain:
            return "plain";
        case ChatFormat::Llama3:
            return "llama3";
        case ChatFormat::ChatML:
            return "chatml";
        case ChatFormat::Qwen3:
            return "qwen3";
        case ChatFormat::Mistral:
            return "mistral";
    }
    return "plain";
}

ChatStyle detect_chat_style(const std::string& chat_template) {
    ChatStyle style;
    if (detect_chat_format(chat_template) == ChatFormat::ChatML)
        style.default_system_prompt = chatml_default_system(chat_template);
    style.mistral_space_after_eos = contains(chat_template, "eos_token + ' '");
    return style;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token, const ChatStyle& style) {
    switch (format) {
        case ChatFormat::Llama3:
            return render_llama3(messages, add_generation_prompt, bos_token);
        case ChatFormat::ChatML:
            return render_chatml(messages, add_generation_prompt, style.default_system_prompt);
        case ChatFormat::Qwen3:
            return render_qwen3(messages, add_generation_prompt);
        case ChatFormat::Mistral:
            return render_mistral(messages, bos_token, eos_token, style.mistral_space_after_eos);
        case ChatFormat::Plain:
            break;
    }
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) out += (i ? "\n" : "") + messages[i].content;
    return out;
}

std::string render_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
    const std::string& tpl = tokenizer.chat_template();
    return render_chat(detect_chat_format(tpl), messages, add_generation_prompt, tokenizer.bos_token(),
                       tokenizer.eos_token(), detect_chat_style(tpl));
}

}  // namespace varrate

#include "models/tokenizer/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/tokenizer_unicode.h"

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

// Python's json encoder with ensure_ascii=False: the string escapes of c_encode_basestring.
void py_json_string(const std::string& s, std::string& out) {
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

// Python's float.__repr__: the shortest digits that round-trip, in positional notation for decimal exponents
// -4..15 (with ".0" when integral), else d[.ddd]e+XX.
std::string py_float_repr(double v) {
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
    std::string sign;
    if (!sci.empty() && sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    const int exp10 = std::atoi(sci.c_str() + e + 1);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    if (exp10 >= -4 && exp10 < 16) {
        std::string out;
        if (exp10 < 0) {
            out = "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
        } else {
            const auto point = static_cast<size_t>(exp10) + 1;
            if (digits.size() <= point)
                out = digits + std::string(point - digits.size(), '0') + ".0";
            else
                out = digits.substr(0, point) + "." + digits.substr(point);
        }
        return sign + out;
    }
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return sign + mant + ebuf;
}

// json.dumps(value, ensure_ascii=False, indent=indent): separators (', ', ': ') without indent, (',', ': ')
// with one; empty containers as [] and {}.
void py_json_dump(const nlohmann::ordered_json& j, int indent, int depth, std::string& out) {
    const auto newline = [&](int d) {
        out += '\n';
        out.append(static_cast<size_t>(indent * d), ' ');
    };
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::object:
        case nlohmann::ordered_json::value_t::array: {
            const bool object = j.is_object();
            if (j.empty()) {
                out += object ? "{}" : "[]";
                return;
            }
            out += object ? '{' : '[';
            bool first = true;
            for (auto it = j.begin(); it != j.end(); ++it) {
                if (!first) out += indent >= 0 ? "," : ", ";
                first = false;
                if (indent >= 0) newline(depth + 1);
                if (object) {
                    py_json_string(it.key(), out);
                    out += ": ";
                }
                py_json_dump(*it, indent, depth + 1, out);
            }
            if (indent >= 0) newline(depth);
            out += object ? '}' : ']';
            return;
        }
        case nlohmann::ordered_json::value_t::string:
            py_json_string(j.get_ref<const std::string&>(), out);
            return;
        case nlohmann::ordered_json::value_t::boolean:
            out += j.get<bool>() ? "true" : "false";
            return;
        case nlohmann::ordered_json::value_t::number_integer:
            out += std::to_string(j.get<int64_t>());
            return;
        case nlohmann::ordered_json::value_t::number_unsigned:
            out += std::to_string(j.get<uint64_t>());
            return;
        case nlohmann::ordered_json::value_t::number_float:
            out += py_float_repr(j.get<double>());
            return;
        default:
            out += "null";
            return;
    }
}

std::string llama_turn(const std::string& role, const std::string& content) {
    return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
}

// Llama-3.1-8B-Instruct's template (custom tools; no assistant tool calls, no builtin_tools).
std::string render_llama31(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           const std::string& bos, const ChatOptions& options) {
    if (messages.empty()) throw Error("chat: the Llama-3.1 format needs at least one message");
    const char* const respond_format =
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
        "value}.Do not use variables.\n\n";
    std::string tools_text;
    if (options.tools)
        for (const std::string& t : *options.tools) tools_text += python_json_dumps(t, 4) + "\n\n";
    const bool tools = options.tools.has_value();
    const std::string date = options.date_string.empty() ? kLlama31DefaultDate : options.date_string;

    size_t next = 0;
    std::string system;
    if (messages[0].role == "system") {
        system = py_strip(messages[0].content);
        next = 1;
    }
    std::string out = bos + "<|start_header_id|>system<|end_header_id|>\n\n";
    if (tools) out += "Environment: ipython\n";
    out += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n";
    if (tools && !options.tools_in_user_message)
        out += std::string(
                   "You have access to the following functions. To call a function, please respond with JSON "
                   "for a function call.") +
               respond_format + tools_text;
    out += system + "<|eot_id|>";
    if (tools && options.tools_in_user_message) {
        if (next == messages.size())
            throw Error(
                "chat: cannot put tools in the first user message when there's no first user message "
                "(Llama-3.1)");
        out +=
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with "
            "a "
            "JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
            std::string(respond_format) + tools_text + py_strip(messages[next].content) + "<|eot_id|>";
        ++next;
    }
    for (size_t i = next; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool" || m.role == "ipython") {
            // `message.content is iterable` holds for a string: the template renders it through tojson.
            std::string quoted;
            py_json_string(m.content, quoted);
            out += llama_turn("ipython", quoted);
        } else {
            out += llama_turn(m.role, py_strip(m.content));
        }
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
    if (contains(t, "<|start_header_id|>"))
        return contains(t, "Cutting Knowledge Date") ? ChatFormat::Llama31 : ChatFormat::Llama3;
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
        case ChatFormat::Llama31:
            return "llama3.1";
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
                        const std::string& eos_token, const ChatStyle& style, const ChatOptions& options) {
    if (options.tools && format != ChatFormat::Llama31)
        throw Error("chat: tools are supported only by the Llama-3.1 format, not " + to_string(format));
    switch (format) {
        case ChatFormat::Llama3:
            return render_llama3(messages, add_generation_prompt, bos_token);
        case ChatFormat::Llama31:
            return render_llama31(messages, add_generation_prompt, bos_token, options);
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
                        bool add_generation_prompt, const ChatOptions& options) {
    const std::string& tpl = tokenizer.chat_template();
    return render_chat(detect_chat_format(tpl), messages, add_generation_prompt, tokenizer.bos_token(),
                       tokenizer.eos_token(), detect_chat_style(tpl), options);
}

std::string python_json_dumps(const std::string& json_text, int indent) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("chat: a tool definition is not valid JSON: ") + e.what());
    }
    std::string out;
    py_json_dump(j, indent, 0, out);
    return out;
}

}  // namespace varrate

#include "models/tokenizer/tokenizer_decode.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/tokenizer/tokenizer_json.h"
#include "models/tokenizer/tokenizer_regex.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

struct TokenizerDecoder::Step {
    enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
    std::string pattern, content;           // Replace (string pattern); Strip/Metaspace: the character
    std::unique_ptr<TokenizerRegex> regex;  // Replace (regex pattern)
    size_t start = 0, stop = 0;             // Strip
    bool prepend = true;                    // Metaspace: a prefix ▁ was added when encoding
};

namespace {

std::string one_char(const nlohmann::json& spec, const char* key, const std::string& ctx) {
    const std::string s = tokjson::string_field(spec, key, ctx);
    size_t i = 0;
    if (s.empty() || (unicode::next_code_point(s, i), i) != s.size())
        throw Error(ctx + ": \"" + key + "\" must be exactly one character");
    return s;
}

size_t count_field(const nlohmann::json& spec, const char* key, const std::string& ctx) {
    const auto it = spec.find(key);
    if (it == spec.end() || !it->is_number_unsigned())
        throw Error(ctx + ": \"" + key + "\" must be a count >= 0");
    return it->get<size_t>();
}

// Byte value of a "<0xNN>" piece, or -1.
int byte_piece(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
        if (bytes.empty()) return;
        if (unicode::find_invalid_utf8(bytes) == std::string::npos) {
            out.push_back(bytes);
        } else {
            for (size_t k = 0; k < bytes.size(); ++k) out.push_back("\xEF\xBF\xBD");
        }
        bytes.clear();
    };
    for (auto& t : tokens) {
        const int b = byte_piece(t);
        if (b >= 0) {
            bytes += static_cast<char>(b);
        } else {
            flush();
            out.push_back(std::move(t));
        }
    }
    flush();
    return out;
}

std::string byte_level(const std::vector<std::string>& tokens) {
    std::string bytes;
    for (const auto& t : tokens) {
        // A piece whose characters are not all byte-mapped (a plain added token) contributes its own UTF-8.
        std::string mapped;
        bool all = true;
        for (size_t i = 0; i < t.size() && all;) {
            const int b = unicode::unicode_to_byte(unicode::next_code_point(t, i));
            if (b < 0)
                all = false;
            else
                mapped += static_cast<char>(b);
        }
        bytes += all ? mapped : t;
    }
    return unicode::utf8_lossy(bytes);
}

std::string strip_chars(const std::string& t, const std::string& c, size_t start, size_t stop) {
    std::vector<std::pair<size_t, size_t>> chars;  // [begin, end) of each character
    for (size_t i = 0; i < t.size();) {
        const size_t b = i;
        unicode::next_code_point(t, i);
        chars.emplace_back(b, i);
    }
    auto is_c = [&](size_t k) { return t.compare(chars[k].first, chars[k].second - chars[k].first, c) == 0; };
    size_t first = 0, last = chars.size();
    for (size_t k = 0; k < start && k < chars.size() && is_c(k); ++k) first = k + 1;
    for (size_t k = 0; k < stop && k < chars.size() && is_c(chars.size() - 1 - k); ++k)
        last = chars.size() - 1 - k;
    if (first >= last) return "";
    return t.substr(chars[first].first, chars[last - 1].second - chars[first].first);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out += to;
    }
    out.append(s, pos, std::string::npos);
    return out;
}

}  // namespace

TokenizerDecoder::TokenizerDecoder(const nlohmann::json& spec, const std::string& where) {
    present_ = !spec.is_null();
    if (present_) add(spec, where);
}
TokenizerDecoder::~TokenizerDecoder() = default;
TokenizerDecoder::TokenizerDecoder(TokenizerDecoder&&) noexcept = default;

void TokenizerDecoder::add(const nlohmann::json& spec, const std::string& where) {
    const std::string ctx = where + ": decoder";
    const std::string type = tokjson::type_of(spec, ctx);
    auto step = std::make_unique<Step>();
    if (type == "Sequence") {
        for (const auto& s : tokjson::array_field(spec, "decoders", ctx + " Sequence")) add(s, where);
        return;
    } else if (type == "ByteLevel") {
        step->kind = Step::Kind::ByteLevel;
    } else if (type == "ByteFallback") {
        step->kind = Step::Kind::ByteFallback;
    } else if (type == "Fuse") {
        step->kind = Step::Kind::Fuse;
    } else if (type == "Replace") {
        step->kind = Step::Kind::Replace;
        const tokjson::Pattern p = tokjson::pattern_field(spec, ctx + " Replace");
        step->content = tokjson::string_field(spec, "content", ctx + " Replace");
        if (p.is_regex)
            step->regex = std::make_unique<TokenizerRegex>(p.text, ctx + " Replace");
        else
            step->pattern = p.text;
    } else if (type == "Strip") {
        step->kind = Step::Kind::Strip;
        step->content = one_char(spec, "content", ctx + " Strip");
        step->start = count_field(spec, "start", ctx + " Strip");
        step->stop = count_field(spec, "stop", ctx + " Strip");
    } else if (type == "Metaspace") {
        step->kind = Step::Kind::Metaspace;
        step->content = one_char(spec, "replacement", ctx + " Metaspace");
        if (auto it = spec.find("prepend_scheme"); it != spec.end() && it->is_string())
            step->prepend = it->get<std::string>() != "never";
        else
            step->prepend = tokjson::bool_field(spec, "add_prefix_space", true, ctx + " Metaspace");
    } else {
        throw Error(ctx + " type '" + type +
                    "' is not supported (supported: Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, "
                    "Metaspace)");
    }
    steps_.push_back(std::move(step));
}

std::string TokenizerDecoder::decode(std::vector<std::string> tokens) const {
    if (!present_) {
        std::string joined;
        for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
        return joined;
    }
    for (const auto& step : steps_) {
        switch (step->kind) {
            case Step::Kind::ByteLevel:
                tokens = {byte_level(tokens)};
                break;
            case Step::Kind::ByteFallback:
                tokens = byte_fallback(std::move(tokens));
                break;
            case Step::Kind::Fuse: {
                std::string fused;
                for (const auto& t : tokens) fused += t;
                tokens = {std::move(fused)};
                break;
            }
            case Step::Kind::Replace:
                for (auto& t : tokens) {
                    if (!step->regex) {
                        t = replace_all(t, step->pattern, step->content);
                        continue;
                    }
                    t = step->regex->replace_all(t, step->content);
                }
                break;
            case Step::Kind::Strip:
                for (auto& t : tokens) t = strip_chars(t, step->content, step->start, step->stop);
                break;
            case Step::Kind::Metaspace:
                for (size_t i = 0; i < tokens.size(); ++i) {
                    // The first piece's markers came from the encoder's prefix, so they become nothing.
                    tokens[i] = replace_all(tokens[i], step->content, i == 0 && step->prepend ? "" : " ");
                }
                break;
        }
    }
    std::string text;
    for (const auto& t : tokens) text += t;
    return text;
}

}  // namespace varrate

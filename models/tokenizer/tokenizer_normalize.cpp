#include "models/tokenizer/tokenizer_normalize.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/tokenizer/tokenizer_json.h"
#include "models/tokenizer/tokenizer_regex.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

struct TokenizerNormalizer::Step {
    enum class Kind { Form, Lowercase, Strip, Prepend, ReplaceString, ReplaceRegex } kind;
    unicode::NormalForm form = unicode::NormalForm::NFC;
    bool strip_left = false, strip_right = false;
    std::string text;     // Prepend: the prefix; Replace: the pattern string
    std::string content;  // Replace: the replacement
    std::unique_ptr<TokenizerRegex> regex;
};

namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out += to;
    }
    out.append(s, pos, std::string::npos);
    return out;
}

std::string strip_whitespace(const std::string& s, bool left, bool right) {
    size_t begin = 0, end = s.size();
    if (left) {
        while (begin < end) {
            size_t i = begin;
            if (!unicode::is_whitespace(unicode::next_code_point(s, i))) break;
            begin = i;
        }
    }
    if (right) {
        while (end > begin) {
            size_t start = end - 1;
            while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
            size_t i = start;
            if (!unicode::is_whitespace(unicode::next_code_point(s, i))) break;
            end = start;
        }
    }
    return s.substr(begin, end - begin);
}

}  // namespace

TokenizerNormalizer::TokenizerNormalizer(const nlohmann::json& spec, const std::string& where) {
    if (!spec.is_null()) add(spec, where);
}
TokenizerNormalizer::~TokenizerNormalizer() = default;
TokenizerNormalizer::TokenizerNormalizer(TokenizerNormalizer&&) noexcept = default;

void TokenizerNormalizer::add(const nlohmann::json& spec, const std::string& where) {
    const std::string ctx = where + ": normalizer";
    const std::string type = tokjson::type_of(spec, ctx);
    auto step = std::make_unique<Step>();
    if (type == "Sequence") {
        for (const auto& s : tokjson::array_field(spec, "normalizers", ctx + " Sequence")) add(s, where);
        return;
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        step->kind = Step::Kind::Form;
        step->form = type == "NFC"    ? unicode::NormalForm::NFC
                     : type == "NFD"  ? unicode::NormalForm::NFD
                     : type == "NFKC" ? unicode::NormalForm::NFKC
                                      : unicode::NormalForm::NFKD;
    } else if (type == "Lowercase") {
        step->kind = Step::Kind::Lowercase;
    } else if (type == "Strip") {
        step->kind = Step::Kind::Strip;
        step->strip_left = tokjson::bool_field(spec, "strip_left", true, ctx + " Strip");
        step->strip_right = tokjson::bool_field(spec, "strip_right", true, ctx + " Strip");
    } else if (type == "Prepend") {
        step->kind = Step::Kind::Prepend;
        step->text = tokjson::string_field(spec, "prepend", ctx + " Prepend");
    } else if (type == "Replace") {
        const tokjson::Pattern p = tokjson::pattern_field(spec, ctx + " Replace");
        step->content = tokjson::string_field(spec, "content", ctx + " Replace");
        if (p.is_regex) {
            step->kind = Step::Kind::ReplaceRegex;
            step->regex = std::make_unique<TokenizerRegex>(p.text, ctx + " Replace");
        } else {
            step->kind = Step::Kind::ReplaceString;
            step->text = p.text;
        }
    } else {
        throw Error(
            ctx + " type '" + type +
            "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, "
            "Replace)");
    }
    steps_.push_back(std::move(step));
}

std::string TokenizerNormalizer::apply(std::string text) const {
    for (const auto& step : steps_) {
        switch (step->kind) {
            case Step::Kind::Form:
                text = unicode::normalize(text, step->form);
                break;
            case Step::Kind::Lowercase:
                text = unicode::to_lower(text);
                break;
            case Step::Kind::Strip:
                text = strip_whitespace(text, step->strip_left, step->strip_right);
                break;
            case Step::Kind::Prepend:
                if (!text.empty()) text = step->text + text;
                break;
            case Step::Kind::ReplaceString:
                text = replace_all(text, step->text, step->content);
                break;
            case Step::Kind::ReplaceRegex:
                text = step->regex->replace_all(text, step->content);
                break;
        }
    }
    return text;
}

}  // namespace varrate

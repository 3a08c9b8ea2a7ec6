#include "models/tokenizer/tokenizer_pretokenize.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/tokenizer/tokenizer_json.h"
#include "models/tokenizer/tokenizer_regex.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is true.
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const std::string& s, const std::string& ctx) {
    if (s == "Removed") return Behavior::Removed;
    if (s == "Isolated") return Behavior::Isolated;
    if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
    if (s == "MergedWithNext") return Behavior::MergedWithNext;
    if (s == "Contiguous") return Behavior::Contiguous;
    throw Error(ctx + ": unknown split behavior '" + s +
                "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

struct Span {
    size_t begin, end;
    bool is_match;
};

// Splits `piece` at the given matches following the reference SplitDelimiterBehavior rules.
void split_piece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 Behavior behavior, bool invert, std::vector<PreToken>& out) {
    std::vector<Span> spans;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
        if (b > prev) spans.push_back({prev, b, invert});
        spans.push_back({b, e, !invert});
        prev = e;
    }
    if (prev < piece.text.size()) spans.push_back({prev, piece.text.size(), invert});

    std::vector<Span> kept;  // is_match here means "drop"
    bool previous_match = false;
    switch (behavior) {
        case Behavior::Isolated:
            for (auto s : spans) kept.push_back({s.begin, s.end, false});
            break;
        case Behavior::Removed:
            for (auto s : spans) kept.push_back(s);
            break;
        case Behavior::MergedWithPrevious:
            for (auto s : spans) {
                if (s.is_match && !previous_match && !kept.empty())
                    kept.back().end = s.end;
                else
                    kept.push_back({s.begin, s.end, false});
                previous_match = s.is_match;
            }
            break;
        case Behavior::MergedWithNext:
            for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
                if (it->is_match && !previous_match && !kept.empty())
                    kept.back().begin = it->begin;
                else
                    kept.push_back({it->begin, it->end, false});
                previous_match = it->is_match;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        case Behavior::Contiguous:
            for (auto s : spans) {
                if (s.is_match == previous_match && !kept.empty())
                    kept.back().end = s.end;
                else
                    kept.push_back({s.begin, s.end, false});
                previous_match = s.is_match;
            }
            break;
    }
    for (const auto& s : kept) {
        if (s.is_match || s.end == s.begin) continue;
        out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
    }
}

std::vector<std::pair<size_t, size_t>> find_string(const std::string& text, const std::string& needle) {
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t pos = 0, hit; (hit = text.find(needle, pos)) != std::string::npos; pos = hit + needle.size())
        matches.emplace_back(hit, hit + needle.size());
    return matches;
}

}  // namespace

struct TokenizerPreTokenizer::Step {
    enum class Kind { Split, PrefixSpace, ByteMap, Metaspace } kind;
    // Split
    std::unique_ptr<TokenizerRegex> regex;  // null: split on `literal`
    std::string literal;
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    // Metaspace
    std::string replacement;
    enum class Prepend { Always, First, Never } prepend = Prepend::Always;
    bool split = true;
};

TokenizerPreTokenizer::TokenizerPreTokenizer(const nlohmann::json& spec, const std::string& where) {
    if (!spec.is_null()) add(spec, where);
}
TokenizerPreTokenizer::~TokenizerPreTokenizer() = default;
TokenizerPreTokenizer::TokenizerPreTokenizer(TokenizerPreTokenizer&&) noexcept = default;

void TokenizerPreTokenizer::add(const nlohmann::json& spec, const std::string& where) {
    const std::string ctx = where + ": pre_tokenizer";
    const std::string type = tokjson::type_of(spec, ctx);
    auto step = std::make_unique<Step>();
    auto regex_split = [&](const char* pattern, Behavior behavior, bool invert) {
        step->kind = Step::Kind::Split;
        step->regex = std::make_unique<TokenizerRegex>(pattern, ctx + " " + type);
        step->behavior = behavior;
        step->invert = invert;
    };
    if (type == "Sequence") {
        for (const auto& s : tokjson::array_field(spec, "pretokenizers", ctx + " Sequence")) add(s, where);
        return;
    } else if (type == "Split") {
        const std::string sctx = ctx + " Split";
        const tokjson::Pattern p = tokjson::pattern_field(spec, sctx);
        step->kind = Step::Kind::Split;
        if (p.is_regex)
            step->regex = std::make_unique<TokenizerRegex>(p.text, sctx);
        else
            step->literal = p.text;
        step->behavior = parse_behavior(tokjson::string_field(spec, "behavior", sctx), sctx);
        step->invert = tokjson::bool_field(spec, "invert", false, sctx);
    } else if (type == "ByteLevel") {
        // Prefix space, then the GPT-2 split, then the byte mapping, in that order.
        const std::string bctx = ctx + " ByteLevel";
        if (tokjson::bool_field(spec, "add_prefix_space", true, bctx)) {
            steps_.push_back(std::make_unique<Step>());
            steps_.back()->kind = Step::Kind::PrefixSpace;
        }
        if (tokjson::bool_field(spec, "use_regex", true, bctx)) {
            regex_split(kGpt2Pattern, Behavior::Isolated, false);
            steps_.push_back(std::move(step));
            step = std::make_unique<Step>();
        }
        step->kind = Step::Kind::ByteMap;
    } else if (type == "Metaspace") {
        const std::string mctx = ctx + " Metaspace";
        step->kind = Step::Kind::Metaspace;
        step->replacement = tokjson::string_field(spec, "replacement", mctx);
        size_t i = 0;
        if (step->replacement.empty() ||
            (unicode::next_code_point(step->replacement, i), i) != step->replacement.size())
            throw Error(mctx + ": \"replacement\" must be exactly one character");
        if (spec.contains("prepend_scheme") && !spec["prepend_scheme"].is_null()) {
            const std::string scheme = tokjson::string_field(spec, "prepend_scheme", mctx);
            if (scheme == "always")
                step->prepend = Step::Prepend::Always;
            else if (scheme == "first")
                step->prepend = Step::Prepend::First;
            else if (scheme == "never")
                step->prepend = Step::Prepend::Never;
            else
                throw Error(mctx + ": unknown prepend_scheme '" + scheme +
                            "' (expected first, always or never)");
        } else {
            step->prepend = tokjson::bool_field(spec, "add_prefix_space", true, mctx) ? Step::Prepend::Always
                                                                                      : Step::Prepend::Never;
        }
        step->split = tokjson::bool_field(spec, "split", true, mctx);
    } else if (type == "Digits") {
        const bool individual = tokjson::bool_field(spec, "individual_digits", false, ctx + " Digits");
        regex_split(individual ? R"(\p{N})" : R"(\p{N}+)", Behavior::Isolated, false);
    } else if (type == "Whitespace") {
        regex_split(R"(\w+|[^\w\s]+)", Behavior::Removed, true);
    } else if (type == "WhitespaceSplit") {
        regex_split(R"(\s+)", Behavior::Removed, false);
    } else {
        throw Error(
            ctx + " type '" + type +
            "' is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace, "
            "WhitespaceSplit)");
    }
    steps_.push_back(std::move(step));
}

void TokenizerPreTokenizer::apply(std::vector<PreToken>& pieces) const {
    const auto& byte_map = unicode::byte_to_unicode();
    for (const auto& step : steps_) {
        std::vector<PreToken> out;
        out.reserve(pieces.size());
        switch (step->kind) {
            case Step::Kind::Split:
                for (const auto& p : pieces) {
                    const auto matches =
                        step->regex ? step->regex->find_all(p.text) : find_string(p.text, step->literal);
                    split_piece(p, matches, step->behavior, step->invert, out);
                }
                break;
            case Step::Kind::PrefixSpace:
                for (auto& p : pieces) {
                    if (p.text[0] != ' ') p.text.insert(0, " ");
                    out.push_back(std::move(p));
                }
                break;
            case Step::Kind::ByteMap:
                for (auto& p : pieces) {
                    std::string mapped;
                    mapped.reserve(p.text.size() * 2);
                    for (unsigned char c : p.text) mapped += byte_map[c];
                    out.push_back({std::move(mapped), p.at_start});
                }
                break;
            case Step::Kind::Metaspace:
                for (auto& p : pieces) {
                    std::string text;
                    text.reserve(p.text.size() + 8);
                    for (char c : p.text) {
                        if (c == ' ')
                            text += step->replacement;
                        else
                            text += c;
                    }
                    const bool starts = text.compare(0, step->replacement.size(), step->replacement) == 0;
                    if (!starts && (step->prepend == Step::Prepend::Always ||
                                    (step->prepend == Step::Prepend::First && p.at_start)))
                        text.insert(0, step->replacement);
                    PreToken replaced{std::move(text), p.at_start};
                    if (step->split)
                        split_piece(replaced, find_string(replaced.text, step->replacement),
                                    Behavior::MergedWithNext, false, out);
                    else if (!replaced.text.empty())
                        out.push_back(std::move(replaced));
                }
                break;
        }
        pieces = std::move(out);
    }
}

}  // namespace varrate

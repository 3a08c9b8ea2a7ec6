#include "models/tokenizer/tokenizer_added.h"

#include <algorithm>

#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

namespace {

// The code point that ends at byte `end` (exclusive) of `s`, and where it begins.
char32_t previous_code_point(std::string_view s, size_t end, size_t& begin) {
    begin = end - 1;
    while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
    size_t i = begin;
    return unicode::next_code_point(s, i);
}

}  // namespace

void AddedTokenMatcher::add(std::string pattern, const AddedToken& token) {
    if (pattern.empty()) return;
    const auto first = static_cast<unsigned char>(pattern[0]);
    entries_.push_back({std::move(pattern), token});
    auto& bucket = by_first_byte_[first];
    const size_t len = entries_.back().pattern.size();
    // Keep each bucket longest first (insertion order among equal lengths), so the first hit is the longest.
    const auto at = std::find_if(bucket.begin(), bucket.end(),
                                 [&](size_t other) { return entries_[other].pattern.size() < len; });
    bucket.insert(at, entries_.size() - 1);
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text) const {
    std::vector<Match> matches;
    size_t previous_end = 0;  // stripped whitespace never reaches into the previous match
    for (size_t pos = 0; pos < text.size();) {
        const Entry* hit = nullptr;
        for (size_t idx : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
            const auto& e = entries_[idx];
            if (text.compare(pos, e.pattern.size(), e.pattern) == 0) {
                hit = &e;
                break;
            }
        }
        if (!hit) {
            ++pos;
            continue;
        }
        size_t begin = pos, end = pos + hit->pattern.size();
        pos = end;  // the search resumes after this match whether or not it is kept
        const AddedToken& t = hit->token;
        if (t.single_word) {
            size_t b = 0;
            const bool space_before =
                begin == 0 || !unicode::is_alphanumeric(previous_code_point(text, begin, b));
            size_t i = end;
            const bool space_after =
                end == text.size() || !unicode::is_alphanumeric(unicode::next_code_point(text, i));
            if (!space_before || !space_after) continue;
        }
        if (t.lstrip) {
            while (begin > previous_end) {
                size_t b = 0;
                if (!unicode::is_whitespace(previous_code_point(text, begin, b))) break;
                begin = std::max(b, previous_end);
            }
        }
        if (t.rstrip) {
            while (end < text.size()) {
                size_t i = end;
                if (!unicode::is_whitespace(unicode::next_code_point(text, i))) break;
                end = i;
            }
            pos = end;
        }
        matches.push_back({begin, end, t.id});
        previous_end = end;
    }
    return matches;
}

}  // namespace varrate

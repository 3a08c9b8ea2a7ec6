#include "models/tokenizer/tokenizer_regex.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "base/error.h"

namespace varrate {

struct TokenizerRegex::Code {
    pcre2_code* code = nullptr;
    ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return reinterpret_cast<const char*>(buf);
}

struct MatchData {
    pcre2_match_data* data;
    explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
    ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

TokenizerRegex::TokenizerRegex(const std::string& pattern, const std::string& where) : code_(new Code) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (!code_->code) {
        throw Error(where + ": invalid regex '" + pattern + "' at offset " + std::to_string(err_offset) +
                    ": " + pcre2_message(err));
    }
    // JIT is an optimisation only: when the platform lacks it, the interpreter gives the same matches.
    pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

TokenizerRegex::~TokenizerRegex() = default;

std::vector<std::pair<size_t, size_t>> TokenizerRegex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    MatchData md(code_->code);
    if (!md.data) throw Error("out of memory for a regex match block");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos <= text.size()) {
        // The caller validated the UTF-8 once for the whole text, so skip PCRE2's check on every call.
        const int rc =
            pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.data, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) throw Error("regex match failed: " + pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
        const size_t begin = ov[0], end = ov[1];
        if (end > begin) {
            matches.emplace_back(begin, end);
            pos = end;
        } else {
            // Empty match: step over one whole character so the next search starts on a boundary.
            if (begin >= text.size()) break;
            pos = begin + 1;
            while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        }
    }
    return matches;
}

std::string TokenizerRegex::replace_all(const std::string& text, const std::string& content) const {
    std::string out;
    size_t pos = 0;
    for (const auto& [b, e] : find_all(text)) {
        out.append(text, pos, b - pos);
        out += content;
        pos = e;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

}  // namespace varrate

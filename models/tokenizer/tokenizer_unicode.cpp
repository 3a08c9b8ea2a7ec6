#include "models/tokenizer/tokenizer_unicode.h"

#include <utf8proc.h>
#include <algorithm>
#include <cstdlib>

#include "base/error.h"

namespace varrate::unicode {

size_t utf8_char_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead >> 5) == 0x6) return 2;
    if ((lead >> 4) == 0xE) return 3;
    if ((lead >> 3) == 0x1E) return 4;
    return 1;
}

char32_t next_code_point(std::string_view s, size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const size_t n = std::min(utf8_char_len(b0), s.size() - i);
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += n;
    return cp;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

namespace {

// Length of the valid UTF-8 prefix of the sequence at s[i] (0 for a bad lead byte), and whether it is
// complete. The allowed ranges of the second byte exclude overlongs, surrogates and code points above
// U+10FFFF.
size_t valid_prefix(std::string_view s, size_t i, bool& complete) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    complete = false;
    if (b0 < 0x80) {
        complete = true;
        return 1;
    }
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    size_t len = 1;
    for (; len < need && i + len < s.size(); ++len) {
        const auto b = static_cast<unsigned char>(s[i + len]);
        const unsigned char l = len == 1 ? lo : 0x80, h = len == 1 ? hi : 0xBF;
        if (b < l || b > h) return len;
    }
    complete = len == need;
    return len;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        bool complete = false;
        const size_t n = valid_prefix(s, i, complete);
        if (!complete) return i;
        i += n;
    }
    return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (size_t i = 0; i < bytes.size();) {
        bool complete = false;
        const size_t n = valid_prefix(bytes, i, complete);
        if (complete) {
            out.append(bytes.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";  // one U+FFFD per maximal invalid subpart
            i += n == 0 ? 1 : n;
        }
    }
    return out;
}

namespace {

struct ByteTables {
    std::array<std::string, 256> to_unicode;
    std::array<int16_t, 512> from_unicode;  // every mapped code point is below U+0144
};

const ByteTables& byte_tables() {
    static const ByteTables tables = [] {
        ByteTables t;
        t.from_unicode.fill(-1);
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
            append_utf8(t.to_unicode[b], cp);
            t.from_unicode[cp] = static_cast<int16_t>(b);
        }
        return t;
    }();
    return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
    return byte_tables().to_unicode;
}

int unicode_to_byte(char32_t cp) {
    return cp < 512 ? byte_tables().from_unicode[cp] : -1;
}

std::string normalize(std::string_view s, NormalForm form) {
    int options = UTF8PROC_STABLE;
    switch (form) {
        case NormalForm::NFC:
            options |= UTF8PROC_COMPOSE;
            break;
        case NormalForm::NFD:
            options |= UTF8PROC_DECOMPOSE;
            break;
        case NormalForm::NFKC:
            options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
            break;
        case NormalForm::NFKD:
            options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
            break;
    }
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
    if (n < 0) {
        std::free(out);
        throw Error(std::string("Unicode normalisation failed: ") + utf8proc_errmsg(n));
    }
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
}

std::string to_lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) append_utf8(out, utf8proc_tolower(next_code_point(s, i)));
    return out;
}

bool is_whitespace(char32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

bool is_alphanumeric(char32_t cp) {
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

}  // namespace varrate::unicode

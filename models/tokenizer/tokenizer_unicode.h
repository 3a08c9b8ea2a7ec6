#pragma once
// UTF-8 and Unicode helpers for the tokenizer: code point iteration, validation, lossy repair (as Rust's
// String::from_utf8_lossy does), GPT-2's byte <-> printable-char mapping for byte-level BPE, Unicode
// normalisation forms (utf8proc) and the character classes the added-token matcher needs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace varrate::unicode {

// Byte length of the UTF-8 sequence that starts with `lead` (1 for invalid lead bytes).
size_t utf8_char_len(unsigned char lead);
// Decodes the code point at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);

// Offset of the first invalid byte, or std::string_view::npos when `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);
// Replaces each maximal invalid subsequence with U+FFFD, like Rust's String::from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

// GPT-2 bytes_to_unicode: every byte maps to one printable code point (as UTF-8) and back.
const std::array<std::string, 256>& byte_to_unicode();
// -1 when `cp` is not one of the 256 mapped code points.
int unicode_to_byte(char32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// `s` must be valid UTF-8 (it may contain NUL).
std::string normalize(std::string_view s, NormalForm form);
std::string to_lower(std::string_view s);

// Unicode White_Space (Rust char::is_whitespace / Python str.isspace for the characters that matter here).
bool is_whitespace(char32_t cp);
// Rust char::is_alphanumeric: general category L* or N*.
bool is_alphanumeric(char32_t cp);

}  // namespace varrate::unicode

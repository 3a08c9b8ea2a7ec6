#pragma once
// Checked field access for tokenizer.json sections: every missing or mistyped field becomes a varrate::Error
// that names the section (`ctx`, e.g. "tokenizer.json: pre_tokenizer Split") and the field.
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace varrate::tokjson {

// The "type" string of an object section.
std::string type_of(const nlohmann::json& spec, const std::string& ctx);
const nlohmann::json& array_field(const nlohmann::json& spec, const char* key, const std::string& ctx);
std::string string_field(const nlohmann::json& spec, const char* key, const std::string& ctx);
bool bool_field(const nlohmann::json& spec, const char* key, bool fallback, const std::string& ctx);

// A {"String": s} or {"Regex": r} pattern object under "pattern" (non-empty).
struct Pattern {
    std::string text;
    bool is_regex = false;
};
Pattern pattern_field(const nlohmann::json& spec, const std::string& ctx);

}  // namespace varrate::tokjson

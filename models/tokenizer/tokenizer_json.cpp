#include "models/tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace varrate::tokjson {

std::string type_of(const nlohmann::json& spec, const std::string& ctx) {
    if (!spec.is_object()) throw Error(ctx + " must be an object, got " + std::string(spec.type_name()));
    const auto it = spec.find("type");
    if (it == spec.end() || !it->is_string()) throw Error(ctx + " has no \"type\" string");
    return it->get<std::string>();
}

const nlohmann::json& array_field(const nlohmann::json& spec, const char* key, const std::string& ctx) {
    const auto it = spec.find(key);
    if (it == spec.end() || !it->is_array()) throw Error(ctx + ": \"" + key + "\" must be an array");
    return *it;
}

std::string string_field(const nlohmann::json& spec, const char* key, const std::string& ctx) {
    const auto it = spec.find(key);
    if (it == spec.end() || !it->is_string()) throw Error(ctx + ": \"" + key + "\" must be a string");
    return it->get<std::string>();
}

bool bool_field(const nlohmann::json& spec, const char* key, bool fallback, const std::string& ctx) {
    const auto it = spec.find(key);
    if (it == spec.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw Error(ctx + ": \"" + key + "\" must be true or false");
    return it->get<bool>();
}

Pattern pattern_field(const nlohmann::json& spec, const std::string& ctx) {
    const auto it = spec.find("pattern");
    if (it == spec.end() || !it->is_object())
        throw Error(ctx + ": \"pattern\" must be an object {\"String\": ...} or {\"Regex\": ...}");
    Pattern p;
    if (auto s = it->find("String"); s != it->end() && s->is_string()) {
        p.text = s->get<std::string>();
    } else if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
        p.text = r->get<std::string>();
        p.is_regex = true;
    } else {
        throw Error(ctx + ": \"pattern\" must hold a \"String\" or \"Regex\" string");
    }
    if (p.text.empty()) throw Error(ctx + ": \"pattern\" is empty");
    return p;
}

}  // namespace varrate::tokjson

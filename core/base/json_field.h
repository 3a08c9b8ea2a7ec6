#pragma once
// Reading one field of a JSON object with a message that names the file/record and the field when its type is
// wrong: every reader of the project's JSON formats goes through it.
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/error.h"

namespace varrate {

// j[name] as T; `fallback` when the field is absent or null. Throws Error "<where>: field '<name>' ...".
template <typename T>
T json_field(const nlohmann::json& j, const char* name, const std::string& where, T fallback) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return fallback;
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(where + ": field '" + name + "' has the wrong type (" + it->dump() + ")");
    }
}

}  // namespace varrate

#pragma once
// Reading one field of a JSON object with a message that names the file/record and the field when its type is
// wrong: every reader of the project's JSON formats goes through it.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace varrate {

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename U, typename A>
struct is_vector<std::vector<U, A>> : std::true_type {};

// Whether get<T>() is defined on v: nlohmann turns a float into an integer type with a static_cast, which is
// undefined behaviour out of the type's range (4e42 as int64_t), so such a value counts as the wrong type.
template <typename T>
bool json_value_fits(const nlohmann::json& v) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if (!v.is_number_float()) return true;
        const double d = v.get<double>();
        return d >= static_cast<double>(std::numeric_limits<T>::min()) &&
               d < std::ldexp(1.0, std::numeric_limits<T>::digits);
    } else if constexpr (is_vector<T>::value) {
        if (v.is_array())
            for (const auto& e : v)
                if (!json_value_fits<typename T::value_type>(e)) return false;
        return true;
    } else {
        return true;
    }
}

}  // namespace detail

// j[name] as T; `fallback` when the field is absent or null. Throws Error "<where>: field '<name>' ...".
template <typename T>
T json_field(const nlohmann::json& j, const char* name, const std::string& where, T fallback) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return fallback;
    if (!detail::json_value_fits<T>(*it))
        throw Error(where + ": field '" + name + "' is out of range (" + it->dump() + ")");
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(where + ": field '" + name + "' has the wrong type (" + it->dump() + ")");
    }
}

// j[name] as T; the field must be present. Throws Error "<where>: field '<name>' is missing" otherwise.
template <typename T>
T json_required(const nlohmann::json& j, const char* name, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) throw Error(where + ": field '" + name + "' is missing");
    return json_field<T>(j, name, where, T{});
}

}  // namespace varrate

#include "core/suites/shard.h"

#include <charconv>

#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

std::string Shard::label() const {
    return fmt::format("{}/{}", index, count);
}

Shard parse_shard(const std::string& text, const std::string& option) {
    const auto bad = [&](const std::string& why) {
        return Error(fmt::format("{} '{}': {} (expected I/N with 0 <= I < N, e.g. 0/4)", option, text, why));
    };
    const size_t slash = text.find('/');
    if (slash == std::string::npos) throw bad("no '/'");
    auto number = [&](const std::string& part, const char* what) {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
        if (part.empty() || ec != std::errc() || end != part.data() + part.size())
            throw bad(fmt::format("the {} '{}' is not a whole number", what, part));
        return v;
    };
    Shard s;
    s.index = number(text.substr(0, slash), "shard index");
    s.count = number(text.substr(slash + 1), "shard count");
    if (s.count < 1) throw bad("the shard count must be at least 1");
    if (s.index < 0 || s.index >= s.count) throw bad("the shard index must lie in 0 .. count - 1");
    return s;
}

}  // namespace varrate

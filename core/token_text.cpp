#include "core/token_text.h"

#include <algorithm>

#include "models/tokenizer/tokenizer.h"

namespace varrate {

std::string token_display_text(const Tokenizer& tokenizer, int64_t id) {
    static const std::string kMeta = "\xe2\x96\x81";  // U+2581, SentencePiece's space
    std::string text = tokenizer.decode({id}, false);
    if (tokenizer.token_string(id).rfind(kMeta, 0) == 0 && text.rfind(' ', 0) != 0) text = " " + text;
    return text;
}

std::vector<std::string> token_display_texts(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
    std::vector<std::string> out;
    out.reserve(ids.size());
    for (int64_t id : ids) out.push_back(token_display_text(tokenizer, id));
    return out;
}

std::optional<std::pair<int64_t, int64_t>> find_text_token_span(const std::vector<std::string>& token_texts,
                                                                std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::string all;
    std::vector<size_t> starts;  // byte offset of each token in `all`
    starts.reserve(token_texts.size());
    for (const std::string& t : token_texts) {
        starts.push_back(all.size());
        all += t;
    }
    const size_t at = all.find(text);
    if (at == std::string::npos) return std::nullopt;
    const size_t last = at + text.size();  // one past the last byte
    const auto begin = std::upper_bound(starts.begin(), starts.end(), at) - starts.begin() - 1;
    const auto end = std::lower_bound(starts.begin(), starts.end(), last) - starts.begin();
    return std::make_pair(static_cast<int64_t>(std::max<ptrdiff_t>(begin, 0)), static_cast<int64_t>(end));
}

}  // namespace varrate

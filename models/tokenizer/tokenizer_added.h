#pragma once
// Added tokens (tokenizer.json "added_tokens"): found in the text before the model sees it, leftmost match
// first and the longest one at that position, honouring single_word, lstrip and rstrip like the reference.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace varrate {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
};

class AddedTokenMatcher {
  public:
    struct Match {
        size_t begin, end;  // including stripped whitespace
        int32_t id;
    };
    // `pattern` is the text searched for (the content, or its normalised form); `token` gives the flags.
    void add(std::string pattern, const AddedToken& token);
    bool empty() const { return entries_.empty(); }
    // Non-overlapping matches in order. `text` is valid UTF-8.
    std::vector<Match> find(std::string_view text) const;

  private:
    struct Entry {
        std::string pattern;
        AddedToken token;
    };
    std::vector<Entry> entries_;
    std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);  // longest first
};

}  // namespace varrate

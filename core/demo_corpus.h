#pragma once
// The procedural corpus of the embedded demo model: filler sentences from the project's own lexicon and grammar,
// needles "The special magic number for <key> is <digits>.", distractor needles with other keys, and the question
// "What is the special magic number for <key>?". No downloaded data. Deterministic per seed.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace varrate {

struct Needle {
    std::string key;     // one lexicon key word, e.g. "amber-fox" style single token
    std::string value;   // 6-7 digits
    std::string sentence() const;  // "The special magic number for <key> is <value>."
};

// Filler text and needles. Every filler word and key is a whole word of the lexicon, so a word-level tokenizer
// makes each one a single token.
class DemoTextGenerator {
public:
    explicit DemoTextGenerator(uint64_t seed);
    std::string filler_sentence();                 // ends with "." and no trailing space
    Needle needle(const std::vector<std::string>& avoid_keys = {});  // a fresh key not in avoid_keys
    static std::string question(const std::string& key);  // "What is the special magic number for <key>?"
    static const std::vector<std::string>& lexicon();      // filler words
    static const std::vector<std::string>& keys();         // needle keys
    std::mt19937_64& rng() { return rng_; }

private:
    std::mt19937_64 rng_;
};

}  // namespace varrate

#pragma once
// The random pieces of the RULER-style tasks (core/ruler_tasks.h): a portable random stream, the
// wonderwords word lists RULER draws its word keys and common words from (resources/eval/wonderwords), and
// keys/values: adjective-noun words, 7-digit numbers, version-4 UUIDs, upper-case variable names and
// lower-case coded words.
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace varrate {

// mt19937_64 with our own uniform draws: the same numbers on every standard library (std distributions
// differ between implementations, and generated samples must not).
class RulerRng {
  public:
    explicit RulerRng(uint64_t seed) : rng_(seed) {}
    uint64_t bits() { return rng_(); }  // 64 uniform bits
    uint64_t below(uint64_t n);         // uniform in [0, n), n > 0
    // k distinct values of [0, n) in draw order (Python's random.sample(range(n), k)); k <= n.
    std::vector<int64_t> sample(int64_t n, int64_t k);
    template <class T>
    void shuffle(std::vector<T>& v) {
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
    }

  private:
    std::mt19937_64 rng_;
};

// wonderwords' lists as RULER reads them: trailing blanks removed, empty lines and repeats dropped, in file
// order.
struct RulerWordLists {
    std::vector<std::string> nouns, adjectives, verbs;
    // Common words extraction's vocabulary: nouns + adjectives + verbs without repeats, sorted.
    std::vector<std::string> all_words() const;
};

// The directory holding nounlist.txt, adjectivelist.txt and verblist.txt: <data root>/eval/wonderwords of
// the first data root that has them (core/data_paths.h); "" when none does.
std::string find_ruler_word_dir();
// Reads the lists from `dir` ("" = find_ruler_word_dir()); throws Error naming what is missing.
RulerWordLists load_ruler_word_lists(const std::string& dir = "");

std::string ruler_number(RulerRng& rng);  // 7 digits, 1000000-9999999
std::string ruler_uuid(RulerRng& rng);    // random version-4 UUID, lower-case 8-4-4-4-12 hex
// "adjective-noun", uniform over adjectives and nouns (RULER draws from every adjective-noun pair).
std::string ruler_word_key(RulerRng& rng, const RulerWordLists& words);
std::string ruler_letters(RulerRng& rng, int n, bool upper);  // n random letters a-z (A-Z when upper)

}  // namespace varrate

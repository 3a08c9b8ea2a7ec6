#include "core/suites/ruler_words.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "base/error.h"
#include "core/data_paths.h"

namespace fs = std::filesystem;

namespace varrate {

namespace {

const char* const kListFiles[] = {"nounlist.txt", "adjectivelist.txt", "verblist.txt"};

bool has_lists(const fs::path& dir) {
    std::error_code ec;
    for (const char* f : kListFiles)
        if (!fs::is_regular_file(dir / f, ec)) return false;
    return true;
}

std::vector<std::string> read_list(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("cannot read the RULER word list " + file.string());
    std::vector<std::string> out;
    std::set<std::string> seen;
    std::string line;
    while (std::getline(in, line)) {
        // wonderwords keeps a line minus its trailing blanks (some entries end with a space).
        const size_t end = line.find_last_not_of(" \t\r\n\f\v");
        if (end == std::string::npos) continue;
        line.resize(end + 1);
        if (seen.insert(line).second) out.push_back(line);
    }
    if (out.empty()) throw Error("the RULER word list " + file.string() + " is empty");
    return out;
}

}  // namespace

uint64_t RulerRng::below(uint64_t n) {
    if (n == 0) throw Error("RulerRng::below: empty range");
    // Rejection sampling keeps the draw exactly uniform.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = rng_();
    while (x >= limit) x = rng_();
    return x % n;
}

std::vector<int64_t> RulerRng::sample(int64_t n, int64_t k) {
    if (k < 0 || k > n) throw Error(fmt::format("cannot draw {} distinct values out of {}", k, n));
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(k));
    if (k * 4 <= n) {  // few out of many: redraw repeats
        std::set<int64_t> seen;
        while (static_cast<int64_t>(out.size()) < k) {
            const auto v = static_cast<int64_t>(below(static_cast<uint64_t>(n)));
            if (seen.insert(v).second) out.push_back(v);
        }
        return out;
    }
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {  // a partial Fisher-Yates shuffle from the front
        const auto j = i + static_cast<int64_t>(below(static_cast<uint64_t>(n - i)));
        std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(j)]);
        out.push_back(pool[static_cast<size_t>(i)]);
    }
    return out;
}

std::vector<std::string> RulerWordLists::all_words() const {
    std::set<std::string> s(nouns.begin(), nouns.end());
    s.insert(adjectives.begin(), adjectives.end());
    s.insert(verbs.begin(), verbs.end());
    return {s.begin(), s.end()};
}

std::string find_ruler_word_dir() {
    for (const std::string& root : data_roots()) {
        const fs::path dir = fs::path(root) / "eval" / "wonderwords";
        if (has_lists(dir)) return dir.string();
    }
    return {};
}

RulerWordLists load_ruler_word_lists(const std::string& dir) {
    fs::path d = dir;
    if (d.empty()) {
        d = find_ruler_word_dir();
        if (d.empty()) {
            std::string roots;
            for (const std::string& r : data_roots()) roots += "\n  " + r;
            throw Error(
                "the RULER word lists (eval/wonderwords/nounlist.txt, adjectivelist.txt, verblist.txt) "
                "are in none of the data roots:" +
                roots);
        }
    } else if (!has_lists(d)) {
        throw Error("RULER word list directory " + d.string() +
                    " lacks nounlist.txt, adjectivelist.txt or verblist.txt");
    }
    RulerWordLists w;
    w.nouns = read_list(d / kListFiles[0]);
    w.adjectives = read_list(d / kListFiles[1]);
    w.verbs = read_list(d / kListFiles[2]);
    return w;
}

std::string ruler_number(RulerRng& rng) {
    return std::to_string(1000000 + rng.below(9000000));
}

std::string ruler_uuid(RulerRng& rng) {
    uint8_t b[16];
    for (int i = 0; i < 16; i += 8) {
        const uint64_t x = rng.bits();
        for (int j = 0; j < 8; ++j) b[i + j] = static_cast<uint8_t>(x >> (8 * j));
    }
    b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);  // version 4
    b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);  // RFC 4122 variant
    std::string s;
    for (int i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        s += fmt::format("{:02x}", b[i]);
    }
    return s;
}

std::string ruler_word_key(RulerRng& rng, const RulerWordLists& words) {
    const std::string& adj = words.adjectives[rng.below(words.adjectives.size())];
    return adj + "-" + words.nouns[rng.below(words.nouns.size())];
}

std::string ruler_letters(RulerRng& rng, int n, bool upper) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>((upper ? 'A' : 'a') + rng.below(26));
    return s;
}

}  // namespace varrate

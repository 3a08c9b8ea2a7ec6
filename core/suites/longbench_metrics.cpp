#include "core/suites/longbench_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>
#include <utility>

#include <utf8proc.h>

#include "base/error.h"
#include "models/tokenizer/tokenizer_unicode.h"

namespace varrate {

namespace {

// Python str semantics: the metrics index, split and compare code points, so work on UTF-32.
using U32 = std::u32string;

U32 code_points(std::string_view s) {
    std::string
        repaired;  // predictions come from a decoder; be safe with stray bytes as Python's errors=replace
    if (unicode::find_invalid_utf8(s) != std::string_view::npos) {
        repaired = unicode::utf8_lossy(s);
        s = repaired;
    }
    U32 out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) out.push_back(unicode::next_code_point(s, i));
    return out;
}

utf8proc_category_t category(char32_t c) {
    return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

// str.isspace(): what str.split() without arguments splits on (includes the separators U+001C..U+001F,
// which Rust's and Unicode's White_Space do not).
bool py_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

// re's \w on str: str.isalnum() or '_' (letters and numbers of every script).
bool py_word(char32_t c) {
    return c == U'_' || unicode::is_alphanumeric(c);
}

// re's \d on str: any decimal digit (category Nd), not only 0-9.
bool py_digit(char32_t c) {
    return category(c) == UTF8PROC_CATEGORY_ND;
}

// Unicode's Cased: Lu, Ll, Lt and PropList's Other_Lowercase / Other_Uppercase.
bool py_cased(char32_t c) {
    static const char32_t kOther[][2] = {
        {0xAA, 0xAA},       {0xBA, 0xBA},       {0x2B0, 0x2B8},     {0x2C0, 0x2C1},     {0x2E0, 0x2E4},
        {0x345, 0x345},     {0x37A, 0x37A},     {0x10FC, 0x10FC},   {0x1D2C, 0x1D6A},   {0x1D78, 0x1D78},
        {0x1D9B, 0x1DBF},   {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2160, 0x217F},
        {0x24B6, 0x24E9},   {0x2C7C, 0x2C7D},   {0xA69C, 0xA69D},   {0xA770, 0xA770},   {0xA7F8, 0xA7F9},
        {0xAB5C, 0xAB5F},   {0xAB69, 0xAB69},   {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107B0},
        {0x107B2, 0x107BA}, {0x1E030, 0x1E06D}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}};
    const auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT)
        return true;
    for (const auto& r : kOther)
        if (c >= r[0] && c <= r[1]) return true;
    return false;
}

// Unicode's Case_Ignorable: Mn, Me, Cf, Lm, Sk and Word_Break MidLetter / MidNumLet / Single_Quote.
bool py_case_ignorable(char32_t c) {
    switch (category(c)) {
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_ME:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_SK:
            return true;
        default:
            break;
    }
    static const char32_t kWordBreak[] = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,
                                          0x5F4,  0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
                                          0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
    return std::find(std::begin(kWordBreak), std::end(kWordBreak), c) != std::end(kWordBreak);
}

// Python's Final_Sigma rule for U+03A3 at s[i]: a cased letter before it and none after it (skipping
// case-ignorable characters both ways).
bool final_sigma(const U32& s, size_t i) {
    size_t j = i;
    while (j > 0 && py_case_ignorable(s[j - 1])) --j;
    if (j == 0 || !py_cased(s[j - 1])) return false;
    size_t k = i + 1;
    while (k < s.size() && py_case_ignorable(s[k])) ++k;
    return k == s.size() || !py_cased(s[k]);
}

// str.lower(): the simple mapping, SpecialCasing's one unconditional lower-case expansion (U+0130) and the
// final sigma (checked against Python 3.11 over every code point).
U32 py_lower(const U32& s) {
    U32 out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const char32_t c = s[i];
        if (c == 0x130) {
            out += U"i\u0307";
        } else if (c == 0x3A3) {
            out.push_back(final_sigma(s, i) ? 0x3C2 : 0x3C3);
        } else {
            out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
        }
    }
    return out;
}

// str.split(): runs of whitespace separate, no empty pieces.
std::vector<U32> py_split(const U32& s) {
    std::vector<U32> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && py_space(s[i])) ++i;
        const size_t start = i;
        while (i < s.size() && !py_space(s[i])) ++i;
        if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
}

// str.split(sep) for one character: empty pieces kept, always at least one piece.
std::vector<U32> py_split_on(const U32& s, char32_t sep) {
    std::vector<U32> out;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == sep) {
            out.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    }
    return out;
}

U32 join_space(const std::vector<U32>& words) {
    U32 out;
    for (size_t i = 0; i < words.size(); ++i) {
        if (i) out.push_back(U' ');
        out += words[i];
    }
    return out;
}

std::string to_utf8(const U32& s) {
    std::string out;
    for (char32_t c : s) unicode::append_utf8(out, c);
    return out;
}

bool is_ascii_punctuation(char32_t c) {  // Python's string.punctuation
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

U32 normalize(const U32& s) {
    U32 no_punct;
    for (char32_t c : py_lower(s))
        if (!is_ascii_punctuation(c)) no_punct.push_back(c);
    // re.sub(r"\b(a|an|the)\b", " ", ...): with a word boundary on both sides the match is a whole run of
    // word characters, so a run that is exactly an article becomes one space.
    U32 out;
    size_t i = 0;
    while (i < no_punct.size()) {
        if (!py_word(no_punct[i])) {
            out.push_back(no_punct[i++]);
            continue;
        }
        size_t j = i;
        while (j < no_punct.size() && py_word(no_punct[j])) ++j;
        const U32 run = no_punct.substr(i, j - i);
        if (run == U"a" || run == U"an" || run == U"the") {
            out.push_back(U' ');
        } else {
            out += run;
        }
        i = j;
    }
    return join_space(py_split(out));
}

// The maximal runs of decimal digits (re.findall(r"\d+", s)).
std::vector<U32> digit_runs(const U32& s) {
    std::vector<U32> out;
    size_t i = 0;
    while (i < s.size()) {
        if (!py_digit(s[i])) {
            ++i;
            continue;
        }
        const size_t start = i;
        while (i < s.size() && py_digit(s[i])) ++i;
        out.push_back(s.substr(start, i - start));
    }
    return out;
}

// re.findall(label + r"(\d+)", s)[0]: the digits after the first occurrence of `label` followed by one.
std::optional<U32> first_labelled_number(const U32& s, const U32& label) {
    for (size_t at = s.find(label); at != U32::npos; at = s.find(label, at + 1)) {
        size_t j = at + label.size();
        const size_t start = j;
        while (j < s.size() && py_digit(s[j])) ++j;
        if (j > start) return s.substr(start, j - start);
    }
    return std::nullopt;
}

// right / numbers over the digit runs of the prediction, 0 without any.
double share_equal(const U32& prediction, const U32& expected) {
    const auto numbers = digit_runs(prediction);
    if (numbers.empty()) return 0.0;
    const auto right = std::count(numbers.begin(), numbers.end(), expected);
    return static_cast<double>(right) / static_cast<double>(numbers.size());
}

double retrieval(std::string_view prediction, std::string_view ground_truth, const U32& label) {
    const auto id = first_labelled_number(code_points(ground_truth), label);
    if (!id)
        throw Error("LongBench retrieval: the gold answer \"" + std::string(ground_truth) + "\" has no \"" +
                    to_utf8(label) + "N\"");
    return share_equal(code_points(prediction), *id);
}

// The rouge package's sentences: split on '.', empty pieces dropped BEFORE the whitespace is normalised
// (so " " survives as an empty sentence, whose one word is "").
std::vector<U32> rouge_sentences(const U32& text) {
    std::vector<U32> out;
    for (const U32& piece : py_split_on(text, U'.'))
        if (!piece.empty()) out.push_back(join_space(py_split(piece)));
    return out;
}

// Words of a sentence as ids (split(" ") keeps the empty word of an empty sentence).
std::vector<int> rouge_words(const U32& sentence, std::unordered_map<U32, int>& vocab) {
    std::vector<int> out;
    for (const U32& w : py_split_on(sentence, U' ')) {
        const auto it = vocab.emplace(w, static_cast<int>(vocab.size())).first;
        out.push_back(it->second);
    }
    return out;
}

// rouge_score._recon_lcs(x, y): ONE longest common subsequence, chosen by its backtracking rule (diagonal
// on a match, else up when the upper cell is strictly larger, else left); the words of that LCS are marked
// in `in_union`. Which LCS is picked changes the word set, hence the score.
void mark_recon_lcs(const std::vector<int>& x, const std::vector<int>& y, std::vector<char>& in_union) {
    const size_t n = x.size(), m = y.size();
    std::vector<int> t((n + 1) * (m + 1), 0);
    auto at = [&](size_t i, size_t j) -> int& { return t[i * (m + 1) + j]; };
    for (size_t i = 1; i <= n; ++i)
        for (size_t j = 1; j <= m; ++j)
            at(i, j) = x[i - 1] == y[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
    size_t i = n, j = m;
    while (i > 0 && j > 0) {
        if (x[i - 1] == y[j - 1]) {
            in_union[static_cast<size_t>(x[i - 1])] = 1;
            --i;
            --j;
        } else if (at(i - 1, j) > at(i, j - 1)) {
            --i;
        } else {
            --j;
        }
    }
}

size_t distinct(const std::vector<int>& ids) {
    std::vector<int> s = ids;
    std::sort(s.begin(), s.end());
    return static_cast<size_t>(std::unique(s.begin(), s.end()) - s.begin());
}

// Python's round() to an integer: half to even, on the exact double.
int py_round(double x) {
    const double f = std::floor(x);
    const double d = x - f;
    if (d > 0.5 || (d == 0.5 && std::fmod(f, 2.0) != 0.0)) return static_cast<int>(f) + 1;
    return static_cast<int>(f);
}

// difflib.SequenceMatcher(None, a, b) with autojunk: b's elements that occur more than len(b)/100 + 1 times
// are "popular" when len(b) >= 200 and cannot start a match (they may still extend one). The number of
// matched elements of get_matching_blocks().
size_t difflib_matches(const U32& a, const U32& b) {
    std::unordered_map<char32_t, std::vector<int>> b2j;
    for (size_t j = 0; j < b.size(); ++j) b2j[b[j]].push_back(static_cast<int>(j));
    if (b.size() >= 200) {
        const size_t ntest = b.size() / 100 + 1;
        for (auto it = b2j.begin(); it != b2j.end();) it = it->second.size() > ntest ? b2j.erase(it) : ++it;
    }
    // j2len as two rows indexed by j + 1, with the touched entries cleared between rows.
    std::vector<int> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
    std::vector<size_t> prev_touched, cur_touched;
    auto longest = [&](int alo, int ahi, int blo, int bhi) {
        int besti = alo, bestj = blo, bestsize = 0;
        for (size_t t : prev_touched) prev[t] = 0;
        prev_touched.clear();
        for (int i = alo; i < ahi; ++i) {
            const auto it = b2j.find(a[static_cast<size_t>(i)]);
            if (it != b2j.end()) {
                for (int j : it->second) {
                    if (j < blo) continue;
                    if (j >= bhi) break;
                    const int k = prev[static_cast<size_t>(j)] + 1;
                    cur[static_cast<size_t>(j) + 1] = k;
                    cur_touched.push_back(static_cast<size_t>(j) + 1);
                    if (k > bestsize) {
                        besti = i - k + 1;
                        bestj = j - k + 1;
                        bestsize = k;
                    }
                }
            }
            for (size_t t : prev_touched) prev[t] = 0;
            std::swap(prev, cur);
            std::swap(prev_touched, cur_touched);
            cur_touched.clear();
        }
        while (besti > alo && bestj > blo &&
               a[static_cast<size_t>(besti - 1)] == b[static_cast<size_t>(bestj - 1)]) {
            --besti;
            --bestj;
            ++bestsize;
        }
        while (besti + bestsize < ahi && bestj + bestsize < bhi &&
               a[static_cast<size_t>(besti + bestsize)] == b[static_cast<size_t>(bestj + bestsize)])
            ++bestsize;
        return std::array<int, 3>{besti, bestj, bestsize};
    };
    size_t matches = 0;
    std::vector<std::array<int, 4>> queue{{0, static_cast<int>(a.size()), 0, static_cast<int>(b.size())}};
    while (!queue.empty()) {
        const auto [alo, ahi, blo, bhi] = queue.back();
        queue.pop_back();
        const auto [i, j, k] = longest(alo, ahi, blo, bhi);
        if (k == 0) continue;
        matches += static_cast<size_t>(k);
        if (alo < i && blo < j) queue.push_back({alo, i, blo, j});
        if (i + k < ahi && j + k < bhi) queue.push_back({i + k, ahi, j + k, bhi});
    }
    return matches;
}

size_t lcs_length(const U32& a, const U32& b) {
    std::vector<size_t> row(b.size() + 1, 0), next(b.size() + 1, 0);
    for (size_t i = 1; i <= a.size(); ++i) {
        for (size_t j = 1; j <= b.size(); ++j)
            next[j] = a[i - 1] == b[j - 1] ? row[j - 1] + 1 : std::max(row[j], next[j - 1]);
        std::swap(row, next);
    }
    return row[b.size()];
}

}  // namespace

std::string to_string(LongBenchMetric m) {
    switch (m) {
        case LongBenchMetric::QaF1:
            return "qa_f1_score";
        case LongBenchMetric::Rouge:
            return "rouge_score";
        case LongBenchMetric::Classification:
            return "classification_score";
        case LongBenchMetric::Retrieval:
            return "retrieval_score";
        case LongBenchMetric::RetrievalZh:
            return "retrieval_zh_score";
        case LongBenchMetric::Count:
            return "count_score";
        case LongBenchMetric::CodeSim:
            return "code_sim_score";
    }
    return "?";
}

LongBenchMetric parse_longbench_metric(const std::string& name) {
    for (auto m : {LongBenchMetric::QaF1, LongBenchMetric::Rouge, LongBenchMetric::Classification,
                   LongBenchMetric::Retrieval, LongBenchMetric::RetrievalZh, LongBenchMetric::Count,
                   LongBenchMetric::CodeSim})
        if (to_string(m) == name) return m;
    if (name == "qa_f1_zh_score" || name == "rouge_zh_score")
        throw Error("LongBench metric '" + name +
                    "' is not implemented: it needs jieba's Chinese word segmentation");
    throw Error(
        "unknown LongBench metric '" + name +
        "' (known: qa_f1_score, rouge_score, classification_score, retrieval_score, retrieval_zh_score, "
        "count_score, code_sim_score)");
}

std::string normalize_answer(std::string_view s) {
    return to_utf8(normalize(code_points(s)));
}

double qa_f1_score(std::string_view prediction, std::string_view ground_truth) {
    const auto pred = py_split(normalize(code_points(prediction)));
    const auto gold = py_split(normalize(code_points(ground_truth)));
    std::unordered_map<U32, int> counts;  // Counter(pred) & Counter(gold): the multiset intersection
    for (const auto& w : gold) ++counts[w];
    int same = 0;
    for (const auto& w : pred) {
        auto it = counts.find(w);
        if (it != counts.end() && it->second > 0) {
            --it->second;
            ++same;
        }
    }
    if (same == 0) return 0.0;
    const double precision = 1.0 * same / static_cast<double>(pred.size());
    const double recall = 1.0 * same / static_cast<double>(gold.size());
    return (2 * precision * recall) / (precision + recall);
}

double rouge_score(std::string_view prediction, std::string_view ground_truth) {
    const auto hyp = rouge_sentences(code_points(prediction));
    const auto ref = rouge_sentences(code_points(ground_truth));
    if (hyp.empty() || ref.empty()) return 0.0;  // the package raises; LongBench's except returns 0
    std::unordered_map<U32, int> vocab;
    std::vector<std::vector<int>> hyp_words, ref_words;
    std::vector<int> all_hyp, all_ref;
    for (const auto& s : hyp) {
        hyp_words.push_back(rouge_words(s, vocab));
        all_hyp.insert(all_hyp.end(), hyp_words.back().begin(), hyp_words.back().end());
    }
    for (const auto& s : ref) {
        ref_words.push_back(rouge_words(s, vocab));
        all_ref.insert(all_ref.end(), ref_words.back().begin(), ref_words.back().end());
    }
    // Summary-level LCS with the package's exclusive=True: "m" and "n" are the numbers of DISTINCT words,
    // and the union over reference sentences telescopes to the set of distinct words of the chosen LCSs.
    const double m = static_cast<double>(distinct(all_ref));
    const double n = static_cast<double>(distinct(all_hyp));
    std::vector<char> in_union(vocab.size(), 0);
    for (const auto& r : ref_words)
        for (const auto& c : hyp_words) mark_recon_lcs(r, c, in_union);
    const double llcs = static_cast<double>(std::count(in_union.begin(), in_union.end(), 1));
    const double r_lcs = llcs / m;
    const double p_lcs = llcs / n;
    return 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
}

double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes) {
    std::vector<std::string> matches;
    for (const auto& c : all_classes)
        if (prediction.find(c) != std::string_view::npos) matches.push_back(c);
    // metrics.py removes from the list it iterates over: the iterator's index still advances, so the element
    // after a removed one is skipped, and list.remove drops the FIRST equal element. Reproduced as is.
    for (size_t idx = 0; idx < matches.size(); ++idx) {
        const std::string term = matches[idx];
        if (ground_truth.find(term) != std::string_view::npos && term != ground_truth)
            matches.erase(std::find(matches.begin(), matches.end(), term));
    }
    if (std::find(matches.begin(), matches.end(), ground_truth) == matches.end()) return 0.0;
    return 1.0 / static_cast<double>(matches.size());
}

double retrieval_score(std::string_view prediction, std::string_view ground_truth) {
    return retrieval(prediction, ground_truth, U"Paragraph ");
}

double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth) {
    return retrieval(prediction, ground_truth, U"段落");
}

double count_score(std::string_view prediction, std::string_view ground_truth) {
    return share_equal(code_points(prediction), code_points(ground_truth));
}

int fuzz_ratio(std::string_view a, std::string_view b, FuzzRatio fuzz) {
    if (a == b) return 100;
    if (a.empty() || b.empty()) return 0;
    const U32 x = code_points(a), y = code_points(b);
    const double total = static_cast<double>(x.size() + y.size());
    double ratio = 0;
    if (fuzz == FuzzRatio::Difflib) {
        ratio = 2.0 * static_cast<double>(difflib_matches(x, y)) / total;
    } else {
        // rapidfuzz's Indel normalized similarity, the same floating-point steps (1 - dist / max)
        const double dist = total - 2.0 * static_cast<double>(lcs_length(x, y));
        ratio = 1.0 - dist / total;
    }
    return py_round(100 * ratio);
}

double code_sim_score(std::string_view prediction, std::string_view ground_truth, FuzzRatio fuzz) {
    while (!prediction.empty() && prediction.front() == '\n') prediction.remove_prefix(1);
    std::string_view line;  // the first line without a backtick, '#' or "//"; "" when every line has one
    for (size_t start = 0;;) {
        const size_t end = prediction.find('\n', start);
        const std::string_view l =
            prediction.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (l.find('`') == std::string_view::npos && l.find('#') == std::string_view::npos &&
            l.find("//") == std::string_view::npos) {
            line = l;
            break;
        }
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return fuzz_ratio(line, ground_truth, fuzz) / 100.0;
}

double longbench_sample_score(LongBenchMetric metric, bool first_line_only, std::string_view prediction,
                              const std::vector<std::string>& answers,
                              const std::optional<std::vector<std::string>>& all_classes, FuzzRatio fuzz) {
    if (first_line_only) {
        while (!prediction.empty() && prediction.front() == '\n') prediction.remove_prefix(1);
        prediction = prediction.substr(0, prediction.find('\n'));
    }
    if (metric == LongBenchMetric::Classification && !all_classes)
        throw Error("LongBench classification_score needs the sample's all_classes, which is null");
    double score = 0.0;
    for (const auto& gold : answers) {
        double s = 0;
        switch (metric) {
            case LongBenchMetric::QaF1:
                s = qa_f1_score(prediction, gold);
                break;
            case LongBenchMetric::Rouge:
                s = rouge_score(prediction, gold);
                break;
            case LongBenchMetric::Classification:
                s = classification_score(prediction, gold, *all_classes);
                break;
            case LongBenchMetric::Retrieval:
                s = retrieval_score(prediction, gold);
                break;
            case LongBenchMetric::RetrievalZh:
                s = retrieval_zh_score(prediction, gold);
                break;
            case LongBenchMetric::Count:
                s = count_score(prediction, gold);
                break;
            case LongBenchMetric::CodeSim:
                s = code_sim_score(prediction, gold, fuzz);
                break;
        }
        score = std::max(score, s);
    }
    return score;
}

}  // namespace varrate

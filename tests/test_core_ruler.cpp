// RULER-style synthetic tasks (core/ruler_tasks.h): each task's structure against RULER's rules (needle
// counts, distinct keys and values, how often each answer is in the context, depths, chains, word counts),
// fitted lengths with the llama3 and qwen3 tokenizers, plain and chat, determinism, the error messages, and
// the scorers against hand-worked values.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "core/prompt.h"
#include "core/suites/ruler_tasks.h"
#include "core/suites/ruler_words.h"
#include "models/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace varrate;

namespace {

const std::string kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const std::string kVtIntro =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
const std::string kCweIntro =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
    "ones "
    "that appear most often.\n";
const std::string kFweIntro =
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently "
    "appeared coded words. ";

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

int64_t occurrences(const std::string& text, const std::string& sub) {
    int64_t n = 0;
    for (size_t p = text.find(sub); p != std::string::npos; p = text.find(sub, p + 1)) ++n;
    return n;
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t p = s.find(sep); p != std::string::npos; p = s.find(sep, b)) {
        out.push_back(s.substr(b, p - b));
        b = p + sep.size();
    }
    out.push_back(s.substr(b));
    return out;
}

bool is_digits(const std::string& s, size_t n) {
    return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_uuid4(const std::string& s) {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < s.size(); ++i) {
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(s[i]))
            return false;
    }
    return s[14] == '4' && std::string("89ab").find(s[19]) != std::string::npos;
}

bool is_letters(const std::string& s, size_t n, bool upper) {
    return s.size() == n && std::all_of(s.begin(), s.end(), [&](char c) {
               return upper ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z');
           });
}

// "1. a 2. b 3. c" back into its words, checking the numbering runs 1, 2, 3, ...
std::vector<std::string> parse_numbered(const std::string& list) {
    std::vector<std::string> words;
    size_t p = 0;
    for (int i = 1;; ++i) {
        const std::string head = std::to_string(i) + ". ";
        if (list.compare(p, head.size(), head) != 0) return {};  // the test fails on the size
        p += head.size();
        const size_t next = list.find(" " + std::to_string(i + 1) + ". ", p);
        words.push_back(list.substr(p, next == std::string::npos ? std::string::npos : next - p));
        if (next == std::string::npos) return words;
        p = next + 1;
    }
}

std::map<std::string, int64_t> tally(const std::vector<std::string>& words) {
    std::map<std::string, int64_t> m;
    for (const std::string& w : words) ++m[w];
    return m;
}

struct NiahRule {
    std::string haystack;  // noise | essay | needle
    bool word_keys;
    bool uuid_values;
    int k, v, q;
};

const std::map<std::string, NiahRule>& niah_rules() {
    static const std::map<std::string, NiahRule> rules = {
        {"niah_single_1", {"noise", true, false, 1, 1, 1}},
        {"niah_single_2", {"essay", true, false, 1, 1, 1}},
        {"niah_single_3", {"essay", true, true, 1, 1, 1}},
        {"niah_multikey_1", {"essay", true, false, 4, 1, 1}},
        {"niah_multikey_2", {"needle", true, false, 1, 1, 1}},
        {"niah_multikey_3", {"needle", false, true, 1, 1, 1}},
        {"niah_multivalue", {"essay", true, false, 1, 4, 1}},
        {"niah_multiquery", {"essay", true, false, 4, 1, 4}},
    };
    return rules;
}

int64_t count(const Tokenizer& tok, const std::string& text) {
    return static_cast<int64_t>(tok.encode(text, false).size());
}

// How far below the target a fitted prompt may end: the search stops at the largest haystack that fits, so
// the gap is less than what one more haystack unit would add. That is bounded here from the sample itself:
// a noise line or the widest distractor line (with its newline), the widest essay word, fu entries
// " NNNNN. word" of the widest word of the list (cwe), and for fwe the coded words that N + 1 adds (the
// ranks whose floor(N k^-2 / zeta(2)) steps up) at <= 6 tokens each (6 letters); +2 for merges at the joins
// and an essay needle that moves past one more sentence.
int64_t tolerance(const Tokenizer& tok, const RulerSample& s) {
    int64_t unit = 0;
    auto widest = [&](const std::vector<std::string>& pieces, const std::string& before) {
        for (const std::string& p : pieces) unit = std::max(unit, count(tok, before + p));
    };
    const auto rule = niah_rules().find(s.task);
    if (s.task == "vt" || (rule != niah_rules().end() && rule->second.haystack == "noise")) {
        unit = count(tok, "\n" + kNoise);
    } else if (rule != niah_rules().end() && rule->second.haystack == "needle") {
        widest(split(s.context.substr(s.context.find('\n') + 1), "\n"), "\n");
    } else if (rule != niah_rules().end()) {
        std::string hay = s.context.substr(s.context.find('\n') + 1);
        for (const std::string& n : s.needles) hay.erase(hay.find(n), n.size());
        widest(split(hay, " "), " ");
    } else if (s.task == "cwe") {
        static std::map<std::string, int64_t> widest_word;  // per tokenizer: the next word is any of the list
        int64_t& w = widest_word[tok.fingerprint()];
        if (w == 0)
            for (const std::string& word : load_ruler_word_lists().all_words())
                w = std::max(w, count(tok, " 99999. " + word));
        unit = (s.target_length < 4096 ? 1 : 3) * w;
    } else {
        const int64_t n = s.haystack_units, vocab = (s.target_length - 50) / 50;
        for (int64_t k = 1; k <= vocab; ++k) {
            const double c = 1.0 / static_cast<double>(k * k) / 1.6449340668482264;
            unit += 6 * (static_cast<int64_t>(static_cast<double>(n + 1) * c) -
                         static_cast<int64_t>(static_cast<double>(n) * c));
        }
    }
    return unit + 2;
}

void check_niah(const RulerSample& s, const NiahRule& r) {
    const bool one = r.q * r.v == 1;
    const std::string kind = std::string(r.uuid_values ? "uuid" : "number") + (one ? "" : "s");
    const std::string plural = r.uuid_values ? "uuids" : "numbers";
    const std::string intro =
        one ? "A special magic " + kind +
                  " is hidden within the following text. Make sure to memorize it. I will "
                  "quiz you about the " +
                  kind + " afterwards.\n"
            : "Some special magic " + kind +
                  " are hidden within the following text. Make sure to memorize it. I will "
                  "quiz you about the " +
                  kind + " afterwards.\n";
    QVERIFY2(s.context.rfind(intro, 0) == 0, qPrintable(qs(s.context.substr(0, 200))));
    // Needles: k keys x v values, each once in the context, in context order, with distinct keys and values.
    QCOMPARE(static_cast<int>(s.needles.size()), r.k * r.v);
    QCOMPARE(s.depths.size(), s.needles.size());
    std::map<std::string, std::vector<std::string>> by_key;
    std::set<std::string> values;
    size_t last = 0;
    const std::string head = "One of the special magic " + plural + " for ";
    for (const std::string& n : s.needles) {
        QCOMPARE(occurrences(s.context, n), int64_t{1});
        const size_t at = s.context.find(n);
        QVERIFY(at >= last);
        last = at;
        QVERIFY2(n.rfind(head, 0) == 0 && n.back() == '.', qPrintable(qs(n)));
        const size_t is = n.find(" is: ");
        QVERIFY(is != std::string::npos);
        const std::string key = n.substr(head.size(), is - head.size());
        const std::string value = n.substr(is + 5, n.size() - is - 6);
        QVERIFY2(r.word_keys ? key.find('-') != std::string::npos && !is_uuid4(key) : is_uuid4(key),
                 qPrintable(qs(key)));
        QVERIFY2(r.uuid_values ? is_uuid4(value) : is_digits(value, 7) && value[0] != '0',
                 qPrintable(qs(value)));
        by_key[key].push_back(value);
        QVERIFY2(values.insert(value).second, qPrintable(qs("repeated value " + value)));
    }
    QCOMPARE(static_cast<int>(by_key.size()), r.k);
    for (const auto& kv : by_key) QCOMPARE(static_cast<int>(kv.second.size()), r.v);
    // The answers: every value of each asked key, each exactly once in the context.
    QCOMPARE(static_cast<int>(s.outputs.size()), r.q * r.v);
    std::vector<std::string> asked;
    for (const auto& kv : by_key) {
        int hits = 0;
        for (const std::string& v : kv.second)
            hits += std::count(s.outputs.begin(), s.outputs.end(), v) ? 1 : 0;
        QVERIFY(hits == 0 || hits == r.v);
        if (hits) asked.push_back(kv.first);
    }
    QCOMPARE(static_cast<int>(asked.size()), r.q);
    for (const std::string& o : s.outputs) QCOMPARE(occurrences(s.context, o), int64_t{1});
    for (const std::string& key : asked) {
        QVERIFY(s.question.find(key) != std::string::npos && s.answer_prefix.find(key) != std::string::npos);
    }
    // Singular wording for one asked value; several keys are listed "a, b, c, and d".
    const size_t for_at = s.question.find(" for ") + 5,
                 end_at = s.question.find(" mentioned in the provided text?");
    const std::string query = s.question.substr(for_at, end_at - for_at);
    QCOMPARE(qs(s.question), qs((one ? "What is the special magic " : "What are all the special magic ") +
                                kind + " for " + query + " mentioned in the provided text?"));
    QCOMPARE(qs(s.answer_prefix), qs("The special magic " + kind + " for " + query +
                                     " mentioned in the provided text " + (one ? "is" : "are")));
    if (r.q > 1) {
        QCOMPARE(occurrences(query, ", "), int64_t{r.q - 1});
        QVERIFY(query.find(", and ") != std::string::npos);
    }

    const std::string hay = s.context.substr(intro.size());
    if (r.haystack == "essay") {
        // Depths: distinct points of RULER's 40-point grid, ascending in context order, and each needle sits
        // between sentences about that far into the haystack.
        std::set<int> grid;
        for (int i = 0; i < 40; ++i) grid.insert(static_cast<int>(std::lround(100.0 * i / 39.0)));
        QCOMPARE(std::set<double>(s.depths.begin(), s.depths.end()).size(), s.depths.size());
        QVERIFY(std::is_sorted(s.depths.begin(), s.depths.end()));
        for (size_t i = 0; i < s.needles.size(); ++i) {
            QVERIFY(grid.count(static_cast<int>(s.depths[i])) && s.depths[i] == std::floor(s.depths[i]));
            const size_t at = hay.find(s.needles[i]);
            // (At 100 % it follows the haystack's last words, a sentence cut short by the length.)
            QVERIFY2(
                at == 0 || s.depths[i] == 100 ||
                    (at >= 2 && hay[at - 1] == ' ' &&
                     std::string(".!?").find(hay[at - 2]) != std::string::npos),
                qPrintable(qs("needle not after a sentence: ..." + hay.substr(at >= 30 ? at - 30 : 0, 60))));
            const size_t after = at + s.needles[i].size();
            QVERIFY(after == hay.size() || hay[after] == ' ');
            const double where = 100.0 * static_cast<double>(at) / static_cast<double>(hay.size());
            QVERIFY2(
                std::abs(where - s.depths[i]) <= 5.0,
                qPrintable(QString("needle at %1 %% of the haystack, depth %2").arg(where).arg(s.depths[i])));
        }
        // Without its needles the haystack is the essay's first `haystack_units` words.
        std::string rest = hay;
        for (const std::string& n : s.needles) {
            const size_t at = rest.find(n);
            if (at + n.size() < rest.size())
                rest.erase(at, n.size() + 1);  // with the space after it
            else
                rest.erase(at > 0 ? at - 1 : 0, n.size() + (at > 0 ? 1 : 0));  // the last: the space before
        }
        QCOMPARE(static_cast<int64_t>(split(rest, " ").size()), s.haystack_units);
    } else {
        // Line haystacks: noise lines or distractor needles, the needles at distinct lines.
        const std::vector<std::string> lines = split(hay, "\n");
        QCOMPARE(static_cast<int64_t>(lines.size()), s.haystack_units + r.k * r.v);
        for (const std::string& l : lines) {
            if (std::count(s.needles.begin(), s.needles.end(), l)) continue;
            if (r.haystack == "noise") {
                QCOMPARE(qs(l), qs(kNoise));
            } else {
                QVERIFY2(l.rfind(head, 0) == 0, qPrintable(qs(l)));
                for (const auto& kv : by_key)  // no distractor repeats a real key or value
                    QVERIFY(l.find(" for " + kv.first + " is: ") == std::string::npos);
                for (const std::string& v : values) QVERIFY(l.find(v) == std::string::npos);
            }
        }
        QCOMPARE(std::set<double>(s.depths.begin(), s.depths.end()).size(), s.depths.size());
        for (double d : s.depths) QVERIFY(d >= 0 && d < 100);
    }
}

void check_vt(const Tokenizer& tok, const RulerSample& s) {
    QCOMPARE(s.outputs.size(), size_t{5});
    QCOMPARE(std::set<std::string>(s.outputs.begin(), s.outputs.end()).size(), size_t{5});
    for (const std::string& n : s.outputs) QVERIFY(is_letters(n, 5, true));
    const std::string qhead = "Find all variables that are assigned the value ";
    QVERIFY(s.question.rfind(qhead, 0) == 0);
    const std::string value = s.question.substr(qhead.size(), 5);
    QVERIFY(is_digits(value, 5));
    QCOMPARE(qs(s.question), qs(qhead + value + " in the text above."));
    QCOMPARE(qs(s.answer_prefix),
             qs("According to the chain(s) of variable assignment in the text above, 5 variables "
                "are assigned the value " +
                value + ", they are: "));
    // The one-shot example first: its own chain of 3-letter names, answered, within 500 tokens.
    const size_t main_at = s.context.rfind(kVtIntro);
    QVERIFY(main_at != std::string::npos && main_at > 0 && s.context.rfind(kVtIntro, 0) == 0);
    const std::string shot = s.context.substr(0, main_at);
    const size_t they = shot.rfind("they are: ");
    QVERIFY(they != std::string::npos);
    QVERIFY(tok.encode(shot.substr(0, they + 10), false).size() <= 500);
    const std::string ex_value = shot.substr(shot.find("assigned the value ") + 19, 5);
    QVERIFY(is_digits(ex_value, 5) && ex_value != value);
    std::vector<std::string> ex_names = split(shot.substr(they + 11, shot.size() - they - 13), " ");
    QCOMPARE(qs(shot.substr(shot.size() - 2)), qs("\n\n"));
    QCOMPARE(ex_names.size(), size_t{5});
    QVERIFY2(shot.find("VAR " + ex_names[0] + " = " + ex_value + "\n") != std::string::npos,
             qPrintable(qs(shot)));
    for (int j = 1; j < 5; ++j) {
        QVERIFY(is_letters(ex_names[j], 3, true));
        QVERIFY(shot.find("VAR " + ex_names[j] + " = VAR " + ex_names[j - 1] + " \n") != std::string::npos);
    }
    // The chain: 5 statements in order at distinct lines of the noise haystack, each once.
    const std::string hay = s.context.substr(main_at + kVtIntro.size());
    const std::vector<std::string> lines = split(hay, "\n");
    QCOMPARE(static_cast<int64_t>(lines.size()), s.haystack_units + 5);
    std::vector<std::string> chain = {"VAR " + s.outputs[0] + " = " + value};
    for (int j = 1; j < 5; ++j) chain.push_back("VAR " + s.outputs[j] + " = VAR " + s.outputs[j - 1] + " ");
    QCOMPARE(s.needles, chain);
    size_t next = 0;
    for (const std::string& l : lines) {
        if (l == kNoise) continue;
        QVERIFY2(next < chain.size() && l == chain[next], qPrintable(qs(l)));
        ++next;
    }
    QCOMPARE(next, chain.size());
    for (int j = 0; j < 5; ++j) QCOMPARE(occurrences(s.context, s.outputs[j]), int64_t{j < 4 ? 2 : 1});
}

void check_cwe(const RulerSample& s) {
    const bool small = s.target_length < 4096;
    QCOMPARE(qs(s.question), qs("What are the 10 most common words in the above list?"));
    QCOMPARE(qs(s.answer_prefix), qs("The top 10 words that appear most often in the list are:"));
    QVERIFY(s.context.rfind(kCweIntro, 0) == 0);
    const size_t main_at = s.context.rfind("\n" + kCweIntro);
    QVERIFY(main_at != std::string::npos);
    // The main list: 10 common words x30 (x6 below 4k), the others x3 (x1), haystack_units words in all.
    const std::vector<std::string> list = parse_numbered(s.context.substr(main_at + 1 + kCweIntro.size()));
    const auto counts = tally(list);
    QCOMPARE(static_cast<int64_t>(counts.size()), s.haystack_units);
    QCOMPARE(s.outputs.size(), size_t{10});
    for (const std::string& o : s.outputs)
        QCOMPARE(counts.count(o) ? counts.at(o) : 0, int64_t{small ? 6 : 30});
    for (const auto& kv : counts)
        if (!std::count(s.outputs.begin(), s.outputs.end(), kv.first))
            QCOMPARE(kv.second, int64_t{small ? 1 : 3});
    // The one-shot example: 40 words (20 below 4k), 10 x10 (x3), others x3 (x1), answered with its 10 common
    // words, none of them in the main list.
    const std::string shot = s.context.substr(0, main_at);
    const size_t q = shot.find(
        "\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 "
        "words that appear most often in the list are: ");
    QVERIFY(q != std::string::npos);
    const auto ex_counts = tally(parse_numbered(shot.substr(kCweIntro.size(), q - kCweIntro.size())));
    QCOMPARE(static_cast<int>(ex_counts.size()), small ? 20 : 40);
    const std::vector<std::string> ex_answer = parse_numbered(shot.substr(shot.find("list are: ") + 10));
    QCOMPARE(ex_answer.size(), size_t{10});
    for (const auto& kv : ex_counts) {
        const bool common = std::count(ex_answer.begin(), ex_answer.end(), kv.first) > 0;
        QCOMPARE(kv.second, int64_t{common ? (small ? 3 : 10) : (small ? 1 : 3)});
        QVERIFY(!counts.count(kv.first));
    }
}

void check_fwe(const RulerSample& s) {
    QVERIFY(s.context.rfind(kFweIntro, 0) == 0);
    QCOMPARE(qs(s.answer_prefix),
             qs("According to the coded text above, the three most frequently appeared words are:"));
    const auto counts = tally(split(s.context.substr(kFweIntro.size()), " "));
    // Zipf counts floor(N k^-2 / zeta(2)) over a vocabulary of (length - 50) / 50 words.
    std::vector<int64_t> want;
    const int64_t vocab = (s.target_length - 50) / 50;
    for (int64_t k = 1; k <= vocab; ++k) {
        const auto c = static_cast<int64_t>(static_cast<double>(s.haystack_units) /
                                            static_cast<double>(k * k) / 1.6449340668482264);
        if (c > 0) want.push_back(c);
    }
    std::vector<int64_t> got;
    for (const auto& kv : counts) got.push_back(kv.second);
    std::sort(got.rbegin(), got.rend());
    QCOMPARE(got, want);
    // The most frequent is "..."; the answer is ranks 2-4, each more frequent than every other coded word.
    QCOMPARE(counts.at("..."), want[0]);
    QCOMPARE(s.outputs.size(), size_t{3});
    for (size_t i = 0; i < 3; ++i) {
        QVERIFY(is_letters(s.outputs[i], 6, false));
        QCOMPARE(counts.at(s.outputs[i]), want[i + 1]);
    }
    for (const auto& kv : counts) {
        if (kv.first == "..." || std::count(s.outputs.begin(), s.outputs.end(), kv.first)) continue;
        QVERIFY(is_letters(kv.first, 6, false));
        QVERIFY(kv.second < counts.at(s.outputs[2]));
    }
}

// The checks every sample gets, then its task's.
void check_sample(const Tokenizer& tok, const RulerSample& s, bool chat, const std::string& where) {
    QCOMPARE(s.max_new_tokens, ruler_max_new_tokens(s.task));
    QCOMPARE(s.metric, RulerMetric::StringMatchAll);
    const PromptParts p = build_prompt(tok, s.context, s.question, chat, s.answer_prefix);
    const auto tokens =
        static_cast<int64_t>(p.context_ids.size() + p.question_ids.size() + p.prefix_ids.size());
    QCOMPARE(s.prompt_tokens, tokens);
    const int64_t total = tokens + s.max_new_tokens;
    QVERIFY2(
        total <= s.target_length && total >= s.target_length - tolerance(tok, s),
        qPrintable(qs(fmt::format("{}: {} prompt + {} new tokens for a target of {} (tolerance {})", where,
                                  tokens, s.max_new_tokens, s.target_length, tolerance(tok, s)))));
    if (niah_rules().count(s.task))
        check_niah(s, niah_rules().at(s.task));
    else if (s.task == "vt")
        check_vt(tok, s);
    else if (s.task == "cwe")
        check_cwe(s);
    else
        check_fwe(s);
}

}  // namespace

class TestRuler : public QObject {
    Q_OBJECT

  private:
    void all_tasks(const fs::path& dir, bool chat, const std::vector<int64_t>& lengths) {
        const Tokenizer tok = Tokenizer::load(dir);
        RulerOptions opt;
        opt.chat = chat;
        RulerGenerator gen(tok, opt);
        for (const std::string& task : ruler_task_names())
            for (int64_t length : lengths)
                for (int64_t index : {0, 1}) {
                    const std::string where = fmt::format("{} {} L={} #{} chat={}", dir.filename().string(),
                                                          task, length, index, chat);
                    const RulerSample s = gen.generate(task, length, index);
                    QCOMPARE(qs(s.task), qs(task));
                    QCOMPARE(s.index, index);
                    QCOMPARE(s.target_length, length);
                    check_sample(tok, s, chat, where);
                    if (QTest::currentTestFailed()) {
                        qWarning("%s", qPrintable(qs(where)));
                        return;
                    }
                }
    }

  private Q_SLOTS:
    void task_table() {
        const std::vector<std::string> names = {"niah_single_1",
                                                "niah_single_2",
                                                "niah_single_3",
                                                "niah_multikey_1",
                                                "niah_multikey_2",
                                                "niah_multikey_3",
                                                "niah_multivalue",
                                                "niah_multiquery",
                                                "vt",
                                                "cwe",
                                                "fwe"};
        QCOMPARE(ruler_task_names(), names);
        QCOMPARE(ruler_max_new_tokens("niah_multiquery"), int64_t{128});
        QCOMPARE(ruler_max_new_tokens("vt"), int64_t{30});
        QCOMPARE(ruler_max_new_tokens("cwe"), int64_t{120});
        QCOMPARE(ruler_max_new_tokens("fwe"), int64_t{50});
        for (const std::string& t : names) QCOMPARE(ruler_metric(t), RulerMetric::StringMatchAll);
        QCOMPARE(qs(to_string(RulerMetric::StringMatchAll)), qs("string_match_all"));
        QCOMPARE(qs(to_string(RulerMetric::StringMatchPart)), qs("string_match_part"));
        EXPECT_ERROR(ruler_max_new_tokens("qa_1"), "unknown RULER task 'qa_1'", "niah_single_1", "fwe");
    }

    // Hand-worked scores: the share of references found (all) or whether any is (part), case-insensitively,
    // after control characters became newlines.
    void scorers() {
        const std::vector<std::string> refs = {"1234567", "7654321", "2468024"};
        const std::string pred = "The numbers are 1234567 and 7654321.";
        QCOMPARE(ruler_string_match_all(pred, refs), 200.0 / 3.0);
        QCOMPARE(ruler_string_match_part(pred, refs), 100.0);
        QCOMPARE(ruler_string_match_all("nothing", refs), 0.0);
        QCOMPARE(ruler_string_match_part("nothing", refs), 0.0);
        QCOMPARE(ruler_string_match_all("Plain-Bagel and STURDY-OAK", {"plain-bagel", "sturdy-oak"}), 100.0);
        QCOMPARE(ruler_string_match_all("plain-bagel only", {"Plain-Bagel", "Sturdy-Oak"}), 50.0);
        QCOMPARE(ruler_string_match_part("I saw DELTA", {"Gamma", "Delta"}), 100.0);
        QCOMPARE(ruler_string_match_all("\xE2\x84\xAA"
                                        "ey",
                                        {"key"}),
                 100.0);  // Python lowers the Kelvin sign
        EXPECT_ERROR(ruler_string_match_all("x", {}), "no references");

        QCOMPARE(qs(ruler_postprocess("  \x01"
                                      "abc\tdef\x1f \r\n")),
                 qs("abc\ndef"));
        QCOMPARE(qs(ruler_postprocess(std::string("12\0"
                                                  "34",
                                                  5))),
                 qs("12\n34"));
        QCOMPARE(qs(ruler_postprocess(" \x02 ")), qs(""));

        RulerSample s;
        s.outputs = {"alpha", "beta", "gamma", "delta"};
        QCOMPARE(ruler_score(s, " ALPHA, gamma and delta"), 75.0);
        QCOMPARE(ruler_score(s, "al\x1fpha beta"), 25.0);  // the control character splits "alpha"
        s.metric = RulerMetric::StringMatchPart;
        QCOMPARE(ruler_score(s, "only Delta"), 100.0);
        QCOMPARE(ruler_score(s, "none"), 0.0);
        // cwe: 7 of the 10 words named.
        s.metric = RulerMetric::StringMatchAll;
        s.outputs = {"a0", "b1", "c2", "d3", "e4", "f5", "g6", "h7", "i8", "j9"};
        QCOMPARE(ruler_score(s, "1. a0 2. b1 3. c2 4. d3 5. e4 6. f5 7. g6 8. x 9. y 10. z"), 70.0);
    }

    void llama3_plain() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        all_tasks(llama3, false, {1500, 4096});
    }

    void qwen3_chat() {
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        all_tasks(qwen3, true, {1500, 4096});
    }

    void llama3_chat_qwen3_plain() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        all_tasks(llama3, true, {2048});
        if (QTest::currentTestFailed()) return;
        all_tasks(qwen3, false, {2048});
    }

    // Same (seed, task, length, index): the same sample, from a fresh generator too; another index, length or
    // seed: other keys, values and needles.
    void determinism() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        const Tokenizer tok = Tokenizer::load(llama3);
        RulerGenerator a(tok, {}), b(tok, {});
        RulerOptions other_seed;
        other_seed.seed = 43;
        RulerGenerator c(tok, other_seed);
        for (const std::string& task : ruler_task_names()) {
            const RulerSample s = a.generate(task, 2000, 3);
            for (const RulerSample& t : {a.generate(task, 2000, 3), b.generate(task, 2000, 3)}) {
                QCOMPARE(qs(t.context), qs(s.context));
                QCOMPARE(qs(t.question), qs(s.question));
                QCOMPARE(t.outputs, s.outputs);
            }
            for (const RulerSample& t :
                 {a.generate(task, 2000, 4), a.generate(task, 2001, 3), c.generate(task, 2000, 3)}) {
                std::vector<std::string> shared;
                for (const std::string& o : t.outputs)
                    if (std::count(s.outputs.begin(), s.outputs.end(), o)) shared.push_back(o);
                QVERIFY2(shared.empty(), qPrintable(qs(task + ": another sample repeats " +
                                                       (shared.empty() ? "" : shared.front()))));
                if (!s.needles.empty()) QVERIFY(t.needles != s.needles);
            }
        }
    }

    // A user essay is the essay haystack, its words repeated as needed; noise-haystack tasks ignore it.
    void essay_text_option() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        const Tokenizer tok = Tokenizer::load(llama3);
        RulerOptions opt;
        opt.essay_text = "  Rivers bend around old stones.\nQuiet  boats wait!  Do birds sing? Yes. ";
        RulerGenerator gen(tok, opt);
        const RulerSample s = gen.generate("niah_multivalue", 1200, 0);
        check_sample(tok, s, false, "essay text");
        QVERIFY(occurrences(s.context,
                            "Rivers bend around old stones. Quiet boats wait! Do birds sing? Yes. Rivers") >
                5);
        QCOMPARE(qs(gen.generate("niah_single_1", 1200, 0).context),
                 qs(RulerGenerator(tok, {}).generate("niah_single_1", 1200, 0).context));
        opt.essay_text = " \n\t ";
        EXPECT_ERROR(RulerGenerator(tok, opt), "essay", "no words");
    }

    void errors() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        const Tokenizer tok = Tokenizer::load(llama3);
        RulerGenerator gen(tok, {});
        EXPECT_ERROR(gen.generate("niah_single_9", 4096, 0), "unknown RULER task 'niah_single_9'",
                     "niah_multiquery");
        EXPECT_ERROR(gen.generate("niah_single_1", 150, 0), "niah_single_1 at length 150 is too short",
                     "(1 noise line)", "128 to generate");
        EXPECT_ERROR(gen.generate("vt", 200, 0), "vt at length 200 is too short");
        EXPECT_ERROR(gen.generate("cwe", 300, 0), "cwe at length 300 is too short", "(10 list words)");
        EXPECT_ERROR(gen.generate("fwe", 290, 0), "fwe at length 290 is too short", "needs at least 5");
        EXPECT_ERROR(gen.generate("niah_single_2", 0, 0), "length 0 must be positive");
        EXPECT_ERROR(gen.generate("niah_single_2", 4096, -1), "index -1 must not be negative");
        // cwe needs a new word per ~16 tokens at >= 4k; the word list runs out at about 140k tokens.
        EXPECT_ERROR(gen.generate("cwe", 400000, 0), "cwe at length 400000 needs more than",
                     "distinct words");
        RulerOptions opt;
        opt.word_dir = "/nonexistent-ruler-words";
        RulerGenerator no_words(tok, opt);
        EXPECT_ERROR(no_words.generate("niah_single_2", 2000, 0), "/nonexistent-ruler-words", "nounlist.txt");
        // Tasks without word keys do not need the lists.
        QCOMPARE(no_words.generate("niah_multikey_3", 1000, 0).task, std::string("niah_multikey_3"));
        QCOMPARE(no_words.generate("fwe", 1000, 0).task, std::string("fwe"));
    }

    // The shipped lists: wonderwords' nouns, adjectives and verbs, found through the data roots.
    void word_lists() {
        const std::string dir = find_ruler_word_dir();
        QVERIFY2(!dir.empty(), "resources/eval/wonderwords not found from the test's data roots");
        QVERIFY(fs::is_regular_file(fs::path(dir) / "LICENSE"));
        const RulerWordLists w = load_ruler_word_lists();
        QVERIFY(w.nouns.size() > 6000 && w.adjectives.size() > 800 && w.verbs.size() > 900);
        QVERIFY(std::count(w.nouns.begin(), w.nouns.end(), "aardvark"));
        QVERIFY(std::count(w.adjectives.begin(), w.adjectives.end(), "nasty"));  // "nasty " in the file
        const std::vector<std::string> all = w.all_words();
        QVERIFY(std::is_sorted(all.begin(), all.end()));
        QVERIFY(all.size() < w.nouns.size() + w.adjectives.size() + w.verbs.size());  // some are in two lists
        RulerRng rng(1);
        const std::vector<int64_t> pick = rng.sample(10, 10);
        QCOMPARE(std::set<int64_t>(pick.begin(), pick.end()).size(), size_t{10});
        QVERIFY(is_uuid4(ruler_uuid(rng)) && is_digits(ruler_number(rng), 7));
    }
};

QTEST_GUILESS_MAIN(TestRuler)
#include "test_core_ruler.moc"

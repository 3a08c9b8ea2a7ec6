#include "core/suites/ruler_tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "base/error.h"
#include "base/hash.h"
#include "core/prompt.h"
#include "core/suites/demo_corpus.h"
#include "core/suites/ruler_words.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

enum class Family { Niah, Vt, Cwe, Fwe };
enum class Haystack { Noise, Essay, Needle };
enum class Kind { Words, Numbers, Uuids };

struct TaskSpec {
    const char* name;
    Family family;
    Haystack haystack = Haystack::Noise;
    Kind key = Kind::Words;
    Kind value = Kind::Numbers;
    int num_k = 1, num_v = 1, num_q = 1;  // RULER's num_needle_k / _v / _q (k already max(k, q))
};

// RULER's synthetic.yaml.
const TaskSpec kTasks[] = {
    {"niah_single_1", Family::Niah, Haystack::Noise, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_single_2", Family::Niah, Haystack::Essay, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_single_3", Family::Niah, Haystack::Essay, Kind::Words, Kind::Uuids, 1, 1, 1},
    {"niah_multikey_1", Family::Niah, Haystack::Essay, Kind::Words, Kind::Numbers, 4, 1, 1},
    {"niah_multikey_2", Family::Niah, Haystack::Needle, Kind::Words, Kind::Numbers, 1, 1, 1},
    {"niah_multikey_3", Family::Niah, Haystack::Needle, Kind::Uuids, Kind::Uuids, 1, 1, 1},
    {"niah_multivalue", Family::Niah, Haystack::Essay, Kind::Words, Kind::Numbers, 1, 4, 1},
    {"niah_multiquery", Family::Niah, Haystack::Essay, Kind::Words, Kind::Numbers, 4, 1, 4},
    {"vt", Family::Vt},
    {"cwe", Family::Cwe},
    {"fwe", Family::Fwe},
};

const char* const kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* const kVtIntro =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
const char* const kCweIntro =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
    "ones "
    "that appear most often.\n";
const char* const kCweQuestion = "What are the 10 most common words in the above list?";
const char* const kCwePrefix = "The top 10 words that appear most often in the list are:";
const char* const kFweIntro =
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently "
    "appeared coded words. ";
const char* const kFweQuestion =
    "Do not provide any explanation. Please ignore the dots '....'. What are the three most frequently "
    "appeared words in the above coded text?";
const char* const kFwePrefix =
    "According to the coded text above, the three most frequently appeared words are:";

constexpr int kVtHops = 4;  // one chain of 4 hops: 5 variables
constexpr int kCommonWords = 10;
constexpr double kZeta2 = 1.6449340668482264;  // zeta(2) = pi^2 / 6, the Zipf normaliser for alpha 2

const TaskSpec& spec_of(const std::string& task) {
    for (const TaskSpec& s : kTasks)
        if (task == s.name) return s;
    std::string known;
    for (const TaskSpec& s : kTasks) known += std::string(known.empty() ? "" : ", ") + s.name;
    throw Error("unknown RULER task '" + task + "' (tasks: " + known + ")");
}

// Independent streams of one sample: `purpose` names what is drawn from them.
enum Purpose : uint64_t { kDraw = 1, kPositions, kDistractors, kShuffle, kExample, kExampleShuffle };

uint64_t stream_seed(uint64_t sample_seed, uint64_t purpose, uint64_t extra = 0) {
    return mix_seed(mix_seed(sample_seed, purpose), extra);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
    return out;
}

// RULER's NIAH grid: 40 depth points spread evenly over 0-100 % (numpy round(linspace(0, 100, 40))).
int depth_point(int i) {
    return static_cast<int>(std::lround(100.0 * i / 39.0));
}

bool ends_sentence(const std::string& word) {
    size_t n = word.size();
    // Closing quotes and brackets may follow the full stop ("end." / end.") / (end.)).
    while (n > 0 && (word[n - 1] == '"' || word[n - 1] == '\'' || word[n - 1] == ')' || word[n - 1] == ']'))
        --n;
    if (n >= 3 &&
        (word.compare(n - 3, 3, "\xE2\x80\x9D") == 0 || word.compare(n - 3, 3, "\xE2\x80\x99") == 0))
        n -= 3;  // ” and ’
    return n > 0 && (word[n - 1] == '.' || word[n - 1] == '!' || word[n - 1] == '?');
}

// One probe of the length search: the prompt's pieces at a haystack size.
struct Built {
    std::string context, question, prefix;
    std::vector<std::string> needles;
    std::vector<double> depths;
};

struct Fit {
    int64_t units = 0;
    int64_t tokens = 0;
    bool at_max = false;  // max_units fits: the caller may need more units than it has
    Built built;
};

// The largest haystack size in [min_units, max_units] whose token count is within `budget`, by an estimate
// from two sizes, a gallop past it and bisection (the count grows with the size, as RULER assumes).
Fit fit_units(const std::function<Built(int64_t)>& build, const std::function<int64_t(const Built&)>& count,
              int64_t min_units, int64_t max_units, int64_t budget,
              const std::function<std::string(int64_t)>& too_short) {
    Fit best;
    best.units = min_units;
    best.built = build(min_units);
    best.tokens = count(best.built);
    if (best.tokens > budget) throw Error(too_short(best.tokens));
    const int64_t t0 = best.tokens;
    auto probe = [&](int64_t u) {
        Built b = build(u);
        const int64_t t = count(b);
        if (t > budget) return false;
        if (u > best.units) best = {u, t, false, std::move(b)};
        return true;
    };
    int64_t lo = min_units, hi = -1;  // lo fits; hi, once >= 0, does not
    const int64_t first = std::min(max_units, min_units + 16);
    if (first > lo) (probe(first) ? lo : hi) = first;
    if (hi < 0 && lo < max_units) {
        const double rate =
            std::max(0.25, static_cast<double>(best.tokens - t0) / static_cast<double>(lo - min_units));
        int64_t guess = lo + static_cast<int64_t>(static_cast<double>(budget - best.tokens) / rate);
        guess = std::clamp(guess, lo + 1, max_units);
        if (probe(guess)) {
            lo = guess;
            for (int64_t step = std::max<int64_t>(1, guess / 64); hi < 0 && lo < max_units; step *= 2) {
                const int64_t u = std::min(max_units, lo + step);
                (probe(u) ? lo : hi) = u;
            }
        } else {
            hi = guess;
        }
    }
    if (hi < 0) {
        best.at_max = true;
        return best;
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (probe(mid) ? lo : hi) = mid;
    }
    return best;
}

// "1. a 2. b 3. c": RULER's numbered list.
std::string numbered(const std::vector<std::string>& words) {
    std::string out;
    for (size_t i = 0; i < words.size(); ++i) out += fmt::format("{}{}. {}", i ? " " : "", i + 1, words[i]);
    return out;
}

// Python's str.lower() on what matters here: ASCII letters, and the two code points it lowers to ASCII
// (the Kelvin sign to "k", dotted capital I to "i" + combining dot), so that matches agree with RULER.
std::string lower(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c >= 'A' && c <= 'Z') {
            out += static_cast<char>(c - 'A' + 'a');
        } else if (s.compare(i, 3, "\xE2\x84\xAA") == 0) {
            out += 'k';
            i += 2;
        } else if (s.compare(i, 2, "\xC4\xB0") == 0) {
            out += "i\xCC\x87";
            i += 1;
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace

std::string to_string(RulerMetric m) {
    return m == RulerMetric::StringMatchAll ? "string_match_all" : "string_match_part";
}

const std::vector<std::string>& ruler_task_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const TaskSpec& s : kTasks) v.push_back(s.name);
        return v;
    }();
    return names;
}

int64_t ruler_max_new_tokens(const std::string& task) {
    switch (spec_of(task).family) {
        case Family::Niah:
            return 128;
        case Family::Vt:
            return 30;
        case Family::Cwe:
            return 120;
        case Family::Fwe:
            return 50;
    }
    return 0;
}

RulerMetric ruler_metric(const std::string& task) {
    spec_of(task);  // every synthetic task is string_match_all; only RULER's qa tasks score by part
    return RulerMetric::StringMatchAll;
}

// The shared essay haystack: words of the user's text (cycled) or of the demo filler, grown on demand.
struct RulerGenerator::Essay {
    std::vector<std::string> words;
    std::vector<std::string> source;  // the user's words; empty for the filler
    std::unique_ptr<DemoTextGenerator> filler;
};

RulerGenerator::RulerGenerator(const Tokenizer& tokenizer, RulerOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)), essay_(std::make_unique<Essay>()) {
    if (!options_.essay_text.empty()) {
        size_t i = 0;
        const std::string& t = options_.essay_text;
        while (i < t.size()) {  // RULER splits the essays on any whitespace
            while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
            const size_t b = i;
            while (i < t.size() && !std::isspace(static_cast<unsigned char>(t[i]))) ++i;
            if (i > b) essay_->source.push_back(t.substr(b, i - b));
        }
        if (essay_->source.empty()) throw Error("the RULER essay haystack text has no words");
    } else {
        essay_->filler = std::make_unique<DemoTextGenerator>(mix_seed(splitmix64(options_.seed), 0x65737361));
    }
}

RulerGenerator::~RulerGenerator() = default;

const RulerWordLists& RulerGenerator::words() {
    if (!words_) words_ = std::make_unique<RulerWordLists>(load_ruler_word_lists(options_.word_dir));
    return *words_;
}

const std::vector<std::string>& RulerGenerator::essay_words(size_t n) {
    Essay& e = *essay_;
    while (e.words.size() < n) {
        if (e.filler) {
            const std::string s = e.filler->filler_sentence();
            size_t i = 0;
            while (i < s.size()) {
                const size_t sp = s.find(' ', i);
                const size_t end = sp == std::string::npos ? s.size() : sp;
                if (end > i) e.words.push_back(s.substr(i, end - i));
                i = end + 1;
            }
        } else {
            e.words.push_back(e.source[e.words.size() % e.source.size()]);
        }
    }
    return e.words;
}

RulerSample RulerGenerator::generate(const std::string& task, int64_t length, int64_t index) {
    const TaskSpec& spec = spec_of(task);
    if (length < 1) throw Error(fmt::format("RULER length {} must be positive", length));
    if (index < 0) throw Error(fmt::format("RULER sample index {} must not be negative", index));
    RulerSample out;
    out.task = task;
    out.index = index;
    out.max_new_tokens = ruler_max_new_tokens(task);
    out.metric = ruler_metric(task);
    out.target_length = length;
    const int64_t budget = length - out.max_new_tokens;  // prompt tokens allowed
    const uint64_t seed =
        mix_seed(mix_seed(mix_seed(splitmix64(options_.seed), fnv1a(task)), static_cast<uint64_t>(length)),
                 static_cast<uint64_t>(index));
    RulerRng draw(stream_seed(seed, kDraw));

    auto count = [&](const Built& b) {
        const PromptParts p = build_prompt(tokenizer_, b.context, b.question, options_.chat, b.prefix);
        return static_cast<int64_t>(p.context_ids.size() + p.question_ids.size() + p.prefix_ids.size());
    };
    auto too_short = [&](const std::string& unit, int64_t units) {
        return [&, unit, units](int64_t tokens) {
            return fmt::format(
                "RULER {} at length {} is too short: the prompt with the smallest haystack ({} {}{}) "
                "takes {} tokens, plus {} to generate",
                task, length, units, unit, units == 1 ? "" : "s", tokens, out.max_new_tokens);
        };
    };
    // Statements placed at distinct random lines (before line p), as RULER's noise and needle haystacks do.
    auto place_lines = [](RulerRng rng, const std::vector<std::string>& lines,
                          const std::vector<std::string>& put, Built& b) {
        const auto n = static_cast<int64_t>(lines.size());
        std::vector<int64_t> pos = rng.sample(n, static_cast<int64_t>(put.size()));
        std::sort(pos.begin(), pos.end());
        std::string text;
        size_t j = 0;
        for (int64_t i = 0; i < n; ++i) {
            for (; j < put.size() && pos[j] == i; ++j) {
                text += (text.empty() ? "" : "\n") + put[j];
                b.needles.push_back(put[j]);
                b.depths.push_back(100.0 * static_cast<double>(i) / static_cast<double>(n));
            }
            text += (text.empty() ? "" : "\n") + lines[static_cast<size_t>(i)];
        }
        return text;
    };
    Fit fit;

    if (spec.family == Family::Niah) {
        auto random_of = [&](Kind k, RulerRng& r) {
            return k == Kind::Numbers ? ruler_number(r)
                   : k == Kind::Uuids ? ruler_uuid(r)
                                      : ruler_word_key(r, words());
        };
        const std::string kind_pl = spec.value == Kind::Numbers ? "numbers" : "uuids";
        std::vector<std::string> keys, needle_text;
        std::vector<std::vector<std::string>> values;
        std::set<std::string> used_keys, used_values;
        for (int k = 0; k < spec.num_k; ++k) {
            std::string key;
            do {
                key = random_of(spec.key, draw);
            } while (!used_keys.insert(key).second);
            keys.push_back(key);
            values.emplace_back();
            for (int v = 0; v < spec.num_v; ++v) {
                std::string value;
                do {
                    value = random_of(spec.value, draw);
                } while (!used_values.insert(value).second);
                values.back().push_back(value);
                needle_text.push_back("One of the special magic " + kind_pl + " for " + key +
                                      " is: " + value + ".");
            }
        }
        draw.shuffle(needle_text);
        std::vector<int64_t> asked = draw.sample(spec.num_k, spec.num_q);
        std::vector<std::string> queries;
        for (int64_t q : asked) {
            queries.push_back(keys[static_cast<size_t>(q)]);
            for (const std::string& v : values[static_cast<size_t>(q)]) out.outputs.push_back(v);
        }
        const std::string last = queries.back();
        queries.pop_back();
        const std::string query = queries.empty() ? last : join(queries, ", ") + ", and " + last;
        // One value asked: RULER's singular wording ("A special magic number is hidden", "What is the").
        const bool one = spec.num_q * spec.num_v == 1;
        const std::string kind = one ? kind_pl.substr(0, kind_pl.size() - 1) : kind_pl;
        const std::string intro =
            std::string(one ? "A" : "Some") + " special magic " + kind + (one ? " is" : " are") +
            " hidden within the following text. Make sure to memorize it. I will quiz you about the " + kind +
            " afterwards.\n";
        const std::string question = std::string(one ? "What is" : "What are all") + " the special magic " +
                                     kind + " for " + query + " mentioned in the provided text?";
        const std::string prefix = "The special magic " + kind + " for " + query +
                                   " mentioned in the provided text " + (one ? "is" : "are");

        if (spec.haystack == Haystack::Essay) {
            std::vector<double> depth;
            for (int64_t i : draw.sample(40, static_cast<int64_t>(needle_text.size())))
                depth.push_back(depth_point(static_cast<int>(i)));
            std::sort(depth.begin(), depth.end());
            auto build = [&](int64_t units) {
                const std::vector<std::string>& w = essay_words(static_cast<size_t>(units));
                std::vector<std::string> sentences;
                std::string s;
                for (int64_t i = 0; i < units; ++i) {
                    s += (s.empty() ? "" : " ") + w[static_cast<size_t>(i)];
                    if (ends_sentence(w[static_cast<size_t>(i)]) || i + 1 == units) {
                        sentences.push_back(std::move(s));
                        s.clear();
                    }
                }
                Built b{intro, question, prefix, {}, {}};
                const auto n = static_cast<int64_t>(sentences.size());
                std::vector<std::string> pieces;
                size_t j = 0;
                for (int64_t i = 0; i <= n; ++i) {
                    // The needle of depth d goes before sentence int(n * d / 100): after the last at 100 %.
                    for (; j < needle_text.size() && static_cast<int64_t>(n * depth[j] / 100.0) == i; ++j) {
                        pieces.push_back(needle_text[j]);
                        b.needles.push_back(needle_text[j]);
                        b.depths.push_back(depth[j]);
                    }
                    if (i < n) pieces.push_back(std::move(sentences[static_cast<size_t>(i)]));
                }
                b.context += join(pieces, " ");
                return b;
            };
            fit = fit_units(build, count, 1, budget, budget, too_short("essay word", 1));
        } else {
            // Needle haystack: distractor needles with other keys and values, drawn one stream per line so
            // that a longer haystack extends a shorter one.
            std::vector<std::string> distractors;
            auto build = [&](int64_t units) {
                while (spec.haystack == Haystack::Needle &&
                       static_cast<int64_t>(distractors.size()) < units) {
                    RulerRng r(stream_seed(seed, kDistractors, distractors.size()));
                    std::string key, value;
                    do {
                        key = random_of(spec.key, r);
                        value = random_of(spec.value, r);
                    } while (used_keys.count(key) || used_values.count(value));
                    distractors.push_back("One of the special magic " + kind_pl + " for " + key +
                                          " is: " + value + ".");
                }
                Built b{intro, question, prefix, {}, {}};
                std::vector<std::string> lines;
                if (spec.haystack == Haystack::Noise)
                    lines.assign(static_cast<size_t>(units), kNoise);
                else
                    lines.assign(distractors.begin(), distractors.begin() + units);
                b.context +=
                    place_lines(RulerRng(stream_seed(seed, kPositions, static_cast<uint64_t>(units))), lines,
                                needle_text, b);
                return b;
            };
            const auto n_needles = static_cast<int64_t>(needle_text.size());
            fit = fit_units(
                build, count, n_needles, budget, budget,
                too_short(spec.haystack == Haystack::Noise ? "noise line" : "distractor needle", n_needles));
        }
    } else if (spec.family == Family::Vt) {
        // One chain of kVtHops hops over 5-letter names; the one-shot example has its own chain of 3-letter
        // names and value, on a noise haystack of at most 500 tokens as RULER's example is.
        auto chain_of = [&](int letters, const std::string& value) {
            std::vector<std::string> names;
            std::set<std::string> seen;
            while (static_cast<int>(names.size()) < kVtHops + 1) {
                std::string n = ruler_letters(draw, letters, true);
                if (seen.insert(n).second) names.push_back(n);
            }
            std::vector<std::string> chain = {"VAR " + names[0] + " = " + value};
            for (int j = 0; j < kVtHops; ++j)
                chain.push_back("VAR " + names[j + 1] + " = VAR " + names[j] + " ");
            return std::make_pair(names, chain);
        };
        const std::string value = std::to_string(10000 + draw.below(89999));
        std::string ex_value;
        do {
            ex_value = std::to_string(10000 + draw.below(89999));
        } while (ex_value == value);
        const auto main_chain = chain_of(5, value), ex_chain = chain_of(3, ex_value);
        out.outputs = main_chain.first;
        auto question_of = [](const std::string& v) {
            return "Find all variables that are assigned the value " + v + " in the text above.";
        };
        auto prefix_of = [](const std::string& v) {
            return fmt::format(
                "According to the chain(s) of variable assignment in the text above, {} variables are "
                "assigned the value {}, they are: ",
                kVtHops + 1, v);
        };
        auto body = [&](const std::vector<std::string>& put, uint64_t purpose, int64_t units, Built& b) {
            const std::vector<std::string> lines(static_cast<size_t>(units), kNoise);
            return place_lines(RulerRng(stream_seed(seed, purpose, static_cast<uint64_t>(units))), lines, put,
                               b);
        };
        auto example = [&](int64_t units) {
            Built b;
            b.context = kVtIntro + body(ex_chain.second, kExample, units, b) +
                        "\nQuestion: " + question_of(ex_value) + " Answer: " + prefix_of(ex_value);
            return b;
        };
        auto example_tokens = [&](const Built& b) {
            return static_cast<int64_t>(tokenizer_.encode(b.context, false).size());
        };
        const Fit ex = fit_units(example, example_tokens, kVtHops + 1, 500, 500, [](int64_t t) {
            return fmt::format("internal: the variable tracking example takes {} tokens, over 500", t);
        });
        const std::string shot = ex.built.context + " " + join(ex_chain.first, " ") + "\n\n";
        auto build = [&](int64_t units) {
            Built b{shot + kVtIntro, question_of(value), prefix_of(value), {}, {}};
            b.context += body(main_chain.second, kPositions, units, b);
            return b;
        };
        fit = fit_units(build, count, kVtHops + 1, budget, budget, too_short("noise line", kVtHops + 1));
    } else if (spec.family == Family::Cwe) {
        // A random order of the word list: the list takes its words from the front (a longer list extends a
        // shorter one), the one-shot example from the back, so the two never share a word.
        std::vector<std::string> pool = words().all_words();
        draw.shuffle(pool);
        const bool small = length < 4096;  // RULER's smaller repeats below 4k
        const int64_t ex_words = small ? 20 : 40;
        const int ex_common = small ? 3 : 10, ex_rare = small ? 1 : 3;
        const int common = small ? 6 : 30, rare = small ? 1 : 3;
        auto listing = [&](int64_t n, const std::vector<std::string>::const_iterator from, int fc, int fu,
                           RulerRng rng) {
            std::vector<std::string> list;
            for (int64_t i = 0; i < n; ++i)
                list.insert(list.end(), i < kCommonWords ? fc : fu, from[static_cast<ptrdiff_t>(i)]);
            rng.shuffle(list);
            return numbered(list);
        };
        const auto ex_from = pool.cend() - ex_words;
        const std::string shot =
            std::string(kCweIntro) +
            listing(ex_words, ex_from, ex_common, ex_rare, RulerRng(stream_seed(seed, kExampleShuffle))) +
            "\nQuestion: " + kCweQuestion + " Answer: " + kCwePrefix + " " +
            numbered({ex_from, ex_from + kCommonWords}) + "\n";
        out.outputs.assign(pool.begin(), pool.begin() + kCommonWords);
        auto build = [&](int64_t units) {
            Built b{shot + kCweIntro, kCweQuestion, kCwePrefix, {}, {}};
            b.context += listing(units, pool.cbegin(), common, rare,
                                 RulerRng(stream_seed(seed, kShuffle, static_cast<uint64_t>(units))));
            return b;
        };
        const auto max_units = static_cast<int64_t>(pool.size()) - ex_words;
        fit = fit_units(build, count, kCommonWords, max_units, budget, too_short("list word", kCommonWords));
        if (fit.at_max)
            throw Error(
                fmt::format("RULER cwe at length {} needs more than the {} distinct words of the word list",
                            length, max_units));
    } else {
        // Coded words with Zipf counts floor(N k^-2 / zeta(2)); the top rank is "..." (noise), the answer is
        // ranks 2-4. RULER's vocabulary: one word per 50 tokens of the prompt budget.
        const int64_t vocab_size = budget / 50;
        if (vocab_size < 5)
            throw Error(
                fmt::format("RULER fwe at length {} is too short: its vocabulary of (length - {}) / 50 = {} "
                            "coded words needs at least 5",
                            length, out.max_new_tokens, vocab_size));
        std::vector<std::string> vocab;
        std::set<std::string> seen;
        while (static_cast<int64_t>(vocab.size()) < vocab_size) {
            std::string w = ruler_letters(draw, 6, false);
            if (seen.insert(w).second) vocab.push_back(w);
        }
        vocab[0] = "...";
        out.outputs.assign(vocab.begin() + 1, vocab.begin() + 4);
        auto counts = [&](int64_t n) {
            std::vector<int64_t> c;
            for (int64_t k = 1; k <= vocab_size; ++k)
                c.push_back(static_cast<int64_t>(static_cast<double>(n) *
                                                 std::pow(static_cast<double>(k), -2.0) / kZeta2));
            return c;
        };
        // The smallest N at which rank 4 outnumbers rank 5, so that the answer is well defined (RULER's
        // lengths never come near it; ours would only at a few hundred tokens).
        int64_t min_n = 1;
        while (true) {
            const std::vector<int64_t> c = counts(min_n);
            if (c[3] > c[4]) break;
            ++min_n;
        }
        auto build = [&](int64_t n) {
            const std::vector<int64_t> c = counts(n);
            std::vector<std::string> text;
            for (size_t k = 0; k < c.size(); ++k)
                text.insert(text.end(), static_cast<size_t>(c[k]), vocab[k]);
            RulerRng(stream_seed(seed, kShuffle, static_cast<uint64_t>(n))).shuffle(text);
            return Built{kFweIntro + join(text, " "), kFweQuestion, kFwePrefix, {}, {}};
        };
        fit = fit_units(build, count, min_n, std::max(min_n, budget * 4), budget,
                        too_short("coded word", min_n));
    }

    out.context = std::move(fit.built.context);
    out.question = std::move(fit.built.question);
    out.answer_prefix = std::move(fit.built.prefix);
    out.needles = std::move(fit.built.needles);
    out.depths = std::move(fit.built.depths);
    out.prompt_tokens = fit.tokens;
    out.haystack_units = fit.units;
    return out;
}

std::string ruler_postprocess(const std::string& prediction) {
    std::string s = prediction;
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20) c = '\n';
    // Python's strip() also removes Unicode blanks at the ends; a reference that occurs in the text occurs in
    // it with or without them, so the ASCII ones are enough for the scores.
    const size_t b = s.find_first_not_of(" \n");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \n") - b + 1);
}

double ruler_string_match_all(const std::string& prediction, const std::vector<std::string>& references) {
    if (references.empty()) throw Error("string_match_all: the sample has no references");
    const std::string p = lower(prediction);
    int found = 0;
    for (const std::string& r : references) found += p.find(lower(r)) != std::string::npos;
    return 100.0 * found / static_cast<double>(references.size());
}

double ruler_string_match_part(const std::string& prediction, const std::vector<std::string>& references) {
    if (references.empty()) throw Error("string_match_part: the sample has no references");
    const std::string p = lower(prediction);
    for (const std::string& r : references)
        if (p.find(lower(r)) != std::string::npos) return 100.0;
    return 0.0;
}

double ruler_score(const RulerSample& sample, const std::string& prediction) {
    const std::string p = ruler_postprocess(prediction);
    return sample.metric == RulerMetric::StringMatchAll ? ruler_string_match_all(p, sample.outputs)
                                                        : ruler_string_match_part(p, sample.outputs);
}

}  // namespace varrate

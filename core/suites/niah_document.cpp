#include "core/suites/niah_document.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "base/error.h"
#include "base/hash.h"
#include "core/prompt.h"
#include "core/suites/demo_corpus.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

// Independent seeds for the needles and the filler of one sample.
uint64_t sample_seed(uint64_t seed, int64_t sample, uint64_t purpose) {
    return splitmix64(splitmix64(splitmix64(seed) + static_cast<uint64_t>(sample)) + purpose);
}

// The needles' seed of one document. Fixed: per sample only (the paper's protocol; the formula documents
// of earlier sweeps were made with, so it must not change). Fresh: the length and the depth enter too, so
// every document draws its own needles (RULER).
uint64_t needle_seed(const NiahDocOptions& o, int64_t length, double depth_percent, int64_t sample) {
    const uint64_t per_sample = sample_seed(o.seed, sample, 1);
    if (o.needles == NeedleProtocol::Fixed) return per_sample;
    // Depths are percents with a few decimals at most: micro-percent steps tell every usable depth apart.
    const auto depth = static_cast<uint64_t>(std::llround(depth_percent * 1e6));
    return mix_seed(mix_seed(per_sample, static_cast<uint64_t>(length)), depth);
}

// Uniform in [0, 1) from the top 53 bits: the same on every standard library (unlike the distributions).
double unit_double(std::mt19937_64& rng) {
    return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool is_utf8_boundary(const std::string& s, size_t i) {
    return i >= s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
}

}  // namespace

std::string to_string(NeedleProtocol p) {
    return p == NeedleProtocol::Fresh ? "fresh" : "fixed";
}

NeedleProtocol parse_needle_protocol(const std::string& s) {
    if (s == "fresh") return NeedleProtocol::Fresh;
    if (s == "fixed") return NeedleProtocol::Fixed;
    throw Error("--needles: unknown protocol '" + s +
                "' (use fresh: new needles in every document, or fixed: a sample's needles at every length "
                "and depth)");
}

// A sample's haystack text, long enough for the longest context asked so far, with its cut points and a
// cache of prefix token counts (a prefix's tokens do not change when the stream grows).
struct NiahGenerator::Stream {
    std::string text;
    std::unique_ptr<DemoTextGenerator> filler;  // null for a file haystack
    std::string file_text;
    std::vector<size_t> sentence_ends;  // just after a '.' that is followed by whitespace
    std::vector<size_t> word_cuts;      // end of a word: the next character is whitespace
    int64_t tokens = 0;                 // of the whole text
    std::unordered_map<size_t, int64_t> prefix_tokens;

    void index() {
        sentence_ends.clear();
        word_cuts.clear();
        for (size_t i = 1; i < text.size(); ++i) {
            if (!is_space(text[i]) || is_space(text[i - 1])) continue;
            word_cuts.push_back(i);
            if (text[i - 1] == '.') sentence_ends.push_back(i);
        }
    }
};

NiahGenerator::NiahGenerator(const Tokenizer& tokenizer, NiahDocOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
    if (options_.distractors < 0) throw Error("--distractors must not be negative");
    const auto b = options_.haystack_text.find_first_not_of(" \t\r\n");
    const auto e = options_.haystack_text.find_last_not_of(" \t\r\n");
    options_.haystack_text = b == std::string::npos ? "" : options_.haystack_text.substr(b, e - b + 1);
}

NiahGenerator::~NiahGenerator() = default;

NiahGenerator::Stream& NiahGenerator::stream_for(int64_t sample, int64_t min_tokens) {
    const bool file = !options_.haystack_text.empty();
    const int64_t key = file ? -1 : sample;  // a file haystack is the same text for every sample
    auto& slot = streams_[key];
    if (!slot) {
        slot = std::make_unique<Stream>();
        if (file)
            slot->file_text = options_.haystack_text;
        else
            slot->filler = std::make_unique<DemoTextGenerator>(sample_seed(options_.seed, sample, 2));
    }
    Stream& s = *slot;
    if (s.tokens >= min_tokens) return s;
    size_t want_chars = std::max<size_t>(s.text.size() * 3 / 2, static_cast<size_t>(min_tokens) * 6 + 256);
    while (true) {
        while (s.text.size() < want_chars) {
            if (s.filler) {
                if (!s.text.empty()) s.text += ' ';
                s.text += s.filler->filler_sentence();
            } else {
                if (!s.text.empty()) s.text += "\n\n";
                s.text += s.file_text;
            }
        }
        s.tokens = static_cast<int64_t>(tokenizer_.encode(s.text, false).size());
        if (s.tokens >= min_tokens) break;
        want_chars = want_chars * 3 / 2 + 1;
    }
    s.index();
    return s;
}

namespace {

struct Insertion {
    double fraction = 0;  // of the haystack's tokens
    std::string sentence;
    size_t pos = 0;  // character position in the stream (0 or a sentence end)
};

// Everything one generate() call needs: counts of the stream's prefixes and of whole contexts.
class Layout {
  public:
    Layout(const Tokenizer& tok, const std::string& text, std::unordered_map<size_t, int64_t>& cache,
           const std::vector<size_t>& sentence_ends, const std::vector<size_t>& word_cuts,
           const std::string& question, bool chat)
        : tok_(tok),
          text_(text),
          cache_(cache),
          sentence_ends_(sentence_ends),
          word_cuts_(word_cuts),
          question_(question),
          chat_(chat) {}

    int64_t prefix_tokens(size_t q) {
        if (q == 0) return 0;
        auto it = cache_.find(q);
        if (it != cache_.end()) return it->second;
        const int64_t n = static_cast<int64_t>(tok_.encode(std::string_view(text_.data(), q), false).size());
        cache_.emplace(q, n);
        return n;
    }

    // Haystack [0, cut) with the insertions (sorted by position) placed after their sentence ends.
    std::string assemble(size_t cut, const std::vector<Insertion>& ins, size_t* main_offset) const {
        std::string out;
        out.reserve(cut + 256);
        size_t prev = 0;
        for (size_t i = 0; i < ins.size(); ++i) {
            out.append(text_, prev, ins[i].pos - prev);
            if (ins[i].pos == 0 && (i == 0 || ins[i - 1].pos == 0)) {
                if (main_offset && ins[i].fraction < 0) *main_offset = out.size();
                out += ins[i].sentence + " ";
            } else {
                out += ' ';
                if (main_offset && ins[i].fraction < 0) *main_offset = out.size();
                out += ins[i].sentence;
            }
            prev = ins[i].pos;
        }
        out.append(text_, prev, cut - prev);
        return out;
    }

    int64_t context_tokens(size_t cut, const std::vector<Insertion>& ins) {
        const std::string ctx = assemble(cut, ins, nullptr);
        return static_cast<int64_t>(build_prompt(tok_, ctx, question_, chat_).context_ids.size());
    }

    // The last sentence end in [0, cut] whose prefix has at most `fraction` of the haystack's tokens.
    size_t position(size_t cut, double fraction) {
        const int64_t limit =
            static_cast<int64_t>(std::floor(static_cast<double>(prefix_tokens(cut)) * fraction + 1e-9));
        size_t lo = 0,
               hi = static_cast<size_t>(std::upper_bound(sentence_ends_.begin(), sentence_ends_.end(), cut) -
                                        sentence_ends_.begin());
        // Find the count of leading sentence ends whose prefix fits (prefix counts grow with the position).
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (prefix_tokens(sentence_ends_[mid]) <= limit)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo == 0 ? 0 : sentence_ends_[lo - 1];
    }

    // A cut at or after `min_cut` whose context has exactly `target` tokens: the last word end that does not
    // exceed it, then single characters of the next words.
    size_t exact_cut(int64_t target, size_t min_cut, const std::vector<Insertion>& ins, bool* too_short) {
        *too_short = false;
        size_t lo = static_cast<size_t>(
            std::lower_bound(word_cuts_.begin(), word_cuts_.end(), std::max<size_t>(min_cut, 1)) -
            word_cuts_.begin());
        size_t hi = word_cuts_.size();
        if (lo >= hi || context_tokens(word_cuts_[lo], ins) > target) {
            *too_short = true;
            return 0;
        }
        // Invariant: word_cuts_[lo] fits; the answer lies in [lo, hi).
        while (hi - lo > 1) {
            const size_t mid = (lo + hi) / 2;
            if (context_tokens(word_cuts_[mid], ins) <= target)
                lo = mid;
            else
                hi = mid;
        }
        if (context_tokens(word_cuts_[lo], ins) == target) return word_cuts_[lo];
        // Character by character around that word end, nearest first after it.
        const size_t from = word_cuts_[lo >= 2 ? lo - 2 : 0];
        const size_t to = lo + 3 < word_cuts_.size() ? word_cuts_[lo + 3] : text_.size();
        std::vector<size_t> order;
        for (size_t c = word_cuts_[lo] + 1; c < to; ++c) order.push_back(c);
        for (size_t c = word_cuts_[lo]; c-- > from;) order.push_back(c);
        for (size_t c : order) {
            if (c < std::max<size_t>(min_cut, 1) || !is_utf8_boundary(text_, c)) continue;
            if (context_tokens(c, ins) == target) return c;
        }
        throw Error(fmt::format("cannot cut the haystack to a context of exactly {} tokens", target));
    }

  private:
    const Tokenizer& tok_;
    const std::string& text_;
    std::unordered_map<size_t, int64_t>& cache_;
    const std::vector<size_t>& sentence_ends_;
    const std::vector<size_t>& word_cuts_;
    const std::string& question_;
    bool chat_;
};

}  // namespace

NiahDocument NiahGenerator::generate(int64_t context_length, double depth_percent, int64_t sample) {
    if (context_length < 1) throw Error(fmt::format("context length {} must be positive", context_length));
    if (!(depth_percent >= 0 && depth_percent <= 100))
        throw Error(fmt::format("depth {} must be between 0 and 100 percent", depth_percent));
    if (sample < 0) throw Error("sample index must not be negative");
    if (static_cast<size_t>(options_.distractors) + 1 > DemoTextGenerator::keys().size())
        throw Error(fmt::format("--distractors {}: there are only {} needle keys", options_.distractors,
                                DemoTextGenerator::keys().size()));

    // Needles first, from their own seed (see needle_seed): the filler does not depend on them.
    DemoTextGenerator needles(needle_seed(options_, context_length, depth_percent, sample));
    const Needle main = needles.needle();
    std::vector<std::string> used = {main.key};
    std::vector<Insertion> ins;
    ins.push_back({-1, main.sentence(), 0});  // fraction < 0 marks the main needle while sorting
    NiahDocument doc;
    doc.question = DemoTextGenerator::question(main.key);
    doc.answer_prefix = DemoTextGenerator::answer_prefix(main.key);
    doc.expected = main.value;
    doc.needle = main.sentence();
    std::vector<double> fractions = {depth_percent / 100.0};
    for (int64_t i = 0; i < options_.distractors; ++i) {
        const Needle d = needles.needle(used);
        used.push_back(d.key);
        doc.distractor_needles.push_back(d.sentence());
        ins.push_back({0, d.sentence(), 0});
    }
    for (int64_t i = 0; i < options_.distractors; ++i) fractions.push_back(unit_double(needles.rng()));

    Stream& s = stream_for(sample, context_length + 32);
    Layout layout(tokenizer_, s.text, s.prefix_tokens, s.sentence_ends, s.word_cuts, doc.question,
                  options_.chat);
    auto place = [&](size_t cut) {
        for (size_t i = 0; i < ins.size(); ++i) ins[i].pos = layout.position(cut, fractions[i]);
    };
    auto sorted = [&]() {
        std::vector<Insertion> v = ins;
        std::stable_sort(v.begin(), v.end(),
                         [](const Insertion& a, const Insertion& b) { return a.pos < b.pos; });
        return v;
    };
    auto max_pos = [&]() {
        size_t m = 0;
        for (const auto& i : ins) m = std::max(m, i.pos);
        return m;
    };

    // The positions depend on the haystack's length and the length on the positions: start with every
    // needle at the beginning, then alternate until the layout is stable (it is after one or two rounds).
    bool too_short = false;
    size_t cut = layout.exact_cut(context_length, 0, sorted(), &too_short);
    if (too_short)
        throw Error(
            fmt::format("context length {} is too short: the prompt and the needle{} alone take {} tokens",
                        context_length, options_.distractors > 0 ? "s" : "",
                        layout.context_tokens(s.word_cuts.empty() ? 1 : s.word_cuts.front(), sorted())));
    for (int round = 0; round < 6; ++round) {
        std::vector<size_t> before;
        for (const auto& i : ins) before.push_back(i.pos);
        place(cut);
        bool same = true;
        for (size_t i = 0; i < ins.size(); ++i) same = same && ins[i].pos == before[i];
        if (same) break;
        cut = layout.exact_cut(context_length, max_pos(), sorted(), &too_short);
        if (too_short) {
            // Moving the needles later made the context too long: keep the earlier positions.
            for (size_t i = 0; i < ins.size(); ++i) ins[i].pos = before[i];
            cut = layout.exact_cut(context_length, max_pos(), sorted(), &too_short);
            break;
        }
    }
    if (too_short) throw Error(fmt::format("cannot build a context of exactly {} tokens", context_length));
    const std::vector<Insertion> final_ins = sorted();
    doc.context = layout.assemble(cut, final_ins, &doc.needle_char_offset);
    doc.context_tokens = layout.context_tokens(cut, final_ins);
    doc.haystack_tokens = layout.prefix_tokens(cut);
    doc.needle_token_offset = layout.prefix_tokens(ins[0].pos);
    if (doc.context_tokens != context_length)
        throw Error(
            fmt::format("internal: context of {} tokens, wanted {}", doc.context_tokens, context_length));
    return doc;
}

}  // namespace varrate

#include "core/niah.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "codec/registry.h"
#include "core/demo_corpus.h"
#include "core/base/error.h"
#include "core/base/file_io.h"
#include "core/base/hash.h"
#include "core/needle_probe.h"
#include "core/prompt.h"
#include "models/tokenizer.h"

namespace varrate {

namespace {

// Independent seeds for the needles and the filler of one sample.
uint64_t sample_seed(uint64_t seed, int64_t sample, uint64_t purpose) {
    return splitmix64(splitmix64(splitmix64(seed) + static_cast<uint64_t>(sample)) + purpose);
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

std::string depth_label(double depth) {
    return fmt::format("{:g}", depth);
}

}  // namespace

// ---- generator --------------------------------------------------------------------------------------

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

    // Needles first, from their own seed: the same needle set at every length and depth.
    DemoTextGenerator needles(sample_seed(options_.seed, sample, 1));
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

// ---- sweep ------------------------------------------------------------------------------------------

std::filesystem::path niah_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       int64_t length, double depth_percent, int64_t sample) {
    return out_dir / "records" / method /
           fmt::format("L{}_D{}_S{}.json", length, depth_label(depth_percent), sample);
}

namespace {

using Clock = std::chrono::steady_clock;

std::string utc_timestamp() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

void validate(const NiahSweepOptions& o) {
    if (o.lengths.empty()) throw Error("--lengths: no context length given");
    for (int64_t l : o.lengths)
        if (l < 1) throw Error(fmt::format("--lengths: {} is not a positive token count", l));
    if (o.depths.empty()) throw Error("--depths: no depth given");
    for (double d : o.depths)
        if (!(d >= 0 && d <= 100)) throw Error(fmt::format("--depths: {} is not between 0 and 100", d));
    if (o.samples < 1) throw Error("--samples must be at least 1");
    if (o.methods.empty()) throw Error("--methods: no method named");
    for (const auto& m : o.methods) method_needs_basis(m);  // throws for an unknown name
    if (o.out_dir.empty()) throw Error("--out: no output directory given");
    if (o.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
}

// What makes two records comparable: a record written under a different identity is not reused.
nlohmann::json sweep_identity(const Session& s, const NiahSweepOptions& o) {
    return {{"model_fingerprint", s.fingerprint()},
            {"mode", to_string(o.mode)},
            {"settings",
             {{"budget", o.settings.budget},
              {"r_min", o.settings.r_min},
              {"rank", o.settings.rank},
              {"stride", o.settings.stride},
              {"anchors", o.settings.anchors},
              {"window", o.settings.window},
              {"obs_window", o.settings.obs_window},
              {"pool_kernel", o.settings.pool_kernel},
              {"paper_accounting", o.settings.paper_accounting}}},
            {"basis", s.basis() ? s.basis_source() : "self-calibrated"},
            {"seed", o.doc.seed},
            {"haystack", o.haystack_name},
            {"haystack_hash", fmt::format("{:016x}", fnv1a(o.doc.haystack_text, kFingerprintSeed))},
            {"distractors", o.doc.distractors},
            {"chat", o.doc.chat},
            {"max_new_tokens", o.max_new_tokens}};
}

void check_same_sweep(const nlohmann::json& record, const nlohmann::json& identity,
                      const std::filesystem::path& where) {
    if (!record.is_object() || !record.contains("sweep") || !record["sweep"].is_object())
        throw Error(where.string() + ": not a needle-in-a-haystack record (no \"sweep\" object)");
    const nlohmann::json& theirs = record["sweep"];
    for (const auto& [key, value] : identity.items()) {
        if (!theirs.contains(key) || theirs[key] != value)
            throw Error(fmt::format(
                "{}: written by a different sweep ({} was {}, now {}); use another --out or "
                "remove the old records",
                where.string(), key, theirs.contains(key) ? theirs[key].dump() : "absent", value.dump()));
    }
}

// The asked needle's value tokens and, together, the distractors' ones: what the method kept of each.
nlohmann::json retention_json(const Tokenizer& tok, const MethodRun& run, const NiahDocument& doc) {
    auto measure = [&](const std::vector<std::string>& sentences) -> nlohmann::json {
        std::vector<int64_t> positions;
        for (const std::string& sentence : sentences) {
            const auto found = find_needle_value_tokens(tok, run.context_ids, sentence);
            if (!found) return nullptr;
            positions.insert(positions.end(), found->begin(), found->end());
        }
        const auto r = needle_retention(run.layers, positions);
        return r ? to_json(*r) : nlohmann::json();
    };
    nlohmann::json j = {{"needle", measure({doc.needle})}};
    if (!doc.distractor_needles.empty()) j["distractors"] = measure(doc.distractor_needles);
    return j;
}

std::string model_name(const Session& s) {
    std::filesystem::path dir = s.model_dir();
    if (dir.filename().empty()) dir = dir.parent_path();
    return dir.filename().string();
}

}  // namespace

NiahSweepStats run_niah_sweep(const Session& session, const NiahSweepOptions& o, const JobControl& job,
                              const NiahProgressFn& on_progress) {
    validate(o);
    const int64_t max_pos = session.model().config().max_position_embeddings;
    for (int64_t l : o.lengths)
        if (max_pos > 0 && l + o.max_new_tokens > max_pos)
            spdlog::warn("context length {} + {} answer tokens exceeds the model's {} positions", l,
                         o.max_new_tokens, max_pos);
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir / "records", ec);
    for (const auto& m : o.methods) std::filesystem::create_directories(o.out_dir / "records" / m, ec);
    if (ec) throw Error(o.out_dir.string() + ": cannot create the records directory: " + ec.message());
    const nlohmann::json identity = sweep_identity(session, o);

    struct Cell {
        int64_t length;
        double depth;
        int64_t sample;
        std::vector<std::string> missing;
    };
    NiahSweepStats stats;
    std::vector<Cell> cells;
    for (int64_t length : o.lengths)
        for (double depth : o.depths)
            for (int64_t sample = 0; sample < o.samples; ++sample) {
                Cell cell{length, depth, sample, {}};
                for (const auto& m : o.methods) {
                    ++stats.total;
                    const auto path = niah_record_path(o.out_dir, m, length, depth, sample);
                    if (std::filesystem::exists(path)) {
                        check_same_sweep(read_json_file(path), identity, path);
                        ++stats.skipped;
                    } else {
                        cell.missing.push_back(m);
                    }
                }
                if (!cell.missing.empty()) cells.push_back(std::move(cell));
            }

    NiahProgress progress;
    progress.total = stats.total;
    progress.skipped = stats.skipped;
    progress.done = stats.skipped;
    const auto t_start = Clock::now();
    auto report = [&]() {
        progress.elapsed_s = std::chrono::duration<double>(Clock::now() - t_start).count();
        const int64_t left = progress.total - progress.done;
        progress.eta_s = progress.computed > 0 ? progress.elapsed_s / static_cast<double>(progress.computed) *
                                                     static_cast<double>(left)
                                               : (left == 0 ? 0 : -1);
        if (on_progress) on_progress(progress);
    };
    report();

    NiahGenerator generator(session.tokenizer(), o.doc);
    const std::string model = model_name(session);
    for (const Cell& cell : cells) {
        check_cancel(job);
        progress.cell =
            fmt::format("L={} depth={}% sample={}", cell.length, depth_label(cell.depth), cell.sample);
        progress.stage = "generate";
        progress.stage_done = progress.stage_total = 0;
        report();
        const NiahDocument doc = generator.generate(cell.length, cell.depth, cell.sample);

        CompareRequest req;
        req.context = doc.context;
        req.questions = {doc.question};
        req.answers = {doc.expected};
        req.answer_prefixes = {doc.answer_prefix};
        req.methods = cell.missing;
        req.settings = o.settings;
        req.mode = o.mode;
        req.max_new_tokens = o.max_new_tokens;
        req.chat = o.doc.chat;
        req.skip_infeasible = true;
        JobControl inner;
        inner.cancel = job.cancel;
        inner.progress = [&](const std::string& stage, int64_t done, int64_t total) {
            progress.stage = stage;
            progress.stage_done = done;
            progress.stage_total = total;
            report();
        };
        const auto t0 = Clock::now();
        const CompareResult result = run_compare(session, req, inner);
        const double compare_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        ++stats.documents;

        for (const MethodRun& run : result.runs) {
            nlohmann::json r;
            r["model"] = model;
            r["method"] = run.method;
            r["budget"] = run.budget;
            r["mode"] = to_string(o.mode);
            r["context_length"] = cell.length;
            r["depth_percent"] = cell.depth;
            r["sample"] = cell.sample;
            r["needle"] = doc.needle;
            r["question"] = doc.question;
            r["answer_prefix"] = doc.answer_prefix;
            r["expected"] = doc.expected;
            r["response"] = run.answers.empty() ? "" : run.answers[0];
            if (run.infeasible.empty())
                r["correct"] = !run.correct.empty() && run.correct[0] != 0;
            else
                r["infeasible"] = run.infeasible;  // not counted in the accuracy
            r["distractor_needles"] = doc.distractor_needles;
            r["context_tokens"] = doc.context_tokens;
            // What the method compressed: the context, plus the question in query-aware mode.
            r["compressed_tokens"] = static_cast<int64_t>(run.context_ids.size());
            r["haystack_tokens"] = doc.haystack_tokens;
            r["needle_token_offset"] = doc.needle_token_offset;
            r["footprint_fraction"] = run.footprint_fraction;
            if (run.infeasible.empty()) r["needle_retention"] = retention_json(session.tokenizer(), run, doc);
            r["self_calibrated"] = run.self_calibrated;
            r["durations"] = {{"prefill_ms", run.prefill_ms},
                              {"compress_ms", run.compress_ms},
                              {"document_ms", compare_ms},
                              {"methods_in_document", static_cast<int64_t>(result.runs.size())}};
            r["timestamp"] = utc_timestamp();
            r["sweep"] = identity;
            write_file_atomic(niah_record_path(o.out_dir, run.method, cell.length, cell.depth, cell.sample),
                              r.dump(2) + "\n");
            ++stats.computed;
            ++progress.computed;
            ++progress.done;
        }
        progress.stage.clear();
        progress.stage_done = progress.stage_total = 0;
        report();
        if (job.progress) job.progress("niah", progress.done, progress.total);
    }
    return stats;
}

// ---- summary ----------------------------------------------------------------------------------------

const NiahCell& NiahSummary::cell(size_t method, size_t depth, size_t length) const {
    return cells.at((method * depths.size() + depth) * lengths.size() + length);
}

NiahSummary summarize_niah(const NiahSweepOptions& o) {
    NiahSummary s;
    s.mode = to_string(o.mode);
    s.budget = o.settings.budget;
    s.methods = o.methods;
    s.lengths = o.lengths;
    s.depths = o.depths;
    s.samples = o.samples;
    for (const auto& m : o.methods)
        for (double depth : o.depths)
            for (int64_t length : o.lengths) {
                NiahCell c;
                c.method = m;
                c.context_length = length;
                c.depth_percent = depth;
                for (int64_t sample = 0; sample < o.samples; ++sample) {
                    const auto path = niah_record_path(o.out_dir, m, length, depth, sample);
                    if (!std::filesystem::exists(path)) continue;
                    const nlohmann::json r = read_json_file(path);
                    if (r.contains("infeasible") && r["infeasible"].is_string()) {
                        ++c.infeasible;
                        continue;
                    }
                    if (!r.contains("correct") || !r["correct"].is_boolean())
                        throw Error(path.string() + ": record has no boolean \"correct\"");
                    if (s.model.empty() && r.contains("model") && r["model"].is_string())
                        s.model = r["model"].get<std::string>();
                    ++c.n;
                    const bool correct = r["correct"].get<bool>();
                    c.correct += correct ? 1 : 0;
                    if (r.contains("needle_retention") && r["needle_retention"].is_object()) {
                        const nlohmann::json& kept = r["needle_retention"];
                        NiahRetention& t = s.retention[m];
                        (correct ? t.needle_correct : t.needle_wrong)
                            .add(kept.value("needle", nlohmann::json()));
                        t.distractors.add(kept.value("distractors", nlohmann::json()));
                    }
                }
                s.cells.push_back(c);
            }
    return s;
}

nlohmann::json to_json(const NiahSummary& s) {
    nlohmann::json j;
    j["model"] = s.model;
    j["mode"] = s.mode;
    j["budget"] = s.budget;
    j["methods"] = s.methods;
    j["lengths"] = s.lengths;
    j["depths"] = s.depths;
    j["samples"] = s.samples;
    // accuracy[method][length][depth], null where no record exists yet.
    nlohmann::json acc = nlohmann::json::object();
    nlohmann::json overall = nlohmann::json::object();
    for (size_t m = 0; m < s.methods.size(); ++m) {
        nlohmann::json per_length = nlohmann::json::object();
        int64_t n = 0, correct = 0;
        for (size_t l = 0; l < s.lengths.size(); ++l) {
            nlohmann::json per_depth = nlohmann::json::object();
            for (size_t d = 0; d < s.depths.size(); ++d) {
                const NiahCell& c = s.cell(m, d, l);
                per_depth[depth_label(s.depths[d])] =
                    c.n > 0 ? nlohmann::json(c.accuracy()) : nlohmann::json();
                n += c.n;
                correct += c.correct;
            }
            per_length[std::to_string(s.lengths[l])] = std::move(per_depth);
        }
        acc[s.methods[m]] = std::move(per_length);
        overall[s.methods[m]] = {
            {"n", n},
            {"correct", correct},
            {"accuracy", n > 0 ? nlohmann::json(static_cast<double>(correct) / n) : nlohmann::json()}};
    }
    j["accuracy"] = std::move(acc);
    j["overall"] = std::move(overall);
    nlohmann::json cells = nlohmann::json::array();
    for (const NiahCell& c : s.cells)
        cells.push_back({{"method", c.method},
                         {"context_length", c.context_length},
                         {"depth_percent", c.depth_percent},
                         {"n", c.n},
                         {"correct", c.correct},
                         {"infeasible", c.infeasible},
                         {"accuracy", c.n > 0 ? nlohmann::json(c.accuracy()) : nlohmann::json()}});
    j["cells"] = std::move(cells);
    nlohmann::json retention = nlohmann::json::object();
    for (const auto& [method, t] : s.retention) {
        RetentionTally all = t.needle_correct;
        all.merge(t.needle_wrong);
        retention[method] = {{"needle",
                              {{"all", all.to_json()},
                               {"correct", t.needle_correct.to_json()},
                               {"wrong", t.needle_wrong.to_json()}}},
                             {"distractors", t.distractors.to_json()}};
    }
    // Means over the records of what each method kept of the needle's value (core/needle_probe.h).
    j["needle_retention"] = std::move(retention);
    return j;
}

std::string summary_csv(const NiahSummary& s) {
    std::ostringstream out;
    out << "method,context_length,depth_percent,n,correct,accuracy,infeasible\n";
    for (const NiahCell& c : s.cells) {
        out << c.method << ',' << c.context_length << ',' << depth_label(c.depth_percent) << ',' << c.n << ','
            << c.correct << ',' << (c.n > 0 ? fmt::format("{:.6g}", c.accuracy()) : "") << ',' << c.infeasible
            << '\n';
    }
    return out.str();
}

void write_niah_summary(const NiahSummary& s, const std::filesystem::path& out_dir) {
    write_file_atomic(out_dir / "summary.json", to_json(s).dump(2) + "\n");
    write_file_atomic(out_dir / "summary.csv", summary_csv(s));
}

}  // namespace varrate

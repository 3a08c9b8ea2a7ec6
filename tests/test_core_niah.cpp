// Needle in a haystack: the generator (exact token length, needle at the previous sentence end of its depth,
// determinism, distractors, file haystacks, chat prompts) and the sweep (records, summary, resumability,
// cancellation), through the library and through `varrate niah`.
#include "tests/test_support.h"

#include <QProcess>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <signal.h>

#include <ATen/ATen.h>

#include "core/base/error.h"
#include "core/base/file_io.h"
#include "core/compare.h"
#include "core/needle_probe.h"
#include "core/niah.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/device.h"
#include "models/tokenizer.h"

namespace fs = std::filesystem;
using namespace varrate;

using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

int64_t count(const Tokenizer& tok, const std::string& text) {
    return static_cast<int64_t>(tok.encode(text, false).size());
}

// The generator's contract for one document without distractors: exact length as build_prompt tokenizes
// it, the needle right after a sentence end (or at the very start), and that sentence end is the last one
// whose prefix holds at most depth% of the haystack's tokens.
void check_document(const Tokenizer& tok, const NiahDocument& doc, int64_t length, double depth, bool chat) {
    const std::string where = "L=" + std::to_string(length) + " depth=" + std::to_string(depth);
    QVERIFY2(
        static_cast<int64_t>(build_prompt(tok, doc.context, doc.question, chat).context_ids.size()) == length,
        qPrintable(qs(where + ": context is not of the requested token length")));
    QCOMPARE(doc.context_tokens, length);
    QCOMPARE(doc.context.substr(doc.needle_char_offset, doc.needle.size()), doc.needle);
    QVERIFY(doc.needle.find("The special magic number for ") == 0);
    QVERIFY(doc.needle.find(doc.expected + ".") != std::string::npos);
    QVERIFY(doc.question.find("What is the special magic number for ") == 0);

    const size_t off = doc.needle_char_offset;
    std::string hay;
    size_t p = 0;  // where the needle sits in the haystack
    if (off == 0) {
        QCOMPARE(doc.context.substr(doc.needle.size(), 1), std::string(" "));
        hay = doc.context.substr(doc.needle.size() + 1);
    } else {
        QVERIFY2(off >= 2 && doc.context[off - 1] == ' ' && doc.context[off - 2] == '.',
                 qPrintable(qs(where + ": needle not after a sentence end: ..." +
                               doc.context.substr(off >= 20 ? off - 20 : 0, 40))));
        hay = doc.context.substr(0, off - 1) + doc.context.substr(off + doc.needle.size());
        p = off - 1;
    }
    const int64_t n_h = count(tok, hay);
    QCOMPARE(doc.haystack_tokens, n_h);
    const int64_t limit = static_cast<int64_t>(std::floor(static_cast<double>(n_h) * depth / 100.0 + 1e-9));
    if (p > 0) {
        QVERIFY2(count(tok, hay.substr(0, p)) <= limit, qPrintable(qs(where + ": needle after its depth")));
        QVERIFY(p < hay.size() ? is_space(hay[p]) : true);
    }
    // The next sentence end is beyond the depth: the needle was stepped back to the previous one only.
    for (size_t q = p + 1; q < hay.size(); ++q) {
        if (hay[q - 1] == '.' && is_space(hay[q])) {
            QVERIFY2(count(tok, hay.substr(0, q)) > limit,
                     qPrintable(qs(where + ": a later sentence end also fits the depth")));
            break;
        }
    }
}

NiahSweepOptions tiny_sweep(const fs::path& out) {
    NiahSweepOptions o;
    o.lengths = {200};
    o.depths = {0, 100};
    o.samples = 1;
    o.methods = {"full", "snapkv"};
    o.settings.window = 16;
    o.settings.obs_window = 16;
    o.max_new_tokens = 12;
    o.out_dir = out;
    return o;
}

std::map<std::string, std::string> read_records(const fs::path& out) {
    std::map<std::string, std::string> files;
    if (!fs::exists(out / "records")) return files;
    for (const auto& e : fs::recursive_directory_iterator(out / "records"))
        if (e.is_regular_file()) files[fs::relative(e.path(), out).string()] = read_text_file(e.path());
    return files;
}

const char* kHaystackText =
    "The lighthouse keeper counted the waves every evening. Boats came and went, and the gulls followed "
    "them.\nIn winter the café by the harbour closed early; its owner painted the shutters blue.\n\nNobody "
    "remembered when the old bell was last rung. Children still dared each other to climb the tower.";

}  // namespace

class TestNiah : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void procedural_exact_length_and_sentence_end() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahGenerator gen(tok, NiahDocOptions{});
        for (int64_t length : {48, 97, 128, 200, 311, 450})
            for (double depth : {0.0, 10.0, 33.0, 50.0, 90.0, 100.0}) {
                const NiahDocument doc = gen.generate(length, depth, 0);
                check_document(tok, doc, length, depth, false);
                if (QTest::currentTestFailed()) return;
            }
        // Depth 0 puts the needle first; deep needles sit deep.
        QCOMPARE(gen.generate(300, 0, 0).needle_char_offset, size_t{0});
        const NiahDocument deep = gen.generate(300, 100, 0);
        QVERIFY(deep.needle_token_offset > deep.haystack_tokens * 8 / 10);
        const NiahDocument mid = gen.generate(300, 50, 0);
        QVERIFY(mid.needle_token_offset > mid.haystack_tokens / 4 &&
                mid.needle_token_offset <= mid.haystack_tokens / 2);
    }

    void byte_level_tokenizers_and_chat() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        for (const fs::path& dir : {llama3, qwen3}) {
            const Tokenizer tok = Tokenizer::load(dir);
            for (bool chat : {false, true}) {
                NiahDocOptions opt;
                opt.chat = chat;
                opt.seed = 7;
                NiahGenerator gen(tok, opt);
                for (int64_t length : {90, 257, 1000})
                    for (double depth : {0.0, 25.0, 75.0, 100.0}) {
                        check_document(tok, gen.generate(length, depth, 1), length, depth, chat);
                        if (QTest::currentTestFailed()) return;
                    }
            }
        }
    }

    // The tokens found for a needle's value spell exactly its digits, in every tokenizer family
    // (SentencePiece digits one by one, byte-level BPE in groups of three), for needles and distractors at
    // any depth.
    void needle_value_tokens_spell_the_value() {
        VARRATE_REQUIRE_FIXTURE(stories, "stories260k");
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        for (const fs::path& dir : {stories, llama3, qwen3}) {
            const Tokenizer tok = Tokenizer::load(dir);
            NiahDocOptions opt;
            opt.distractors = 2;
            NiahGenerator gen(tok, opt);
            for (double depth : {0.0, 50.0, 100.0}) {
                const NiahDocument doc = gen.generate(400, depth, 3);
                const std::vector<int64_t> ids =
                    build_prompt(tok, doc.context, doc.question, false).context_ids;
                std::vector<std::string> sentences = doc.distractor_needles;
                sentences.push_back(doc.needle);
                for (const std::string& sentence : sentences) {
                    const auto found = find_needle_value_tokens(tok, ids, sentence);
                    QVERIFY2(found.has_value(), qPrintable(qs(dir.string() + ": not found: " + sentence)));
                    std::string spelled;
                    for (int64_t p : *found) spelled += tok.decode({ids[static_cast<size_t>(p)]});
                    spelled.erase(std::remove(spelled.begin(), spelled.end(), ' '), spelled.end());
                    const std::string value = sentence.substr(sentence.rfind(' ') + 1);
                    QCOMPARE(qs(spelled), qs(value.substr(0, value.size() - 1)));  // without the full stop
                    QVERIFY(std::is_sorted(found->begin(), found->end()));
                    QCOMPARE(found->back() - found->front() + 1, static_cast<int64_t>(found->size()));
                }
            }
            QVERIFY(!find_needle_value_tokens(tok, tok.encode("no needle here", false),
                                              "The special magic number for x is 1234567.")
                         .has_value());
        }
    }

    // Retention averages per layer over the value tokens: error, rank / D, and the salience percentile among
    // the tokens below the observation window's padding maximum.
    void needle_retention_averages() {
        std::vector<LayerDiagnostics> layers(2);
        for (int l = 0; l < 2; ++l) {
            LayerDiagnostics& d = layers[static_cast<size_t>(l)];
            d.dim = 8;
            d.rel_error = at::tensor({0.5f, 0.1f, 0.3f, 0.0f, 0.0f});
            d.rank = at::tensor({int64_t{8}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{8}});
            // Two window tokens padded with the maximum; layer 1 ranks the value tokens lower.
            d.salience = l == 0 ? at::tensor({0.1f, 0.4f, 0.3f, 0.9f, 0.9f})
                                : at::tensor({0.4f, 0.1f, 0.2f, 0.9f, 0.9f});
        }
        layers[1].rel_error = at::tensor({0.5f, 0.5f, 0.7f, 0.0f, 0.0f});
        const auto r = needle_retention(layers, {1, 2});
        QVERIFY(r.has_value());
        QCOMPARE(r->n_tokens, int64_t{2});
        QVERIFY(std::abs(r->layer_rel_error[0] - 0.2) < 1e-6 && std::abs(r->layer_rel_error[1] - 0.6) < 1e-6);
        QVERIFY(std::abs(r->rel_error - 0.4) < 1e-6);
        QCOMPARE(r->kept_fraction, 6.0 / 16.0);
        // Layer 0: 0.4 beats 2 of 3 scored tokens, 0.3 beats 1; layer 1: 0.1 beats none, 0.2 beats 1.
        QVERIFY(std::abs(r->layer_salience_percentile[0] - 0.5) < 1e-9);
        QVERIFY(std::abs(r->layer_salience_percentile[1] - 1.0 / 6.0) < 1e-9);
        QVERIFY(std::abs(r->salience_percentile - (0.5 + 1.0 / 6.0) / 2) < 1e-9);
        // Without salience (full, flat) the percentile is absent; out-of-range positions give nothing.
        for (auto& d : layers) d.salience = at::Tensor();
        QVERIFY(needle_retention(layers, {1})->salience_percentile < 0);
        QVERIFY(!needle_retention(layers, {5}).has_value());
        QVERIFY(!needle_retention(layers, {}).has_value());

        // Tallies count records with a kept fraction and skip the rest, whatever their shape.
        RetentionTally t;
        t.add(nullptr);
        t.add({{"kept_fraction", "high"}});
        t.add({{"kept_fraction", 0.5}, {"per_layer", 3}});
        t.add(to_json(*r));
        QCOMPARE(t.n, int64_t{2});
        QCOMPARE(t.to_json()["kept_fraction"].get<double>(), (0.5 + 6.0 / 16.0) / 2);
        QCOMPARE(t.to_json()["per_layer_kept_fraction"].size(), size_t{2});
    }

    void file_haystack() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahDocOptions opt;
        opt.haystack_text = std::string("\n  ") + kHaystackText + "\n";
        NiahGenerator gen(tok, opt);
        for (int64_t length : {60, 150, 400})
            for (double depth : {0.0, 40.0, 100.0}) {
                const NiahDocument doc = gen.generate(length, depth, 0);
                check_document(tok, doc, length, depth, false);
                if (QTest::currentTestFailed()) return;
            }
        // A short file is repeated (separated by a blank line), starting at its first (trimmed) character.
        const NiahDocument doc = gen.generate(400, 100, 0);
        QVERIFY(doc.context.rfind("The lighthouse keeper counted", 0) == 0);
        QVERIFY(doc.context.find(std::string("tower.\n\nThe lighthouse")) != std::string::npos);
        QVERIFY(doc.context.find("café") != std::string::npos);
    }

    void deterministic_per_seed_and_sample() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahDocOptions opt;
        opt.seed = 1234;
        NiahGenerator a(tok, opt), b(tok, opt);
        const NiahDocument a0 = a.generate(250, 40, 0);
        b.generate(400, 10, 3);  // other calls first must not change what b produces next
        const NiahDocument b0 = b.generate(250, 40, 0);
        QCOMPARE(a0.context, b0.context);
        QCOMPARE(a0.question, b0.question);
        QCOMPARE(a0.expected, b0.expected);
        // The same needle at every length and depth of a sample; another sample or seed differs.
        QCOMPARE(a.generate(120, 90, 0).needle, a0.needle);
        const NiahDocument a1 = a.generate(250, 40, 1);
        QVERIFY(a1.needle != a0.needle);
        QVERIFY(a1.context != a0.context);
        opt.seed = 1235;
        NiahGenerator c(tok, opt);
        QVERIFY(c.generate(250, 40, 0).context != a0.context);
        // A sample's shorter haystack is a prefix of its longer one.
        const std::string short_ctx = a.generate(150, 0, 0).context, long_ctx = a.generate(400, 0, 0).context;
        const size_t common = short_ctx.size() - 20;
        QCOMPARE(short_ctx.substr(0, common), long_ctx.substr(0, common));
    }

    void distractors() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahDocOptions opt;
        opt.distractors = 3;
        NiahGenerator gen(tok, opt);
        for (double depth : {0.0, 50.0, 100.0}) {
            const NiahDocument doc = gen.generate(400, depth, 2);
            QCOMPARE(
                static_cast<int64_t>(build_prompt(tok, doc.context, doc.question, false).context_ids.size()),
                int64_t{400});
            QCOMPARE(doc.distractor_needles.size(), size_t{3});
            QCOMPARE(doc.context.substr(doc.needle_char_offset, doc.needle.size()), doc.needle);
            std::vector<std::string> all = doc.distractor_needles;
            all.push_back(doc.needle);
            std::set<std::string> keys;
            for (const std::string& s : all) {
                const size_t at = doc.context.find(s);
                QVERIFY2(at != std::string::npos, qPrintable(qs("missing needle: " + s)));
                QCOMPARE(doc.context.find(s, at + 1), std::string::npos);
                QVERIFY(at == 0 || doc.context.substr(at - 2, 2) == ". ");
                const std::string prefix = "The special magic number for ";
                keys.insert(s.substr(prefix.size(), s.find(" is ") - prefix.size()));
            }
            QCOMPARE(keys.size(), size_t{4});
            // The question asks about the main needle only.
            const std::string main_key = doc.needle.substr(29, doc.needle.find(" is ") - 29);
            QVERIFY(doc.question.find(main_key + "?") != std::string::npos);
        }
    }

    void bad_requests() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahGenerator gen(tok, NiahDocOptions{});
        QVERIFY_THROWS_EXCEPTION(Error, gen.generate(8, 50, 0));  // shorter than the needle itself
        QVERIFY_THROWS_EXCEPTION(Error, gen.generate(200, 101, 0));
        QVERIFY_THROWS_EXCEPTION(Error, gen.generate(200, -1, 0));
        NiahDocOptions many;
        many.distractors = 100000;
        NiahGenerator g2(tok, many);
        QVERIFY_THROWS_EXCEPTION(Error, g2.generate(200, 50, 0));
    }

    void sweep_records_summary_and_resume() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-sweep");
        const NiahSweepOptions o = tiny_sweep(out);
        int64_t model_stages = 0;
        auto on_progress = [&](const NiahProgress& p) {
            if (!p.stage.empty()) ++model_stages;
            QVERIFY(p.done <= p.total && p.total == 4);
        };
        const NiahSweepStats first = run_niah_sweep(*session, o, {}, on_progress);
        QCOMPARE(first.total, int64_t{4});
        QCOMPARE(first.computed, int64_t{4});
        QCOMPARE(first.skipped, int64_t{0});
        QCOMPARE(first.documents, int64_t{2});  // one run_compare per document, both methods in it
        QVERIFY(model_stages > 0);

        const auto records = read_records(out);
        QCOMPARE(records.size(), size_t{4});
        const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
        std::map<double, std::string> needle_at_depth;
        for (const std::string& m : o.methods)
            for (double depth : o.depths) {
                const fs::path path = niah_record_path(out, m, 200, depth, 0);
                QVERIFY2(fs::exists(path), qPrintable(qs(path.string())));
                const nlohmann::json r = read_json_file(path);
                QCOMPARE(r["model"].get<std::string>(), std::string("stories260k"));
                QCOMPARE(r["method"].get<std::string>(), m);
                QCOMPARE(r["budget"].get<double>(), m == "full" ? 1.0 : o.settings.budget);
                QCOMPARE(r["mode"].get<std::string>(), std::string("query-agnostic"));
                QCOMPARE(r["context_length"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["context_tokens"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["compressed_tokens"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["depth_percent"].get<double>(), depth);
                const std::string response = r["response"].get<std::string>();
                const std::string expected = r["expected"].get<std::string>();
                QCOMPARE(r["correct"].get<bool>(), answer_matches(response, expected));
                QVERIFY(r["needle"].get<std::string>().find(expected) != std::string::npos);
                QVERIFY(r["durations"]["prefill_ms"].get<double>() > 0);
                QVERIFY(std::regex_match(r["timestamp"].get<std::string>(), iso));
                // Both methods saw the same document.
                if (needle_at_depth.count(depth))
                    QCOMPARE(r["needle"].get<std::string>(), needle_at_depth[depth]);
                needle_at_depth[depth] = r["needle"].get<std::string>();
                if (m == "snapkv") QVERIFY(r["footprint_fraction"].get<double>() < 0.9);
                // What the method kept of the needle's value: everything for full, a share for SnapKV that
                // matches its per-layer numbers.
                const nlohmann::json& kept = r["needle_retention"]["needle"];
                QVERIFY2(kept.is_object(), qPrintable(qs(r.dump())));
                QVERIFY(kept["tokens"].get<int64_t>() >= 6);
                const auto per_layer = kept["per_layer"]["kept_fraction"].get<std::vector<double>>();
                QCOMPARE(per_layer.size(), static_cast<size_t>(session->model().config().n_layer));
                double mean = 0;
                for (double k : per_layer) mean += k / static_cast<double>(per_layer.size());
                QVERIFY(std::abs(mean - kept["kept_fraction"].get<double>()) < 1e-9);
                if (m == "full") {
                    QCOMPARE(kept["kept_fraction"].get<double>(), 1.0);
                    QCOMPARE(kept["rel_error"].get<double>(), 0.0);
                    QVERIFY(kept["salience_percentile"].is_null());
                } else {
                    QVERIFY(kept["kept_fraction"].get<double>() >= 0 &&
                            kept["kept_fraction"].get<double>() <= 1);
                    QVERIFY(kept["salience_percentile"].is_number());
                }
            }

        NiahSummary summary = summarize_niah(o);
        QCOMPARE(summary.cells.size(), size_t{4});
        for (const NiahCell& c : summary.cells) QCOMPARE(c.n, int64_t{1});
        write_niah_summary(summary, out);
        const nlohmann::json sj = read_json_file(out / "summary.json");
        for (const std::string& m : o.methods)
            for (const char* depth : {"0", "100"}) {
                const bool correct =
                    read_json_file(niah_record_path(out, m, 200, std::atof(depth), 0))["correct"];
                QCOMPARE(sj["accuracy"][m]["200"][depth].get<double>(), correct ? 1.0 : 0.0);
            }
        // The summary's retention is the mean over the method's records, split by outcome.
        for (const std::string& m : o.methods) {
            double kept = 0;
            int64_t right = 0;
            for (double depth : o.depths) {
                const nlohmann::json r = read_json_file(niah_record_path(out, m, 200, depth, 0));
                kept += r["needle_retention"]["needle"]["kept_fraction"].get<double>() / 2;
                right += r["correct"].get<bool>() ? 1 : 0;
            }
            const nlohmann::json& t = sj["needle_retention"][m]["needle"];
            QCOMPARE(t["all"]["records"].get<int64_t>(), int64_t{2});
            QCOMPARE(t["correct"]["records"].get<int64_t>(), right);
            QCOMPARE(t["wrong"]["records"].get<int64_t>(), 2 - right);
            QVERIFY(std::abs(t["all"]["kept_fraction"].get<double>() - kept) < 1e-9);
        }
        const std::string csv = read_text_file(out / "summary.csv");
        QVERIFY(csv.rfind("method,context_length,depth_percent,n,correct,accuracy,infeasible\n", 0) == 0);
        QCOMPARE(std::count(csv.begin(), csv.end(), '\n'), 5L);

        // Re-running the finished sweep computes nothing and leaves every record as it was.
        model_stages = 0;
        const NiahSweepStats second = run_niah_sweep(*session, o, {}, on_progress);
        QCOMPARE(second.computed, int64_t{0});
        QCOMPARE(second.skipped, int64_t{4});
        QCOMPARE(second.documents, int64_t{0});
        QCOMPARE(model_stages, int64_t{0});
        QVERIFY(read_records(out) == records);

        // Extending the grid computes only the new cells.
        NiahSweepOptions more = o;
        more.depths = {0, 50, 100};
        const NiahSweepStats third = run_niah_sweep(*session, more, {});
        QCOMPARE(third.computed, int64_t{2});
        QCOMPARE(third.skipped, int64_t{4});

        // Records of another sweep (different budget) are never mixed in.
        NiahSweepOptions other = o;
        other.settings.budget = 0.5;
        QVERIFY_THROWS_EXCEPTION(Error, run_niah_sweep(*session, other, {}));
        fs::remove_all(out);
    }

    void query_aware_sweep() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-qa");
        NiahSweepOptions o = tiny_sweep(out);
        o.mode = CompressionMode::QueryAware;
        o.depths = {50};
        o.doc.distractors = 2;
        const NiahSweepStats stats = run_niah_sweep(*session, o, {});
        QCOMPARE(stats.computed, int64_t{2});
        for (const std::string& m : o.methods) {
            const nlohmann::json r = read_json_file(niah_record_path(out, m, 200, 50, 0));
            QCOMPARE(r["mode"].get<std::string>(), std::string("query-aware"));
            QCOMPARE(r["context_tokens"].get<int64_t>(), int64_t{200});
            // The question is inside the compressed context.
            const int64_t question_tokens = static_cast<int64_t>(
                build_prompt(session->tokenizer(), "x", r["question"].get<std::string>(), false)
                    .question_ids.size());
            // The answer prefix follows uncompressed; with the expected value it is the needle's sentence.
            QCOMPARE(r["compressed_tokens"].get<int64_t>(), 200 + question_tokens);
            QCOMPARE(r["needle"].get<std::string>(),
                     r["answer_prefix"].get<std::string>() + " " + r["expected"].get<std::string>() + ".");
            QCOMPARE(r["distractor_needles"].size(), size_t{2});
        }
        fs::remove_all(out);
    }

    // A length too short for the budget (SnapKV keeps int(48 * 0.2) = 9 tokens, fewer than its window of 16)
    // is recorded as infeasible and left out of the accuracy; the other methods and lengths still run.
    void infeasible_cell_is_recorded_not_fatal() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-infeasible");
        NiahSweepOptions o = tiny_sweep(out);
        o.lengths = {48, 200};
        o.depths = {50};
        const NiahSweepStats stats = run_niah_sweep(*session, o, {});
        QCOMPARE(stats.computed, int64_t{4});
        const nlohmann::json short_snapkv = read_json_file(niah_record_path(out, "snapkv", 48, 50, 0));
        QVERIFY2(short_snapkv["infeasible"].get<std::string>().find("smallest feasible kappa") !=
                     std::string::npos,
                 qPrintable(qs(short_snapkv.dump())));
        QVERIFY(!short_snapkv.contains("correct"));
        QVERIFY(read_json_file(niah_record_path(out, "full", 48, 50, 0))["correct"].is_boolean());
        QVERIFY(read_json_file(niah_record_path(out, "snapkv", 200, 50, 0))["correct"].is_boolean());
        const NiahSummary summary = summarize_niah(o);
        const NiahCell& cell = summary.cell(1, 0, 0);
        QCOMPARE(cell.method, std::string("snapkv"));
        QCOMPARE(cell.n, int64_t{0});
        QCOMPARE(cell.infeasible, int64_t{1});
        QCOMPARE(summary.cell(1, 0, 1).n, int64_t{1});
        QCOMPARE(summary.cell(0, 0, 0).n, int64_t{1});
        QVERIFY(summary_csv(summary).find("snapkv,48,50,0,0,,1\n") != std::string::npos);
        // Re-running reuses the infeasible record like any other.
        QCOMPARE(run_niah_sweep(*session, o, {}).computed, int64_t{0});
        // A single comparison still reports the infeasible budget as an error.
        CompareRequest req;
        req.context = std::string(200, 'a');
        req.methods = {"snapkv"};
        req.settings = o.settings;
        req.settings.budget = 0.01;
        QVERIFY_THROWS_EXCEPTION(InfeasibleBudget, run_compare(*session, req));
        fs::remove_all(out);
    }

    void cancel_keeps_finished_records() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-cancel");
        NiahSweepOptions o = tiny_sweep(out);
        o.methods = {"full"};
        o.depths = {0, 50, 100};
        std::atomic<bool> cancel{false};
        JobControl job;
        job.cancel = &cancel;
        // Raise the flag while the second document is being prefilled.
        auto on_progress = [&](const NiahProgress& p) {
            if (p.computed == 1 && !p.stage.empty() && p.stage != "generate") cancel = true;
        };
        QVERIFY_THROWS_EXCEPTION(Cancelled, run_niah_sweep(*session, o, job, on_progress));
        const auto kept = read_records(out);
        QCOMPARE(kept.size(), size_t{1});
        for (const auto& [name, text] : kept) QVERIFY(nlohmann::json::parse(text)["correct"].is_boolean());
        cancel = false;
        const NiahSweepStats resumed = run_niah_sweep(*session, o, job);
        QCOMPARE(resumed.skipped, int64_t{1});
        QCOMPARE(resumed.computed, int64_t{2});
        fs::remove_all(out);
    }

    void cli_haystack_file_summary_heatmap_resume() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        if (!fs::exists(varrate::test::bin_dir() / "varrate")) QSKIP("the varrate executable is not built");
        const fs::path out = varrate::test::temp_dir("niah-cli");
        const fs::path hay = out / "haystack.txt";
        std::ofstream(hay) << kHaystackText;
        const QStringList args = {"niah",
                                  "--model",
                                  QString::fromStdString(dir.string()),
                                  "--haystack-file",
                                  QString::fromStdString(hay.string()),
                                  "--lengths",
                                  "200",
                                  "--depths",
                                  "0,100",
                                  "--methods",
                                  "full,snapkv",
                                  "--window",
                                  "16",
                                  "--obs-window",
                                  "16",
                                  "--max-new-tokens",
                                  "12",
                                  "--threads",
                                  "2",
                                  "--out",
                                  QString::fromStdString((out / "run").string())};
        const CliResult r = run_varrate(args);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("4 records: 4 computed, 0 reused"), qPrintable(r.out));
        const auto records = read_records(out / "run");
        QCOMPARE(records.size(), size_t{4});
        for (const auto& [name, text] : records) {
            const nlohmann::json j = nlohmann::json::parse(text);
            QCOMPARE(j["sweep"]["haystack"].get<std::string>(), std::string("haystack.txt"));
            QCOMPARE(j["context_tokens"].get<int64_t>(), int64_t{200});
        }
        const nlohmann::json sj = read_json_file(out / "run" / "summary.json");
        QCOMPARE(sj["cells"].size(), size_t{4});
        QCOMPARE(sj["methods"], nlohmann::json({"full", "snapkv"}));
        QVERIFY(fs::exists(out / "run" / "summary.csv"));
        // heatmap.png: a PNG of a plausible size (2 panels, 2 rows, 1 column).
        const std::string png = read_text_file(out / "run" / "heatmap.png");
        QVERIFY(png.size() > 1000);
        QCOMPARE(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
        auto be32 = [&](size_t at) {
            return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
                   (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
        };
        QVERIFY(be32(16) > 200 && be32(16) < 2000);  // width
        QVERIFY(be32(20) > 100 && be32(20) < 1000);  // height

        const CliResult again = run_varrate(args);
        QVERIFY2(again.exit_code == 0, qPrintable(again.err));
        QVERIFY2(again.out.contains("4 records: 0 computed, 4 reused"), qPrintable(again.out));
        QVERIFY(read_records(out / "run") == records);
        fs::remove_all(out);
    }

    void cli_sigint_keeps_finished_records() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        if (!fs::exists(varrate::test::bin_dir() / "varrate")) QSKIP("the varrate executable is not built");
        const fs::path out = varrate::test::temp_dir("niah-sigint");
        QProcess p;
        p.start(QString::fromStdString((varrate::test::bin_dir() / "varrate").string()),
                {"niah", "--model", QString::fromStdString(dir.string()), "--lengths", "300,400", "--depths",
                 "0,10,20,30,40,50,60,70,80,90,100", "--samples", "20", "--methods", "full",
                 "--max-new-tokens", "24", "--threads", "1", "--out", QString::fromStdString(out.string())});
        QVERIFY(p.waitForStarted());
        // Wait for the first finished record, then interrupt as Ctrl-C would.
        for (int i = 0; i < 3000 && read_records(out).empty(); ++i) {
            if (p.state() == QProcess::NotRunning) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        QVERIFY2(p.state() == QProcess::Running, "the sweep ended before it could be interrupted");
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 130);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains("interrupted"), qPrintable(err));
        const auto kept = read_records(out);
        QVERIFY(!kept.empty() && kept.size() < 2 * 11 * 20);
        for (const auto& [name, text] : kept) {
            QVERIFY2(name.find(".tmp") == std::string::npos, qPrintable(qs("temporary file left: " + name)));
            QVERIFY(nlohmann::json::parse(text)["response"].is_string());
        }
        const nlohmann::json sj = read_json_file(out / "summary.json");
        int64_t n = 0;
        for (const auto& c : sj["cells"]) n += c["n"].get<int64_t>();
        QCOMPARE(n, static_cast<int64_t>(kept.size()));
        fs::remove_all(out);
    }
};

QTEST_GUILESS_MAIN(TestNiah)
#include "test_core_niah.moc"

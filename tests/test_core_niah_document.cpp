// Needle-in-a-haystack documents (core/niah_document.h): exact token length, needle at the previous sentence
// end of its depth, determinism, fresh and fixed needles, distractors, file haystacks, chat prompts, and
// where the needle's value tokens are and what a method kept of them (core/needle_probe.h). The sweeps over
// such documents are tested in test_core_niah.cpp.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "core/prompt.h"
#include "core/suites/needle_probe.h"
#include "core/suites/niah_document.h"
#include "models/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace varrate;

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

const char* kHaystackText =
    "The lighthouse keeper counted the waves every evening. Boats came and went, and the gulls followed "
    "them.\nIn winter the café by the harbour closed early; its owner painted the shutters blue.\n\nNobody "
    "remembered when the old bell was last rung. Children still dared each other to climb the tower.";

}  // namespace

class TestNiahDocument : public QObject {
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
        // Another sample or seed differs.
        const NiahDocument a1 = a.generate(250, 40, 1);
        QVERIFY(a1.needle != a0.needle);
        QVERIFY(a1.context != a0.context);
        opt.seed = 1235;
        NiahGenerator c(tok, opt);
        QVERIFY(c.generate(250, 40, 0).context != a0.context);
        // A sample's shorter haystack is a prefix of its longer one (after the needle, which depth 0 puts
        // first, and which differs between the two documents under fresh needles).
        const NiahDocument short_doc = a.generate(150, 0, 0), long_doc = a.generate(400, 0, 0);
        const std::string short_hay = short_doc.context.substr(short_doc.needle.size() + 1),
                          long_hay = long_doc.context.substr(long_doc.needle.size() + 1);
        const size_t common = short_hay.size() - 20;
        QCOMPARE(short_hay.substr(0, common), long_hay.substr(0, common));
    }

    // Fixed: sample i's needle set at every length and depth, exactly the documents of the code before the
    // protocols existed (the needles, distractors and needle offsets below were written down from it: seed
    // 42, 2 distractors, stories260k). Fresh: every (length, depth, sample) its own needles,
    // deterministically, on the same per-sample haystack.
    void fresh_and_fixed_needles() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Tokenizer tok = Tokenizer::load(dir);
        NiahDocOptions fixed_opt;
        fixed_opt.distractors = 2;
        fixed_opt.needles = NeedleProtocol::Fixed;
        NiahDocOptions fresh_opt = fixed_opt;
        fresh_opt.needles = NeedleProtocol::Fresh;
        QVERIFY(NiahDocOptions{}.needles == NeedleProtocol::Fresh);  // the default
        NiahGenerator fixed(tok, fixed_opt), fresh(tok, fresh_opt), fresh_again(tok, fresh_opt);

        struct Old {
            int64_t length;
            double depth;
            int64_t sample;
            int64_t needle_token_offset, haystack_tokens;
        };
        const std::string needle[2] = {"The special magic number for bronzeyak is 2739008.",
                                       "The special magic number for russetstoat is 611088."};
        const std::vector<std::string> distractors[2] = {
            {"The special magic number for goldenfalcon is 1506959.",
             "The special magic number for jadeheron is 4055852."},
            {"The special magic number for ebonyfalcon is 4805067.",
             "The special magic number for goldenfox is 1679764."}};
        const Old old[] = {{300, 0, 0, 0, 186},   {300, 50, 0, 84, 186},   {300, 100, 0, 177, 186},
                           {300, 50, 1, 90, 186}, {300, 100, 1, 155, 186}, {150, 100, 0, 27, 36}};
        for (const Old& o : old) {
            const NiahDocument doc = fixed.generate(o.length, o.depth, o.sample);
            const std::string where = fmt::format("fixed L={} D={} S={}", o.length, o.depth, o.sample);
            QVERIFY2(doc.needle == needle[o.sample], qPrintable(qs(where + ": " + doc.needle)));
            QVERIFY2(doc.distractor_needles == distractors[o.sample], qPrintable(qs(where)));
            QCOMPARE(doc.needle_token_offset, o.needle_token_offset);
            QCOMPARE(doc.haystack_tokens, o.haystack_tokens);
        }

        std::set<std::string> fresh_values, fresh_keys;
        for (int64_t length : {150, 300})
            for (double depth : {0.0, 50.0, 100.0}) {
                const NiahDocument f = fresh.generate(length, depth, 0);
                QCOMPARE(f.context_tokens, length);
                QCOMPARE(f.context.substr(f.needle_char_offset, f.needle.size()), f.needle);
                fresh_values.insert(f.expected);
                fresh_keys.insert(f.needle.substr(0, f.needle.find(" is ")));
                QCOMPARE(f.distractor_needles.size(), size_t{2});
                // Deterministic: another generator (asked in another order) gives the same document.
                const NiahDocument again = fresh_again.generate(length, depth, 0);
                QCOMPARE(again.context, f.context);
                QCOMPARE(again.distractor_needles, f.distractor_needles);
                // Fixed keeps the sample's needle in every cell.
                QCOMPARE(fixed.generate(length, depth, 0).needle, needle[0]);
            }
        // Six documents of one sample, six needles (and distractors of their own).
        QCOMPARE(fresh_values.size(), size_t{6});
        QVERIFY(fresh_keys.size() >= 5);
        QVERIFY(fresh.generate(300, 50, 0).distractor_needles !=
                fresh.generate(300, 100, 0).distractor_needles);
        QVERIFY(fresh.generate(300, 50, 0).needle != fresh.generate(300, 50, 1).needle);

        // The haystack is the sample's under both protocols: without needles (distractors 0), the text before
        // a deep needle is the same.
        fixed_opt.distractors = fresh_opt.distractors = 0;
        NiahGenerator fixed0(tok, fixed_opt), fresh0(tok, fresh_opt);
        for (int64_t length : {150, 300})
            for (double depth : {0.0, 50.0, 100.0}) {
                check_document(tok, fresh0.generate(length, depth, 1), length, depth, false);
                if (QTest::currentTestFailed()) return;
            }
        const NiahDocument a = fixed0.generate(300, 100, 1), b = fresh0.generate(300, 100, 1);
        QVERIFY(a.needle != b.needle);
        const size_t before = std::min(a.needle_char_offset, b.needle_char_offset);
        QVERIFY(before > 200);
        QCOMPARE(a.context.substr(0, before), b.context.substr(0, before));

        QCOMPARE(parse_needle_protocol("fixed"), NeedleProtocol::Fixed);
        QCOMPARE(to_string(NeedleProtocol::Fresh), std::string("fresh"));
        EXPECT_ERROR(parse_needle_protocol("random"), "--needles", "random", "fresh", "fixed");
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
};

QTEST_GUILESS_MAIN(TestNiahDocument)
#include "test_core_niah_document.moc"

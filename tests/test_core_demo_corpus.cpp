// The demo corpus and its tokenizer: deterministic documents, needles at the asked depth ending a sentence,
// a word-level byte-level BPE (one token per lexicon word, key and digit) read by our own tokenizer code.
#include "tests/test_support.h"

#include <set>

#include "base/error.h"
#include "core/prompt.h"
#include "core/suites/demo_corpus.h"
#include "models/tokenizer/tokenizer.h"

using namespace varrate;

class TestDemoCorpus : public QObject {
    Q_OBJECT

    static const Tokenizer& tokenizer() {
        static const Tokenizer tok = [] {
            const TrainedTokenizer t = train_demo_tokenizer();
            return Tokenizer::from_json(t.tokenizer, t.tokenizer_config, "demo tokenizer");
        }();
        return tok;
    }

  private Q_SLOTS:
    void lexicon_and_keys() {
        const auto& lex = DemoTextGenerator::lexicon();
        const auto& keys = DemoTextGenerator::keys();
        QVERIFY2(lex.size() >= 400, qPrintable(QString::number(lex.size())));
        QVERIFY2(keys.size() >= 300, qPrintable(QString::number(keys.size())));
        const std::set<std::string> lex_set(lex.begin(), lex.end());
        QCOMPARE(lex_set.size(), lex.size());
        std::set<std::string> key_set;
        for (const auto& k : keys) {
            QVERIFY2(!lex_set.count(k), qPrintable(QString::fromStdString(k)));
            QVERIFY2(key_set.insert(k).second, qPrintable(QString::fromStdString(k)));
            for (char c : k) QVERIFY2(c >= 'a' && c <= 'z', qPrintable(QString::fromStdString(k)));
        }
    }

    void sentences_and_needles() {
        DemoTextGenerator a(11), b(11), c(12);
        int differ = 0;
        std::set<std::string> distinct;
        const auto& lex = DemoTextGenerator::lexicon();
        const std::set<std::string> lex_set(lex.begin(), lex.end());
        for (int i = 0; i < 200; ++i) {
            const std::string s = a.filler_sentence();
            QCOMPARE(s, b.filler_sentence());
            differ += s != c.filler_sentence();
            distinct.insert(s);
            QVERIFY(s.size() > 2 && s.back() == '.' && s[0] >= 'A' && s[0] <= 'Z');
            // Only lexicon words, single spaces, commas and the final period.
            std::string word;
            for (char ch : s.substr(0, s.size() - 1) + " ") {
                if (ch == ' ' || ch == ',') {
                    if (!word.empty())
                        QVERIFY2(lex_set.count(word), qPrintable(QString::fromStdString(word)));
                    word.clear();
                } else {
                    word += ch;
                }
            }
        }
        QVERIFY(differ > 190);
        QVERIFY(distinct.size() > 190);
        const Needle n = a.needle({DemoTextGenerator::keys()[0]});
        QVERIFY(n.key != DemoTextGenerator::keys()[0]);
        QVERIFY(n.value.size() == 6 || n.value.size() == 7);
        QVERIFY(n.value[0] != '0');
        QCOMPARE(n.sentence(), "The special magic number for " + n.key + " is " + n.value + ".");
        QCOMPARE(DemoTextGenerator::question("ambertapir"),
                 std::string("What is the special magic number for ambertapir?"));
    }

    void document_is_deterministic() {
        const DemoDocument a = make_document(42, 700, 3, 40.0), b = make_document(42, 700, 3, 40.0);
        const DemoDocument c = make_document(43, 700, 3, 40.0);
        QCOMPARE(a.text, b.text);
        QCOMPARE(a.needle.value, b.needle.value);
        QVERIFY(a.text != c.text);
        QCOMPARE(a.distractors.size(), size_t(3));
        std::set<std::string> keys = {a.needle.key};
        for (const auto& d : a.distractors) {
            QVERIFY(keys.insert(d.key).second);
            QVERIFY(a.text.find(d.sentence()) != std::string::npos);
        }
        QCOMPARE(a.question, DemoTextGenerator::question(a.needle.key));
        QCOMPARE(a.answer_prefix, "The special magic number for " + a.needle.key + " is");
        QCOMPARE(a.answer, " " + a.needle.value + ".");
        // The plain prompt that compare and niah build: the demo model is trained on exactly this format, and
        // the prefix plus the reply is the needle's sentence.
        QCOMPARE(a.prompt(), a.text + "\n\nQuestion: " + a.question + "\nAnswer: " + a.answer_prefix);
        QCOMPARE(a.prompt(), a.text + plain_question_suffix(a.question, a.answer_prefix));
        QCOMPARE(" " + a.answer_prefix + a.answer, " " + a.needle.sentence());
        QVERIFY_EXCEPTION_THROWN(make_document(1, 0, 0, 50), Error);
        QVERIFY_EXCEPTION_THROWN(make_document(1, 100, 0, 101), Error);
    }

    void needle_depth_and_length() {
        for (double depth : {0.0, 25.0, 50.0, 75.0, 100.0}) {
            for (int64_t target : {256, 1024, 2048}) {
                const DemoDocument d = make_document(1000 + target, target, 2, depth);
                QVERIFY2(d.n_tokens >= target && d.n_tokens < target + 40,
                         qPrintable(QString("%1 tokens for %2").arg(d.n_tokens).arg(target)));
                const std::string s = d.needle.sentence();
                QCOMPARE(d.text.substr(d.needle_offset, s.size()), s);
                // It is a whole sentence: at the start or after ". ", and followed by " " or the end.
                QVERIFY(d.needle_offset == 0 || d.text.compare(d.needle_offset - 2, 2, ". ") == 0);
                const size_t end = d.needle_offset + s.size();
                QVERIFY(end == d.text.size() || d.text[end] == ' ');
                // Depth measured in tokens before the needle, within one sentence plus distractors.
                const double before =
                    static_cast<double>(demo_token_count(d.text.substr(0, d.needle_offset)));
                const double at = 100.0 * before / static_cast<double>(d.n_tokens);
                QVERIFY2(std::abs(at - depth) < 3.0 + 100.0 * 60.0 / static_cast<double>(d.n_tokens),
                         qPrintable(
                             QString("depth %1 asked, %2 found (%3 tokens)").arg(depth).arg(at).arg(target)));
                if (depth == 0.0) QCOMPARE(d.needle_offset, size_t(0));
            }
        }
        // At depth 100 the needle is the last sentence unless a distractor shares its slot before it.
        const DemoDocument last = make_document(5, 300, 0, 100.0);
        const std::string sentence = last.needle.sentence();
        QVERIFY(last.text.size() >= sentence.size());
        QCOMPARE(last.text.substr(last.text.size() - sentence.size()), sentence);
    }

    void tokenizer_one_token_per_word() {
        const Tokenizer& tok = tokenizer();
        QVERIFY2(tok.vocab_size() > 1000 && tok.vocab_size() < 8000,
                 qPrintable(QString::number(tok.vocab_size())));
        QVERIFY(tok.bos_id().has_value() && tok.eos_id().has_value());
        for (const auto* list : {&DemoTextGenerator::lexicon(), &DemoTextGenerator::keys(),
                                 &DemoTextGenerator::template_words()}) {
            for (const auto& w : *list) {
                const auto ids = tok.encode(" " + w, false);
                QVERIFY2(ids.size() == 1,
                         qPrintable(QString("' %1' -> %2 tokens").arg(w.c_str()).arg(ids.size())));
                QCOMPARE(tok.token_string(ids[0]), "\xC4\xA0" + w);  // "Ġword"
            }
        }
        for (const auto& w : DemoTextGenerator::line_start_words())
            QCOMPARE(tok.encode(w, false).size(), size_t(1));
        // Digits: one token each, with or without the leading space.
        const auto digits = tok.encode(" 4096317", false);
        QCOMPARE(digits.size(), size_t(7));
        QCOMPARE(tok.token_string(digits[0]), std::string("\xC4\xA0") + "4");
        QCOMPARE(tok.token_string(digits[1]), std::string("0"));
    }

    void tokenizer_round_trip_and_counts() {
        const Tokenizer& tok = tokenizer();
        for (uint64_t seed : {1, 2, 3}) {
            const DemoDocument d = make_document(seed, 600, static_cast<int>(seed), 50.0);
            const std::string full = d.prompt() + d.answer;
            const auto ids = tok.encode(full, true);
            QCOMPARE(ids.front(), *tok.bos_id());
            QCOMPARE(static_cast<int64_t>(ids.size()), 1 + demo_token_count(full));
            QCOMPARE(static_cast<int64_t>(tok.encode(d.text, false).size()), d.n_tokens);
            QCOMPARE(tok.decode(ids, true), full);
            QCOMPARE(tok.decode(ids, false), "<s>" + full);
        }
        // Text outside the lexicon still encodes (byte fallback through the byte symbols) and round-trips.
        const std::string odd = "Zürich: 3.5% — naïve\ttabs\n\n  spaces";
        QCOMPARE(tok.decode(tok.encode(odd, false)), odd);
    }

    void tokenizer_files_load() {
        const auto dir = test::temp_dir("demo_tok");
        const TrainedTokenizer t = train_demo_tokenizer();
        write_tokenizer_files(t, dir);
        const Tokenizer loaded = Tokenizer::load(dir);
        QCOMPARE(loaded.vocab_size(), t.vocab_size);
        const std::string s = "The special magic number for cobaltlynx is 1234567.";
        QCOMPARE(loaded.encode(s), tokenizer().encode(s));
        QCOMPARE(loaded.encode(s).size(), size_t(1 + 7 + 7 + 1));
        // Training is deterministic.
        QCOMPARE(train_demo_tokenizer().tokenizer.dump(), t.tokenizer.dump());
    }
};

QTEST_GUILESS_MAIN(TestDemoCorpus)
#include "test_core_demo_corpus.moc"

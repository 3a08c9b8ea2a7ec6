// The RULER-format training data of the demo model (app/train/train_data.h): the tokenizer with RULER's
// vocabulary keeps every demo piece one token, each task's reply scores 100 with RULER's own scorer and is
// what the scored tokens spell, copy targets point at the same token in the context, and a step mixes RULER
// and needle batches as the share says.
#include "tests/test_support.h"

#include <ATen/ATen.h>

#include <map>

#include "app/train/train_data.h"
#include "base/error.h"
#include "core/suites/ruler_tasks.h"
#include "models/tokenizer/tokenizer.h"

using namespace varrate;
using namespace varrate::train;

class TestTrainData : public QObject {
    Q_OBJECT

    static const Tokenizer& tokenizer() {
        static const Tokenizer tok = [] {
            const TrainedTokenizer base = train_demo_tokenizer();
            const Tokenizer base_tok = Tokenizer::from_json(base.tokenizer, base.tokenizer_config, "demo");
            const TrainedTokenizer t =
                train_demo_tokenizer(20240601, 64, ruler_tokenizer_texts(base_tok), 8192);
            return Tokenizer::from_json(t.tokenizer, t.tokenizer_config, "demo + RULER");
        }();
        return tok;
    }

  private Q_SLOTS:
    void tokenizer_keeps_demo_pieces_and_learns_ruler_words() {
        const Tokenizer& tok = tokenizer();
        QCOMPARE(tok.vocab_size(), int64_t(8192));
        const DemoDocument d = make_document(3, 400, 2, 50.0);
        QCOMPARE(static_cast<int64_t>(tok.encode(d.text, false).size()), d.n_tokens);
        // RULER's template words and its most common list words are single tokens now.
        for (const char* w :
             {" special", " magic", " memorize", " variable", " grass", " coded", " frequently"})
            QVERIFY2(tok.encode(w, false).size() == 1, w);
        // A cap below the demo vocabulary is refused, naming the cure.
        const TrainedTokenizer base = train_demo_tokenizer();
        EXPECT_ERROR(train_demo_tokenizer(20240601, 64, {" zebra"}, 600), "raise the vocabulary size");
        QVERIFY(base.vocab_size < 8192);
    }

    void replies_score_100_and_copy_targets_match() {
        const Tokenizer& tok = tokenizer();
        const DemoData data(tok, *tok.token_id("<pad>"));
        RulerOptions options;
        options.seed = 5;
        RulerGenerator gen(tok, options);
        for (const std::string& task : ruler_task_names()) {
            const RulerSample sample = gen.generate(task, 1024, 0);
            const std::string reply = ruler_reply(sample);
            QVERIFY2(ruler_score(sample, reply) == 100.0,
                     qPrintable(QString::fromStdString(task + ": " + reply)));
            const Sequence s = data.ruler_sequence(sample);
            // The scored tokens are the reply, then EOS; the sequence fits the sample's length.
            std::vector<int64_t> scored;
            for (int64_t p : s.score_pos) scored.push_back(s.ids[static_cast<size_t>(p + 1)]);
            QCOMPARE(scored.back(), *tok.eos_id());
            scored.pop_back();
            QCOMPARE(tok.decode(scored, true), reply);
            QCOMPARE(s.first_answer_end, static_cast<int64_t>(scored.size()));
            QVERIFY(static_cast<int64_t>(s.ids.size()) <= 1024);
            QCOMPARE(static_cast<int64_t>(s.ids.size()) - static_cast<int64_t>(scored.size()) - 1,
                     sample.prompt_tokens);
            for (size_t k = 0; k < s.copy_query.size(); ++k) {
                QVERIFY(s.copy_source[k] < s.doc_tokens);
                QCOMPARE(s.ids[static_cast<size_t>(s.copy_source[k])],
                         s.ids[static_cast<size_t>(s.copy_query[k] + 1)]);
            }
            // NIAH values occur once in the context: every value token is a copy target.
            if (task.rfind("niah", 0) == 0) QVERIFY2(!s.copy_query.empty(), task.c_str());
        }
    }

    void reply_orders() {
        RulerSample s;
        s.task = "niah_multivalue";
        s.context = "x is: 333. y is: 111. z is: 222.";
        s.outputs = {"111", "222", "333"};
        QCOMPARE(ruler_reply(s), std::string(" 333, 111, 222."));
        s.task = "niah_multiquery";  // the order the question asks them
        QCOMPARE(ruler_reply(s), std::string(" 111, 222, 333."));
        s.task = "cwe";
        s.context = "1. pear 2. fig 3. pear 4. apple";
        s.outputs = {"apple", "pear", "fig"};
        QCOMPARE(ruler_reply(s), std::string(" 1. pear 2. fig 3. apple"));
        s.task = "vt";
        s.outputs = {"AAAAA", "BBBBB"};
        QCOMPARE(ruler_reply(s), std::string("AAAAA BBBBB"));
        s.outputs.clear();
        EXPECT_ERROR(ruler_reply(s), "no references");
    }

    void steps_mix_ruler_and_needles_by_share() {
        const Tokenizer& tok = tokenizer();
        const DemoData data(tok, *tok.token_id("<pad>"));
        Curriculum c;
        c.lengths = {256};
        c.unlock_at = {0.0};
        c.ruler_share = 0.5;
        c.ruler_lengths = {1024};
        c.ruler_tasks = {"niah_single_1", "vt"};
        int ruler_steps = 0;
        const int steps = 12;
        for (int step = 0; step < steps; ++step) {
            const auto seqs = data.training_step(9, step, 100, 2048, c);
            const bool ruler = seqs.front().ids.size() > 512;
            ruler_steps += ruler;
            // Deterministic: the same step gives the same batch.
            QCOMPARE(data.training_step(9, step, 100, 2048, c).front().ids, seqs.front().ids);
        }
        QVERIFY2(ruler_steps >= 2 && ruler_steps <= 10, qPrintable(QString::number(ruler_steps)));
        c.ruler_share = 0;
        for (int step = 0; step < 4; ++step)
            QVERIFY(data.training_step(9, step, 100, 2048, c).front().ids.size() < 512);
    }
};

QTEST_GUILESS_MAIN(TestTrainData)
#include "test_app_train_data.moc"

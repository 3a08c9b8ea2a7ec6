// The demo model trainer (varrate-train) end to end on a tiny configuration: the loss falls on a fixed batch,
// an interrupted and resumed run ends bit-identical to an uninterrupted one, and the export loads in our
// runtime (LlamaModel, Tokenizer) with logits equal to the trainer's own forward pass.
#include "tests/test_support.h"

#include <ATen/ATen.h>

#include <cmath>

#include <QProcess>

#include "base/file_io.h"
#include "models/llama_model.h"
#include "models/safetensors.h"
#include "models/tokenizer/tokenizer.h"

namespace {

struct Result {
    int exit_code = -1;
    QString out, err;
};

Result run_train(const QStringList& args) {
    QProcess p;
    p.start(QString::fromStdString((varrate::test::bin_dir() / "varrate-train").string()), args);
    p.waitForFinished(300000);
    Result r;
    r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

// A tiny model and short documents: each run takes a few seconds on two cores.
QStringList tiny(const std::filesystem::path& out, int steps) {
    return {"--out",
            QString::fromStdString(out.string()),
            "--steps",
            QString::number(steps),
            "--seed",
            "7",
            "--threads",
            "2",
            "--hidden",
            "64",
            "--layers",
            "2",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--head-dim",
            "16",
            "--intermediate",
            "128",
            "--tokens-per-step",
            "384",
            "--curriculum-lengths",
            "96",
            "160",
            "--unlock-at",
            "0",
            "0.5",
            "--warmup",
            "3",
            "--lr",
            "3e-3",
            "--eval-every",
            "0",
            "--final-eval-samples",
            "0",
            "--log-every",
            "0"};
}

std::vector<double> losses(const std::filesystem::path& out) {
    std::vector<double> l;
    for (const auto& j : varrate::test::read_jsonl(out / "train_log.jsonl"))
        if (j.contains("loss")) l.push_back(j["loss"].get<double>());
    return l;
}

// Runs the trainer once and fails the test with its output when it did not succeed.
#define EXPECT_RUN(args)                                                                     \
    do {                                                                                     \
        const Result run_result_ = run_train(args);                                          \
        QVERIFY2(run_result_.exit_code == 0, qPrintable(run_result_.err + run_result_.out)); \
    } while (false)

}  // namespace

class TestTrain : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void loss_falls_on_a_fixed_batch() {
        const auto dir = varrate::test::temp_dir("train_fixed");
        QStringList args = tiny(dir / "out", 30);
        args << "--fixed-batch"
             << "--compute"
             << "fp32";
        EXPECT_RUN(args);
        const auto l = losses(dir / "out");
        QCOMPARE(l.size(), size_t(30));
        double tail = 0;
        for (size_t i = 25; i < 30; ++i) tail += l[i] / 5;
        QVERIFY2(tail < 0.6 * l[0], qPrintable(QString("first loss %1, last five %2").arg(l[0]).arg(tail)));
        QVERIFY(l[0] > 5.0);  // about ln(vocab) at the start
    }

    void resume_is_bit_exact_and_export_matches_runtime() {
        const auto dir = varrate::test::temp_dir("train_resume");
        // Uninterrupted: 8 steps.
        QStringList full = tiny(dir / "full", 8);
        full << "--dump-logits" << QString::fromStdString((dir / "logits.safetensors").string());
        EXPECT_RUN(full);
        // Interrupted after 4 steps, then resumed to 8.
        QStringList first = tiny(dir / "part", 8);
        first << "--checkpoint-dir" << QString::fromStdString((dir / "ck").string()) << "--checkpoint-every"
              << "0"
              << "--stop-at"
              << "4";
        EXPECT_RUN(first);
        QVERIFY(std::filesystem::exists(dir / "ck" / "step-000004" / "optimizer.pt"));
        QVERIFY(!std::filesystem::exists(dir / "part" / "model.safetensors"));
        QStringList second = tiny(dir / "part", 8);
        second << "--resume" << QString::fromStdString((dir / "ck" / "step-000004").string());
        EXPECT_RUN(second);
        QCOMPARE(varrate::read_text_file(dir / "part" / "model.safetensors"),
                 varrate::read_text_file(dir / "full" / "model.safetensors"));
        const auto a = losses(dir / "full"), b = losses(dir / "part");
        QCOMPARE(b.size(), size_t(8));
        QCOMPARE(a, b);
        QVERIFY(a.front() != a.back());

        // Resuming with other settings is refused with a clear message.
        QStringList other = tiny(dir / "other", 8);
        other[other.indexOf("--seed") + 1] = "8";
        other << "--resume" << QString::fromStdString((dir / "ck" / "step-000004").string());
        const Result bad = run_train(other);
        QVERIFY(bad.exit_code != 0);
        QVERIFY2(bad.err.contains("state.json") && bad.err.contains("other settings"), qPrintable(bad.err));

        // The export is a Hugging Face directory that our runtime loads unchanged.
        for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                              "tokenizer_config.json"})
            QVERIFY2(std::filesystem::exists(dir / "full" / f), f);
        varrate::RuntimeOptions ro;
        ro.threads = 2;
        const auto model = varrate::LlamaModel::load(dir / "full", ro);
        QCOMPARE(model->config().n_kv_head, int64_t(2));
        QVERIFY(model->config().tie_word_embeddings);
        const auto dump = varrate::SafetensorsArchive::open(dir / "logits.safetensors");
        const at::Tensor ids_t = dump.tensor("ids");
        const at::Tensor expected = dump.tensor("logits");  // [T, vocab]
        std::vector<int64_t> ids(ids_t.data_ptr<int64_t>(), ids_t.data_ptr<int64_t>() + ids_t.numel());
        QVERIFY(ids.size() > 150);
        varrate::KVCache cache = model->new_cache();
        varrate::ForwardOptions fo;
        fo.all_logits = true;
        fo.chunk_size = 64;  // a chunked prefill must agree with the trainer's one-shot forward
        const at::Tensor got = model->forward(ids, cache, fo);
        QCOMPARE(got.sizes().vec(), expected.sizes().vec());
        const double diff = (got - expected).abs().max().item<double>();
        QVERIFY2(diff < 1e-4, qPrintable(QString("max |logit difference| %1").arg(diff)));
        QVERIFY(expected.abs().max().item<double>() > 0.1);

        const varrate::Tokenizer tok = varrate::Tokenizer::load(dir / "full");
        QCOMPARE(tok.vocab_size(), model->config().vocab_size);
        QCOMPARE(tok.encode("What is the special magic number for tealotter?", true).size(), size_t(1 + 9));
        QCOMPARE(*tok.bos_id(), ids.front());
    }

    // --embed-init-std: one small step leaves the input embedding at its starting std (0.02 without the
    // flag).
    void embedding_starts_at_the_given_std() {
        const auto dir = varrate::test::temp_dir("train_embed_std");
        for (const auto& [flag, lo, hi] : {std::tuple<QString, double, double>{"0.5", 0.45, 0.55},
                                           std::tuple<QString, double, double>{"0", 0.015, 0.025}}) {
            const auto out = dir / ("out" + varrate::test::utf8(flag));
            QStringList args = tiny(out, 1);
            args << "--untied"
                 << "--embed-init-std" << flag;
            EXPECT_RUN(args);
            const auto weights = varrate::SafetensorsArchive::open(out / "model.safetensors");
            const double s = weights.tensor("model.embed_tokens.weight").to(at::kFloat).std().item<double>();
            QVERIFY2(s > lo && s < hi, qPrintable(QString("--embed-init-std %1: std %2").arg(flag).arg(s)));
        }
    }

    // The recipe of the shipped model: a separate lm_head and attention supervision of the copies (with the
    // optional key-gather and previous-token heads, on a three-layer model, and the copy head's own-logit
    // loss). Every supervised term falls on a fixed batch (its targets are reachable, and the term trains),
    // and the untied export carries lm_head.weight with logits equal to the trainer's.
    void untied_model_with_copy_attention_trains_and_exports() {
        const auto dir = varrate::test::temp_dir("train_untied");
        QStringList args = tiny(dir / "out", 30);
        args[args.indexOf("--layers") + 1] = "3";
        args << "--fixed-batch"
             << "--compute"
             << "fp32"
             << "--untied"
             << "--lm-head-from-embedding"
             << "--copy-attention"
             << "1"
             << "--copy-heads"
             << "2"
             << "--key-gather-layer"
             << "0"
             << "--prev-token-layer"
             << "1"
             << "--copy-logit"
             << "1"
             << "--dump-logits" << QString::fromStdString((dir / "logits.safetensors").string());
        EXPECT_RUN(args);
        std::vector<double> copy, digits, gather, prev, own;
        for (const auto& j : varrate::test::read_jsonl(dir / "out" / "train_log.jsonl"))
            if (j.contains("copy_attention_loss")) {
                copy.push_back(j["copy_attention_loss"].get<double>());
                digits.push_back(j["digit_loss"].get<double>());
                gather.push_back(j["key_gather_loss"].get<double>());
                prev.push_back(j["prev_token_loss"].get<double>());
                own.push_back(j["copy_logit_loss"].get<double>());
            }
        QCOMPARE(copy.size(), size_t(30));
        // At the start the head spreads over ~100-200 positions: -ln p is about ln(positions).
        QVERIFY2(copy.front() > 3.0, qPrintable(QString::number(copy.front())));
        QVERIFY2(copy.back() < 0.5 * copy.front(),
                 qPrintable(QString("copy attention loss %1 -> %2").arg(copy.front()).arg(copy.back())));
        QVERIFY(digits.front() > 1.5 && std::isfinite(digits.back()));
        // The key gather, like the copy, starts spread over all earlier positions and sharpens.
        QVERIFY2(gather.front() > 1.0 && gather.back() < 0.5 * gather.front(),
                 qPrintable(QString("key gather loss %1 -> %2").arg(gather.front()).arg(gather.back())));
        QVERIFY2(prev.front() > 1.0 && prev.back() < 0.7 * prev.front(),
                 qPrintable(QString("previous-token loss %1 -> %2").arg(prev.front()).arg(prev.back())));
        // The copy head's own logits start near uniform over the vocabulary (ln 2125 = 7.66).
        QVERIFY2(own.front() > 6.0 && own.back() < 0.7 * own.front(),
                 qPrintable(QString("copy-logit loss %1 -> %2").arg(own.front()).arg(own.back())));

        varrate::RuntimeOptions ro;
        ro.threads = 2;
        const auto model = varrate::LlamaModel::load(dir / "out", ro);
        QVERIFY(!model->config().tie_word_embeddings);
        const auto weights = varrate::SafetensorsArchive::open(dir / "out" / "model.safetensors");
        QVERIFY(weights.contains("lm_head.weight"));
        const auto dump = varrate::SafetensorsArchive::open(dir / "logits.safetensors");
        const at::Tensor ids_t = dump.tensor("ids");
        std::vector<int64_t> ids(ids_t.data_ptr<int64_t>(), ids_t.data_ptr<int64_t>() + ids_t.numel());
        varrate::KVCache cache = model->new_cache();
        varrate::ForwardOptions fo;
        fo.all_logits = true;
        const at::Tensor got = model->forward(ids, cache, fo);
        const double diff = (got - dump.tensor("logits")).abs().max().item<double>();
        QVERIFY2(diff < 1e-4, qPrintable(QString("max |logit difference| %1").arg(diff)));
    }
};

QTEST_GUILESS_MAIN(TestTrain)
#include "test_app_train.moc"

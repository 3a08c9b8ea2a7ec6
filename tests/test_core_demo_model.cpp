// The embedded demo model (resources/models/varrate-demo): it loads through the same session API as any user
// model, with its shipped basis and codec defaults, and answers held-out needle documents (seeds at or above
// 2^63, never used in training) with the needle's sentence.
#include "tests/test_support.h"

#include "core/compare.h"
#include "core/session.h"
#include "core/suites/demo_corpus.h"

using namespace varrate;

class TestDemoModel : public QObject {
    Q_OBJECT

    std::unique_ptr<Session> session_;

    static std::filesystem::path model_dir() { return test::source_dir() / "resources/models/varrate-demo"; }

    // Greedy answer of `method` to the document's question.
    MethodRun answer(const DemoDocument& doc, const std::string& method, CompressionMode mode) {
        CompareRequest req;
        req.context = doc.text;
        req.questions = {doc.question};
        req.answers = {doc.needle.value};
        req.answer_prefixes = {doc.answer_prefix};
        req.methods = {method};
        req.settings = *session_->codec_defaults();
        req.mode = mode;
        req.max_new_tokens = 24;
        return run_compare(*session_, req).runs.at(0);
    }

  private Q_SLOTS:
    void initTestCase() {
        // The model is part of the repository: its absence is a failure, not a skip.
        QVERIFY2(std::filesystem::exists(model_dir() / "model.safetensors"),
                 qPrintable(QString::fromStdString(model_dir().string())));
        RuntimeOptions ro;
        ro.threads = 2;
        session_ = Session::open(model_dir(), ro);
    }

    void ships_basis_and_codec_defaults() {
        QVERIFY(session_->basis() != nullptr);
        QVERIFY(session_->basis_source().find("varrate-basis.safetensors") != std::string::npos);
        QVERIFY(session_->codec_defaults().has_value());
        const CodecSettings& s = *session_->codec_defaults();
        QVERIFY(s.rank <= session_->joint_dim());
        QCOMPARE(session_->basis()->info().stride, s.stride);
        QCOMPARE(session_->basis()->info().anchors, s.anchors);
    }

    void answers_held_out_documents() {
        const uint64_t held_out = uint64_t(1) << 63;
        for (const auto& [seed, length, distractors, depth] :
             {std::tuple<uint64_t, int64_t, int, double>{held_out | 101, 512, 2, 30.0},
              std::tuple<uint64_t, int64_t, int, double>{held_out | 202, 1024, 1, 80.0}}) {
            const DemoDocument doc = make_document(seed, length, distractors, depth);
            const MethodRun run = answer(doc, "full", CompressionMode::QueryAgnostic);
            QVERIFY2(run.correct.at(0) == 1, qPrintable(QString("expected %1, got '%2'")
                                                            .arg(QString::fromStdString(doc.needle.value),
                                                                 QString::fromStdString(run.answers.at(0)))));
            // The reply completes the needle's sentence and stops: the number and the full stop.
            QCOMPARE(QString::fromStdString(run.answers.at(0)).trimmed(),
                     QString::fromStdString(doc.answer).trimmed());
        }
    }
};

QTEST_GUILESS_MAIN(TestDemoModel)
#include "test_core_demo_model.moc"

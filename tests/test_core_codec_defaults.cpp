// A model's codec defaults (core/codec_defaults.h): the width-based policy, settings recorded beside a model
// winning over it, and the CLI and the desktop app starting from the same settings on a narrow model that
// records none.
#include "tests/test_support.h"

#include <QProcess>

#include "base/error.h"
#include "base/file_io.h"
#include "core/codec_defaults.h"
#include "core/session.h"

using namespace varrate;

namespace {

// A narrow Llama (D = 2 * 4 KV heads * 8 = 64), the shape of the stories260k fixture.
const char* kNarrowConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 8, "vocab_size": 512, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": true,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"})";

// The fields the defaults decide.
nlohmann::json width_fields(const CodecSettings& s) {
    return {{"budget", s.budget},        {"r_min", s.r_min},     {"rank", s.rank},
            {"stride", s.stride},        {"anchors", s.anchors}, {"window", s.window},
            {"obs_window", s.obs_window}};
}

}  // namespace

class TestCoreCodecDefaults : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void width_policy() {
        // Narrow: scaled down to D.
        const CodecSettings n = width_codec_defaults(64);
        QCOMPARE(n.budget, 0.4);
        QCOMPARE(n.rank, int64_t{64});
        QCOMPARE(n.r_min, int64_t{4});
        QCOMPARE(n.stride, int64_t{32});
        QCOMPARE(n.window, int64_t{16});
        QCOMPARE(n.obs_window, int64_t{16});
        QCOMPARE(width_codec_defaults(16).r_min, int64_t{2});  // never below 2 directions
        // Wide enough (or unknown): the paper's.
        for (int64_t d : {int64_t{1024}, int64_t{4096}, int64_t{0}})
            QCOMPARE(width_fields(width_codec_defaults(d)), width_fields(CodecSettings{}));
        QVERIFY(width_fields(width_codec_defaults(1023)) != width_fields(CodecSettings{}));
    }

    void recorded_settings_win() {
        ModelConfig cfg = ModelConfig::from_json(nlohmann::json::parse(kNarrowConfig), "test config");
        QCOMPARE(joint_dim(cfg), int64_t{64});
        QCOMPARE(width_fields(default_codec_settings(cfg, std::nullopt)),
                 width_fields(width_codec_defaults(64)));
        CodecSettings recorded;
        recorded.rank = 48;
        recorded.budget = 0.25;
        QCOMPARE(width_fields(default_codec_settings(cfg, recorded)), width_fields(recorded));
    }

    // From a model directory: no file -> width-based; a partial file -> its fields over the width-based ones.
    void model_directory_defaults() {
        const auto dir = test::temp_dir("codec-defaults-model");
        write_file_atomic(dir / "config.json", kNarrowConfig);
        QVERIFY(!read_codec_defaults(dir).has_value());
        QCOMPARE(width_fields(default_codec_settings(dir)), width_fields(width_codec_defaults(64)));
        const QString text = QString::fromStdString(describe_codec_defaults(64, std::nullopt));
        QVERIFY2(text.startsWith("Small-model defaults for D = 64"), qPrintable(text));

        write_file_atomic(dir / kCodecDefaultsFile, R"({"budget": 0.25, "rank": 32, "why": "test"})");
        const CodecSettings d = default_codec_settings(dir);
        QCOMPARE(d.budget, 0.25);
        QCOMPARE(d.rank, int64_t{32});
        QCOMPARE(d.r_min, int64_t{4});    // not recorded: width-based, not the paper's 16
        QCOMPARE(d.window, int64_t{16});  // not the paper's 64
        const QString rec = QString::fromStdString(describe_codec_defaults(64, d));
        QVERIFY2(rec.contains(kCodecDefaultsFile) && rec.contains("rank 32"), qPrintable(rec));

        write_file_atomic(dir / kCodecDefaultsFile, R"({"window": -1})");
        QVERIFY_THROWS_EXCEPTION(Error, default_codec_settings(dir));
    }

    // stories260k records no codec defaults: `varrate compare` without codec flags runs with exactly the
    // settings the app's run panel receives from the loaded session (ModelInfo::defaults).
    void cli_and_app_agree_on_a_narrow_model() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(!std::filesystem::exists(dir / kCodecDefaultsFile));
        const auto session = Session::open(dir, RuntimeOptions{});
        const CodecSettings app = session->default_codec_settings();
        QCOMPARE(app.rank, int64_t{64});  // not the paper's 1024: D = 64

        const auto tmp = test::temp_dir("codec-defaults-cli");
        write_file_atomic(
            tmp / "context.txt",
            "Once upon a time, there was a little girl named Lily. She loved to play outside in "
            "the park with her big red ball.");
        QProcess p;
        p.start(QString::fromStdString((test::bin_dir() / "varrate").string()),
                {"compare", "--model", QString::fromStdString(dir.string()), "--context-file",
                 QString::fromStdString((tmp / "context.txt").string()), "--question", "Who had the ball?",
                 "--methods", "full", "--max-new-tokens", "1", "--json",
                 QString::fromStdString((tmp / "out.json").string())});
        QVERIFY(p.waitForFinished(600000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const nlohmann::json cli = read_json_file(tmp / "out.json")["settings"];
        const nlohmann::json want = width_fields(app);
        for (const auto& [key, value] : want.items())
            QVERIFY2(cli.at(key) == value,
                     qPrintable(QString::fromStdString(key + ": CLI " + cli.at(key).dump() + ", app " +
                                                       value.dump())));
    }
};

QTEST_GUILESS_MAIN(TestCoreCodecDefaults)
#include "test_core_codec_defaults.moc"

// End-to-end tests of the `varrate` executable: reference greedy ids through the CLI, and one-line errors.
#include "tests/test_support.h"

#include <QProcess>

#include "core/file_io.h"

namespace {

struct CliResult {
    int exit_code = -1;
    QString out, err;
};

CliResult run_varrate(const QStringList& args) {
    QProcess p;
    p.start(QString::fromStdString((varrate::test::bin_dir() / "varrate").string()), args);
    p.waitForFinished(600000);
    CliResult r;
    r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString ids_arg(const nlohmann::json& ids) {
    QStringList parts;
    for (const auto& v : ids) parts << QString::number(v.get<int64_t>());
    return parts.join(',');
}

// A bad invocation must fail with a non-zero exit and exactly one line on stderr that names the problem.
void expect_one_line_error(const QStringList& args, const QString& needle) {
    const CliResult r = run_varrate(args);
    QVERIFY2(r.exit_code > 0, qPrintable("expected failure for: " + args.join(' ')));
    const QString err = r.err.trimmed();
    QVERIFY2(!err.contains('\n'), qPrintable("more than one line: " + err));
    QVERIFY2(err.startsWith("varrate: error:"), qPrintable(err));
    QVERIFY2(err.contains(needle, Qt::CaseInsensitive), qPrintable("'" + needle + "' not in: " + err));
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void generate_matches_reference_fp32() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto expected = varrate::read_json_file(dir / "expected_greedy.json");
        for (const auto& c : expected["cases"]) {
            const CliResult r = run_varrate({"generate", "--model", QString::fromStdString(dir.string()),
                                             "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-new-tokens",
                                             "200", "--json", "--threads", "2"});
            QCOMPARE(r.exit_code, 0);
            const auto j = nlohmann::json::parse(r.out.toStdString());
            QCOMPARE(j["prompt_ids"], c["prompt_ids"]);
            QCOMPARE(j["generated_ids"].dump(), c["generated_ids"].dump());
            QCOMPARE(QString::fromStdString(j["text"].get<std::string>()),
                     QString::fromStdString(c["completion_text"].get<std::string>()));
        }
    }

    void generate_bf16_reports_divergence() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto expected = varrate::read_json_file(dir / "expected_greedy.json");
        for (const auto& c : expected["cases"]) {
            const CliResult r = run_varrate({"generate", "--model", QString::fromStdString(dir.string()),
                                             "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-new-tokens",
                                             "200", "--json", "--dtype", "bf16"});
            QCOMPARE(r.exit_code, 0);
            const auto got = nlohmann::json::parse(r.out.toStdString())["generated_ids"];
            const auto& want = c["generated_ids"];
            size_t same = 0;
            while (same < got.size() && same < want.size() && got[same] == want[same]) ++same;
            qInfo("bf16 %s: first %zu of %zu generated ids equal the fp32 reference",
                  c["name"].get<std::string>().c_str(), same, want.size());
            // bf16 rounding can flip a near-tie late in the run, never at the start.
            QVERIFY2(same >= 10, "bf16 greedy ids diverge within the first 10 tokens");
        }
    }

    void generate_text_prompt_uses_tokenizer() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto expected = varrate::read_json_file(dir / "expected_greedy.json");
        for (const auto& c : expected["cases"]) {
            if (c["prompt"].get<std::string>().empty()) continue;
            const CliResult r = run_varrate(
                {"generate", "--model", QString::fromStdString(dir.string()), "--prompt",
                 QString::fromStdString(c["prompt"].get<std::string>()), "--max-new-tokens", "20", "--json"});
            QCOMPARE(r.exit_code, 0);
            const auto j = nlohmann::json::parse(r.out.toStdString());
            QCOMPARE(j["prompt_ids"].dump(), c["prompt_ids"].dump());
            for (size_t i = 0; i < 20; ++i) QCOMPARE(j["generated_ids"][i], c["generated_ids"][i]);
        }
    }

    void bad_arguments_give_one_line() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const QString model = QString::fromStdString(dir.string());
        expect_one_line_error({"generate", "--model", "/nonexistent/model", "--prompt", "x"}, "nonexistent");
        expect_one_line_error({"generate", "--model", model}, "--prompt");
        expect_one_line_error({"generate", "--model", model, "--prompt-ids", "1,x"}, "'x'");
        expect_one_line_error({"generate", "--model", model, "--prompt-ids", "1,99999"}, "vocabulary");
        expect_one_line_error({"generate", "--model", model, "--prompt-ids", "1", "--dtype", "fp8"}, "fp8");
        expect_one_line_error({"generate", "--model", model, "--prompt-ids", "1", "--dtype", "fp16"}, "fp16");
        expect_one_line_error({"--log-level", "loud", "inspect", "--model", model}, "loud");
        expect_one_line_error({"frobnicate"}, "frobnicate");
        // A directory that is not a model.
        const auto empty = varrate::test::temp_dir("cli-empty");
        expect_one_line_error(
            {"generate", "--model", QString::fromStdString(empty.string()), "--prompt-ids", "1"},
            "config.json");
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"

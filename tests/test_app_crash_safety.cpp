// Crash-safe state and limits that fail clearly, through the built `varrate` where a user would meet them:
// a writer killed at random points leaves the old file or the new one, never part of one; `varrate niah` and
// `varrate eval` killed with SIGKILL at random points N times resume to the summary and records of an
// uninterrupted run, with no temporary left; the memory pre-check refuses an impossible model and prefill
// with the bytes needed and available; empty, binary and non-UTF-8 documents, a tokenizer from another model,
// a basis from another model, a document beyond the positions and a question longer than the observation
// window each get one clear message. The kill times come from a seeded generator (VARRATE_TEST_SEED,
// printed), so that a failure can be replayed.
#include <QProcess>
#include <QtTest/QtTest>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace varrate;
using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

fs::path demo_dir() {
    return test::source_dir() / "resources/models/varrate-demo";
}
QString qs(const fs::path& p) {
    return QString::fromStdString(p.string());
}

uint32_t test_seed() {
    const QByteArray env = qgetenv("VARRATE_TEST_SEED");
    const uint32_t seed = env.isEmpty() ? 20261203u : static_cast<uint32_t>(env.toULong());
    qInfo("kill times from seed %u (VARRATE_TEST_SEED)", seed);
    return seed;
}

// JSON without what two runs of the same work are allowed to differ in: timings and timestamps.
nlohmann::json without_timing(nlohmann::json j) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end();) {
            const std::string& k = it.key();
            if (k.find("_ms") != std::string::npos || k == "timestamp" || k == "durations" ||
                k.find("wall") != std::string::npos || k == "eta_s") {
                it = j.erase(it);
            } else {
                *it = without_timing(*it);
                ++it;
            }
        }
    } else if (j.is_array()) {
        for (auto& e : j) e = without_timing(e);
    }
    return j;
}

// Every record under out/records (relative path -> JSON without timing).
std::map<std::string, nlohmann::json> records_of(const fs::path& out) {
    std::map<std::string, nlohmann::json> files;
    if (!fs::exists(out / "records")) return files;
    for (const auto& e : fs::recursive_directory_iterator(out / "records"))
        if (e.is_regular_file() && !is_atomic_temporary(e.path()))
            files[fs::relative(e.path(), out).string()] = without_timing(read_json_file(e.path()));
    return files;
}

std::vector<fs::path> temporaries_under(const fs::path& dir) {
    std::vector<fs::path> found;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (is_atomic_temporary(e.path())) found.push_back(e.path());
    return found;
}

size_t count_records(const fs::path& out) {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(out / "records", ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        n += it->is_regular_file(ec) && !is_atomic_temporary(it->path());
    return n;
}

// Starts `varrate args` and SIGKILLs it `delay_us` after more than `after_records` records exist under `out`
// (a kill in the middle of the sweep's writing), unless it finished first. True when it was killed.
bool run_and_kill(const QStringList& args, const fs::path& out, size_t after_records, int delay_us) {
    QProcess p;
    p.setProgram(qs(test::bin_dir() / "varrate"));
    p.setArguments(args);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start();
    if (!p.waitForStarted(10000)) return false;
    while (count_records(out) <= after_records)
        if (p.waitForFinished(2)) return false;
    usleep(static_cast<useconds_t>(delay_us));
    if (p.state() == QProcess::NotRunning) return false;
    p.kill();  // SIGKILL on Unix: no handler runs, nothing is flushed
    p.waitForFinished(10000);
    return true;
}

struct KilledSweep {
    int killed = 0;
    int partial = 0;      // kills that left some records but not all
    int temporaries = 0;  // kills that left a temporary (killed inside a write)
};

// The sweep `args` (ending in "--out", <out>) run once into `reference`, then into `out` killed `kills` times
// (each 0-2 records after where the last one stopped, a random 0-30 ms later) and finally run to its end.
// Compares what both left.
KilledSweep kill_and_resume(QStringList args, const fs::path& reference, const fs::path& out, int kills) {
    KilledSweep report;
    args.removeLast();
    args << qs(reference);
    const CliResult ref = run_varrate(args);
    if (ref.exit_code != 0) {
        QTest::qFail(qPrintable("the uninterrupted sweep failed: " + ref.err), __FILE__, __LINE__);
        return report;
    }
    const size_t total = records_of(reference).size();
    args.removeLast();
    args << qs(out);
    std::mt19937 rng(test_seed());
    std::uniform_int_distribution<int> delay_us(0, 30000);
    size_t have = 0;
    for (int k = 0; k < kills && have < total; ++k) {
        // Kill soon after what the last run left (0-2 records further), so that the kills cover the sweep.
        const size_t after = std::min(total - 1, have + std::uniform_int_distribution<size_t>(0, 2)(rng));
        const int us = delay_us(rng);
        const bool killed = run_and_kill(args, out, after, us);
        have = count_records(out);
        const size_t debris = temporaries_under(out).size();
        qInfo("run %d: %s %d us after record %zu; %zu of %zu records, %zu temporaries", k + 1,
              killed ? "killed" : "finished", us, after + 1, have, total, debris);
        report.killed += killed;
        report.partial += killed && have > 0 && have < total;
        report.temporaries += killed && debris > 0;
    }
    const CliResult last = run_varrate(args);
    if (last.exit_code != 0) {
        QTest::qFail(qPrintable("the resumed sweep failed: " + last.err), __FILE__, __LINE__);
        return report;
    }
    const auto expected = records_of(reference), got = records_of(out);
    if (got.size() != expected.size())
        QTest::qFail(
            qPrintable(
                QString("%1 records after resuming, %2 uninterrupted").arg(got.size()).arg(expected.size())),
            __FILE__, __LINE__);
    for (const auto& [name, j] : expected) {
        const auto it = got.find(name);
        if (it == got.end() || it->second != j) {
            QTest::qFail(qPrintable(QString::fromStdString("record " + name + " differs after resuming")),
                         __FILE__, __LINE__);
            return report;
        }
    }
    const nlohmann::json want = without_timing(read_json_file(reference / "summary.json"));
    const nlohmann::json resumed = without_timing(read_json_file(out / "summary.json"));
    if (want != resumed)
        QTest::qFail("the resumed run's summary.json differs from the uninterrupted run's", __FILE__,
                     __LINE__);
    for (const fs::path& t : temporaries_under(out))
        QTest::qFail(qPrintable(QString::fromStdString("a temporary file remains: " + t.string())), __FILE__,
                     __LINE__);
    return report;
}

}  // namespace

class TestCrashSafety : public QObject {
    Q_OBJECT

    // `command_line` on the demo model (small codec windows, two threads, kappa 0.3) through kill_and_resume:
    // some kill must land between the first and the last record.
    void check_killed_sweep(const char* name, const QString& command_line) {
        const fs::path out = test::temp_dir(std::string(name) + "-kill");
        QStringList args = command_line.split(' ', Qt::SkipEmptyParts);
        args << "--model" << qs(demo_dir()) << "--budget"
             << "0.3"
             << "--window"
             << "16"
             << "--obs-window"
             << "16"
             << "--threads"
             << "2"
             << "--out" << qs(out / "run");
        const KilledSweep r = kill_and_resume(args, out / "reference", out / "run", 8);
        if (QTest::currentTestFailed()) return;
        qInfo("%s: %d kills, %d with part of the records written, %d inside a write", name, r.killed,
              r.partial, r.temporaries);
        QVERIFY2(r.partial > 0, "no kill landed between the first and the last record");
        fs::remove_all(out);
    }

  private Q_SLOTS:
    void initTestCase() {
        QVERIFY2(fs::exists(test::bin_dir() / "varrate"),
                 "the varrate executable is not built (the suites depend on it)");
    }

    // A child process writes 4 MiB files in a loop (two contents alternating) and is SIGKILLed at random
    // times: the target is always one whole content or absent, the killed writes' temporaries are the only
    // debris, and remove_stale_temporaries() clears them (their processes are gone).
    void atomic_write_killed_leaves_old_or_new_file() {
        const fs::path dir = test::temp_dir("atomic-kill");
        const fs::path target = dir / "record.json";
        const std::string a(4 << 20, 'a'), b(4 << 20, 'b');
        std::mt19937 rng(test_seed());
        std::uniform_int_distribution<int> delay_us(500, 30000);
        int temporaries_left = 0, complete = 0;
        for (int k = 0; k < 25; ++k) {
            const pid_t child = fork();
            QVERIFY(child >= 0);
            if (child == 0) {
                for (int i = 0;; ++i) {
                    try {
                        write_file_atomic(target, i % 2 ? b : a);
                    } catch (...) {
                        _exit(3);
                    }
                }
            }
            usleep(static_cast<useconds_t>(delay_us(rng)));
            kill(child, SIGKILL);
            int status = 0;
            waitpid(child, &status, 0);
            QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer was not killed");
            if (fs::exists(target)) {
                const std::string text = read_text_file(target);
                QCOMPARE(text.size(), a.size());
                QVERIFY2(text == a || text == b, "the target holds part of a write");
                ++complete;
            }
            temporaries_left += static_cast<int>(temporaries_under(dir).size());
        }
        // The kills did land inside writes (else the test proves nothing), and the debris is recognised.
        QVERIFY2(temporaries_left > 0, "no kill landed inside a write");
        QVERIFY(complete > 0);
        QVERIFY(remove_stale_temporaries(dir) > 0);
        QVERIFY(temporaries_under(dir).empty());
        // A live process's temporary is never removed (another shard may be about to rename it).
        const fs::path mine = atomic_temporary_for(target);
        std::ofstream(mine) << "in flight";
        QCOMPARE(remove_stale_temporaries(dir), 0);
        QVERIFY(fs::exists(mine));
        fs::remove_all(dir);
    }

    void niah_killed_and_resumed_matches_uninterrupted() {
        check_killed_sweep("niah",
                           "niah --lengths 300 --depths 0,50,100 --samples 2 --methods full,snapkv,varrate "
                           "--max-new-tokens 8");
    }

    void eval_killed_and_resumed_matches_uninterrupted() {
        check_killed_sweep("eval",
                           "eval --tasks niah_single_1,niah_single_2 --lengths 400 --samples 3 "
                           "--methods full,snapkv --max-new-tokens 12");
    }

    // Llama 3.1 405B's shape with no real bytes (a sparse file): its fp32 weights cannot fit in this or any
    // workstation's memory, and the load says so before converting anything.
    void memory_precheck_refuses_an_impossible_model() {
        const fs::path dir = test::temp_dir("huge-model");
        const int64_t h = 16384, layers = 126, heads = 128, kv = 8, hd = 128, inter = 53248, vocab = 128256;
        nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", h},
                                 {"intermediate_size", inter},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", heads},
                                 {"num_key_value_heads", kv},
                                 {"vocab_size", vocab},
                                 {"max_position_embeddings", 131072},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 500000.0},
                                 {"tie_word_embeddings", false},
                                 {"torch_dtype", "bfloat16"}};
        write_file_atomic(dir / "config.json", config.dump(2));
        nlohmann::ordered_json header = nlohmann::ordered_json::object();
        int64_t offset = 0;
        auto add = [&](const std::string& name, std::vector<int64_t> shape) {
            int64_t n = 2;
            for (int64_t d : shape) n *= d;
            header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
            offset += n;
        };
        add("model.embed_tokens.weight", {vocab, h});
        add("model.norm.weight", {h});
        add("lm_head.weight", {vocab, h});
        for (int64_t i = 0; i < layers; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            add(p + "input_layernorm.weight", {h});
            add(p + "post_attention_layernorm.weight", {h});
            add(p + "self_attn.q_proj.weight", {heads * hd, h});
            add(p + "self_attn.k_proj.weight", {kv * hd, h});
            add(p + "self_attn.v_proj.weight", {kv * hd, h});
            add(p + "self_attn.o_proj.weight", {h, heads * hd});
            add(p + "mlp.gate_proj.weight", {inter, h});
            add(p + "mlp.up_proj.weight", {inter, h});
            add(p + "mlp.down_proj.weight", {h, inter});
        }
        std::string text = header.dump();
        text.append((8 - text.size() % 8) % 8, ' ');
        {
            std::ofstream f(dir / "model.safetensors", std::ios::binary);
            uint64_t n = text.size();
            f.write(reinterpret_cast<const char*>(&n), 8);
            f.write(text.data(), static_cast<std::streamsize>(text.size()));
        }
        fs::resize_file(dir / "model.safetensors",
                        8 + text.size() + static_cast<uint64_t>(offset));  // sparse
        std::ofstream(dir / "doc.txt") << "Once upon a time there was a cat.";
        const CliResult r = run_varrate({"compare", "--model", qs(dir), "--context-file", qs(dir / "doc.txt"),
                                         "--dtype", "fp32", "--threads", "2"});
        QCOMPARE(r.exit_code, 1);
        QVERIFY2(r.err.contains("model weights:") && r.err.contains("parameters in fp32 need") &&
                     r.err.contains("is available"),
                 qPrintable(r.err));
        fs::remove_all(dir);
    }

    // VARRATE_MEMORY_LIMIT caps what one step may plan: below the demo model's weights the load is refused,
    // above them but below a 3000-token prefill the prefill is, each naming bytes needed and available.
    void memory_precheck_refuses_a_prefill_over_the_limit() {
        const fs::path dir = test::temp_dir("mem-limit");
        std::string doc;
        for (int i = 0; doc.size() < 12000; ++i)
            doc += "The little dog ran to the park and played with a red ball. ";
        std::ofstream(dir / "doc.txt") << doc;
        const QStringList args = {"compare",        "--model",           qs(demo_dir()),
                                  "--context-file", qs(dir / "doc.txt"), "--methods",
                                  "full",           "--threads",         "2"};
        qputenv("VARRATE_MEMORY_LIMIT", "1MiB");
        const CliResult load = run_varrate(args);
        qputenv("VARRATE_MEMORY_LIMIT", "30MiB");
        const CliResult prefill = run_varrate(args);
        qputenv("VARRATE_MEMORY_LIMIT", "lots");
        const CliResult bad = run_varrate(args);
        qunsetenv("VARRATE_MEMORY_LIMIT");
        QCOMPARE(load.exit_code, 1);
        QVERIFY2(load.err.contains("model weights:") && load.err.contains("(1048576 bytes) is available"),
                 qPrintable(load.err));
        QCOMPARE(prefill.exit_code, 1);
        QVERIFY2(prefill.err.contains("the prefill of") && prefill.err.contains("activations per chunk") &&
                     prefill.err.contains("(31457280 bytes) is available"),
                 qPrintable(prefill.err));
        QCOMPARE(bad.exit_code, 1);
        QVERIFY2(bad.err.contains("VARRATE_MEMORY_LIMIT: 'lots' is not a size"), qPrintable(bad.err));
        fs::remove_all(dir);
    }

    void bad_documents_are_refused_by_name() {
        VARRATE_REQUIRE_FIXTURE(model, "stories260k");
        const fs::path dir = test::temp_dir("bad-docs");
        std::ofstream(dir / "empty.txt");
        std::ofstream(dir / "blank.txt") << " \n\t\n";
        std::ofstream(dir / "binary.bin", std::ios::binary) << std::string("PK\x03\x04\0\0data", 10);
        std::ofstream(dir / "latin1.txt", std::ios::binary) << "caf\xe9 au lait";
        const std::vector<std::pair<std::string, std::string>> cases = {
            {"empty.txt", "the document is empty (0 bytes)"},
            {"blank.txt", "the document is empty (only white space)"},
            {"binary.bin", "not a text document (a NUL byte at offset 4"},
            {"latin1.txt", "not UTF-8 text (invalid byte 0xE9 at offset 3)"}};
        for (const auto& [file, message] : cases) {
            const CliResult r = run_varrate(
                {"compare", "--model", qs(model), "--context-file", qs(dir / file), "--threads", "2"});
            QCOMPARE(r.exit_code, 1);
            QVERIFY2(r.err.contains(qs(dir / file)) && r.err.contains(QString::fromStdString(message)),
                     qPrintable(r.err));
        }
        fs::remove_all(dir);
    }

    // The positions warning and the question-window warning name the numbers; the run still answers.
    void long_document_and_long_question_are_warned() {
        VARRATE_REQUIRE_FIXTURE(model, "stories260k");
        const fs::path dir = test::temp_dir("long-inputs");
        std::string doc;
        while (doc.size() < 4000) doc += "Lily saw a big red ball in the park. She was happy. ";
        std::ofstream(dir / "doc.txt") << doc;
        const CliResult r = run_varrate(
            {"compare", "--model", qs(model), "--context-file", qs(dir / "doc.txt"), "--methods",
             "full,snapkv", "--question",
             "What did Lily see in the park on the day that she was happy and played with her ball?",
             "--window", "16", "--obs-window", "8", "--max-new-tokens", "4", "--threads", "2"});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains("beyond the model's max_position_embeddings of 512"), qPrintable(r.err));
        QVERIFY2(r.err.contains("longer than the observation window (8 tokens)") &&
                     r.err.contains("raise --obs-window"),
                 qPrintable(r.err));
        fs::remove_all(dir);
    }

    // stories260k's weights with the Llama-3 tokenizer (128256 ids for a 512-row embedding), and the demo
    // model's basis given to stories260k: each refused before any prefill, naming the file.
    void parts_of_another_model_are_refused() {
        VARRATE_REQUIRE_FIXTURE(model, "stories260k");
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        const fs::path dir = test::temp_dir("mixed-model");
        for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
            fs::copy_file(model / f, dir / f);
        for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
            if (fs::exists(llama3 / f)) fs::copy_file(llama3 / f, dir / f);
        std::ofstream(dir / "doc.txt") << "Once upon a time.";
        const CliResult tok = run_varrate(
            {"compare", "--model", qs(dir), "--context-file", qs(dir / "doc.txt"), "--threads", "2"});
        QCOMPARE(tok.exit_code, 1);
        QVERIFY2(tok.err.contains("tokenizer.json has ids up to") && tok.err.contains("vocab_size is 512") &&
                     tok.err.contains("another model"),
                 qPrintable(tok.err));
        const CliResult basis =
            run_varrate({"compare", "--model", qs(model), "--context-file", qs(dir / "doc.txt"), "--basis",
                         qs(demo_dir() / "varrate-basis.safetensors"), "--threads", "2"});
        QCOMPARE(basis.exit_code, 1);
        QVERIFY2(basis.err.contains("varrate-basis.safetensors was made for model 'llama-4x256-") &&
                     basis.err.contains("not for 'llama-5x64-"),
                 qPrintable(basis.err));
        fs::remove_all(dir);
    }
};

QTEST_GUILESS_MAIN(TestCrashSafety)
#include "test_app_crash_safety.moc"

#pragma once
// Helpers shared by the Qt Test suites: where the reference fixtures are (and a skip when they are absent),
// error-message assertions, the codec settings of the 64-wide stories260k fixture and a Session on it.
#include <QtTest/QtTest>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/method.h"

namespace varrate {
class LlamaModel;
class Session;
}  // namespace varrate

namespace varrate::test {

// VARRATE_SHARED_DIR (CMake cache variable, default ../shared), overridable by the VARRATE_SHARED env var.
std::filesystem::path shared_dir();
// shared_dir()/fixtures/<rel>, or "" when absent.
std::filesystem::path fixture(const std::string& rel);
std::filesystem::path source_dir();
std::filesystem::path bin_dir();
// One run of the built `varrate` CLI (bin_dir()/varrate): exit code (-1 when it crashed), stdout, stderr.
struct CliResult {
    int exit_code = -1;
    QString out, err;
};
CliResult run_varrate(const QStringList& args);
// Reads a .jsonl file into one json per line.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);
// Reads one JSON file; throws std::runtime_error naming the file when it cannot be opened.
nlohmann::json read_json(const std::filesystem::path& path);
// tests/data/oracles: the references made by scripts/oracles (transformers, kvpress) and their checkpoints.
std::filesystem::path oracle_dir();
// The ids of one case of a kvpress reference made on the SnapKV case's ids (its context_ids, question_ids and
// suffix_ids; the case's "mode"), as scripts/oracles/generate.py runs them: {compressed, prompt}.
// query-agnostic compresses the context and asks question + suffix after it; query-aware compresses context +
// question and asks the suffix.
std::pair<std::vector<int64_t>, std::vector<int64_t>> kvpress_case_ids(const nlohmann::json& ref,
                                                                       const nlohmann::json& c);
// The fp32 model of an oracle reference (its "model": a checkpoint under oracle_dir()), loaded once per name.
LlamaModel& oracle_model(const nlohmann::json& ref);
// The SHA-256 of a file's bytes as lower-case hex ("<unreadable PATH>" when it cannot be read).
std::string sha256_hex(const std::filesystem::path& p);
// A fresh empty directory under the system temp dir.
std::filesystem::path temp_dir(const std::string& tag);

// `bytes` as a std::string, and the UTF-8 bytes of `s`, made here rather than by QByteArray::toStdString (or
// QString::toStdString, which calls it), whose std::string comes from inside Qt with Debian's C++11 string
// ABI: the suites then also link against a LibTorch built with the pre-C++11 ABI (PyPI's torch 2.6;
// scripts/check-libtorch2.sh).
inline std::string std_string(const QByteArray& bytes) {
    return std::string(bytes.constData(), static_cast<size_t>(bytes.size()));
}
inline std::string utf8(const QString& s) {
    return std_string(s.toUtf8());
}

// The message of the varrate::Error that `f` throws, or "<no error thrown>" when it returns normally.
// Any other exception propagates (Qt Test reports it as a failure).
std::string error_message(const std::function<void()>& f);
// Whether `text` contains every one of `parts`.
bool contains_all(const std::string& text, std::initializer_list<std::string> parts);

// Feasible codec settings for the 64-wide stories260k fixture (D = 64) with a context of a few hundred
// tokens: the paper's defaults (R 1024, stride 16, window 64) need D >= 1024 and L in the thousands.
// kappa as given, r_min 4, R 64, stride 32, window 16, obs-window 16.
CodecSettings small_codec_settings(double kappa = 0.3);

// A Session on fixtures/stories260k (two threads, CPU, fp32) with an optional basis file; null when the
// fixture is absent.
std::unique_ptr<Session> open_fixture_session(const std::filesystem::path& basis_file = {});
// One such Session per test executable, opened on first use and shared by its test functions; null when
// the fixture is absent.
Session* shared_fixture_session();

// Reference attention for the compressed stores' tests: softmax attention of q [H, n, hd] over dense
// post-RoPE keys/values [G, m, hd] in fp32, the last n entries the queries' own (causal among them).
at::Tensor dense_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale);
// max |a - b| / max |b|, in fp32.
double rel_max_diff(const at::Tensor& a, const at::Tensor& b);

// The compressed store's per-token metadata, computed independently of the codec (Pascal's triangle, no
// closed forms): each coded token's anchor set as one number of the bits that count C(n_anchors, c) sets,
// and its rank in [0, R] unless the ranks are uniform (flat), each stream packed to whole bytes.
int64_t bits_for_values(int64_t n);  // the least b with 2^b >= n (at least 1)
int64_t anchor_set_count(int64_t n_anchors, int64_t c);
int64_t expected_metadata_bytes(int64_t n_coded, int64_t n_anchors, int64_t c, int64_t R, bool uniform_ranks);

}  // namespace varrate::test

// Skips the current test function with a clear message when a fixture is missing.
#define VARRATE_REQUIRE_FIXTURE(var, rel)                                                          \
    const std::filesystem::path var = varrate::test::fixture(rel);                                 \
    if (var.empty())                                                                               \
    QSKIP(qPrintable(QString("reference fixture '%1' not found under %2 (set VARRATE_SHARED_DIR)") \
                         .arg(QString::fromStdString(rel))                                         \
                         .arg(QString::fromStdString(varrate::test::shared_dir().string()))))

// Asserts that `expr` throws varrate::Error whose message contains every given substring (at least one).
#define EXPECT_ERROR(expr, ...)                                                                             \
    do {                                                                                                    \
        const std::string msg_ = varrate::test::error_message([&] { (void)(expr); });                       \
        QVERIFY2(varrate::test::contains_all(msg_, {__VA_ARGS__}),                                          \
                 qPrintable(QString::fromStdString(std::string(#expr) + ": unexpected message: " + msg_))); \
    } while (0)

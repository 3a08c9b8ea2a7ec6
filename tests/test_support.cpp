#include "tests/test_support.h"

#include <QCryptographicHash>
#include <QFile>
#include <QProcess>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>

#include "base/error.h"
#include "core/session.h"
#include "models/device.h"
#include "models/llama_model.h"

namespace varrate::test {

std::filesystem::path shared_dir() {
    if (const char* env = std::getenv("VARRATE_SHARED"); env && *env) return env;
    return VARRATE_SHARED_DIR;
}

std::filesystem::path fixture(const std::string& rel) {
    auto p = shared_dir() / "fixtures" / rel;
    return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::filesystem::path source_dir() {
    return VARRATE_SOURCE_DIR;
}
std::filesystem::path bin_dir() {
    return VARRATE_BIN_DIR;
}

nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path.string() + ": cannot open");
    return nlohmann::json::parse(in);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> kvpress_case_ids(const nlohmann::json& ref,
                                                                       const nlohmann::json& c) {
    auto compressed = ref["context_ids"].get<std::vector<int64_t>>();
    auto prompt = ref["suffix_ids"].get<std::vector<int64_t>>();
    const auto question = ref["question_ids"].get<std::vector<int64_t>>();
    if (c["mode"] == "query-agnostic")
        prompt.insert(prompt.begin(), question.begin(), question.end());
    else
        compressed.insert(compressed.end(), question.begin(), question.end());
    return {compressed, prompt};
}

LlamaModel& oracle_model(const nlohmann::json& ref) {
    static std::map<std::string, std::unique_ptr<LlamaModel>> loaded;
    const std::string name = ref["model"].get<std::string>();
    std::unique_ptr<LlamaModel>& m = loaded[name];
    if (!m) {
        RuntimeOptions o;
        o.dtype = at::kFloat;
        m = LlamaModel::load(oracle_dir() / name, o);
    }
    return *m;
}

std::filesystem::path oracle_dir() {
    return source_dir() / "tests" / "data" / "oracles";
}

std::string sha256_hex(const std::filesystem::path& p) {
    QFile file(QString::fromStdString(p.string()));
    if (!file.open(QIODevice::ReadOnly)) return "<unreadable " + p.string() + ">";
    QCryptographicHash hash(QCryptographicHash::Sha256);
    hash.addData(&file);
    return std_string(hash.result().toHex());
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> rows;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    }
    return rows;
}

std::filesystem::path temp_dir(const std::string& tag) {
    std::random_device rd;
    auto p = std::filesystem::temp_directory_path() / ("varrate-" + tag + "-" + std::to_string(rd()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p;
}

std::string error_message(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error thrown>";
}

bool contains_all(const std::string& text, std::initializer_list<std::string> parts) {
    for (const std::string& p : parts)
        if (text.find(p) == std::string::npos) return false;
    return parts.size() > 0;
}

CodecSettings small_codec_settings(double kappa) {
    CodecSettings s;
    s.budget = kappa;
    s.r_min = 4;
    s.rank = 64;
    s.stride = 32;
    s.window = 16;
    s.obs_window = 16;
    return s;
}

std::unique_ptr<Session> open_fixture_session(const std::filesystem::path& basis_file) {
    const std::filesystem::path dir = fixture("stories260k");
    if (dir.empty()) return nullptr;
    RuntimeOptions o;
    o.threads = configure_threads(2);
    return Session::open(dir, o, basis_file);
}

Session* shared_fixture_session() {
    static std::unique_ptr<Session> session = open_fixture_session();
    return session.get();
}

CliResult run_varrate(const QStringList& args) {
    QProcess p;
    p.start(QString::fromStdString((bin_dir() / "varrate").string()), args);
    p.waitForFinished(600000);
    CliResult r;
    r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

at::Tensor dense_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale) {
    const int64_t H = q.size(0), n = q.size(1), G = k.size(0), m = k.size(1);
    const at::Tensor kk = k.to(at::kFloat).repeat_interleave(H / G, 0);
    const at::Tensor vv = v.to(at::kFloat).repeat_interleave(H / G, 0);
    at::Tensor s = at::bmm(q.to(at::kFloat), kk.transpose(1, 2)) * scale;  // [H, n, m]
    const at::Tensor col = at::arange(m, at::kLong), row = at::arange(n, at::kLong) + (m - n);
    s.masked_fill_((col.unsqueeze(0) > row.unsqueeze(1)).unsqueeze(0),
                   -std::numeric_limits<float>::infinity());
    return at::bmm(s.softmax(2), vv);
}

double rel_max_diff(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor fa = a.to(at::kFloat), fb = b.to(at::kFloat);
    return (fa - fb).abs().max().item<double>() / std::max(fb.abs().max().item<double>(), 1e-30);
}

int64_t bits_for_values(int64_t n) {
    int64_t bits = 1;
    while ((int64_t(1) << bits) < n) ++bits;
    return bits;
}

int64_t anchor_set_count(int64_t n_anchors, int64_t c) {
    std::vector<int64_t> row{1};  // row n of Pascal's triangle
    for (int64_t n = 1; n <= n_anchors; ++n) {
        std::vector<int64_t> next(static_cast<size_t>(n + 1), 1);
        for (int64_t k = 1; k < n; ++k) next[k] = row[k - 1] + row[k];
        row = std::move(next);
    }
    return c >= 0 && c <= n_anchors ? row[static_cast<size_t>(c)] : 0;
}

int64_t expected_metadata_bytes(int64_t n_coded, int64_t n_anchors, int64_t c, int64_t R,
                                bool uniform_ranks) {
    const int64_t sets = (n_coded * bits_for_values(anchor_set_count(n_anchors, c)) + 7) / 8;
    return sets + (uniform_ranks ? 0 : (n_coded * bits_for_values(R + 1) + 7) / 8);
}

}  // namespace varrate::test

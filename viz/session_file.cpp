#include "viz/session_file.h"

#include <QFile>
#include <QSaveFile>

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "core/base/error.h"

namespace varrate::viz {

namespace {

constexpr int kFormatVersion = 1;

// NaN/inf are written as null by nlohmann::json; read them back as NaN.
at::Tensor float_tensor(const nlohmann::json& j) {
    if (j.is_null()) return {};
    std::vector<float> v;
    v.reserve(j.size());
    for (const auto& x : j)
        v.push_back(x.is_number() ? x.get<float>() : std::numeric_limits<float>::quiet_NaN());
    return at::tensor(v, at::kFloat);
}

at::Tensor long_tensor(const nlohmann::json& j) {
    if (j.is_null()) return {};
    return at::tensor(j.get<std::vector<int64_t>>(), at::kLong);
}

template <typename T>
T field(const nlohmann::json& j, const char* name, const std::string& where, T fallback) {
    if (!j.contains(name) || j[name].is_null()) return fallback;
    try {
        return j[name].get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(where + ": field '" + name + "' has the wrong type");
    }
}

nlohmann::json outcome_json(const RunOutcome& o) {
    nlohmann::json runs = nlohmann::json::array();
    for (const MethodRun& r : o.result.runs) {
        nlohmann::json layers = nlohmann::json::array();
        for (const auto& d : r.layers) layers.push_back(diagnostics_json(d));
        runs.push_back({{"method", r.method},
                        {"budget", r.budget},
                        {"footprint_fraction", r.footprint_fraction},
                        {"stored_bytes", r.stored_bytes},
                        {"full_bytes", r.full_bytes},
                        {"answers", r.answers},
                        {"answer_ids", r.answer_ids},
                        {"correct", r.correct},
                        {"prefill_ms", r.prefill_ms},
                        {"compress_ms", r.compress_ms},
                        {"self_calibrated", r.self_calibrated},
                        {"context_ids", r.context_ids},
                        {"layers", layers}});
    }
    std::vector<std::string> texts;
    texts.reserve(o.token_texts.size());
    for (const QString& t : o.token_texts) texts.push_back(t.toStdString());
    nlohmann::json j = {{"basis_source", o.result.basis_source},
                        {"runs", runs},
                        {"token_texts", texts},
                        {"model_dir", o.model_dir.toStdString()},
                        {"wall_s", o.wall_s}};
    if (o.needle_span) j["needle_span"] = {o.needle_span->first, o.needle_span->second};
    return j;
}

std::shared_ptr<RunOutcome> outcome_from_json(const nlohmann::json& j, const CompareRequest& request,
                                              const std::string& where) {
    auto o = std::make_shared<RunOutcome>();
    o->request = request;
    o->result.basis_source = field<std::string>(j, "basis_source", where, "");
    o->model_dir = QString::fromStdString(field<std::string>(j, "model_dir", where, ""));
    o->wall_s = field<double>(j, "wall_s", where, 0);
    if (!j.contains("runs") || !j["runs"].is_array()) throw Error(where + ": 'runs' is missing");
    for (size_t i = 0; i < j["runs"].size(); ++i) {
        const auto& rj = j["runs"][i];
        const std::string w = where + " runs[" + std::to_string(i) + "]";
        MethodRun r;
        r.method = field<std::string>(rj, "method", w, "");
        if (r.method.empty()) throw Error(w + ": no method name");
        r.budget = field<double>(rj, "budget", w, 0);
        r.footprint_fraction = field<double>(rj, "footprint_fraction", w, 0);
        r.stored_bytes = field<int64_t>(rj, "stored_bytes", w, 0);
        r.full_bytes = field<int64_t>(rj, "full_bytes", w, 0);
        r.answers = field<std::vector<std::string>>(rj, "answers", w, {});
        r.answer_ids = field<std::vector<std::vector<int64_t>>>(rj, "answer_ids", w, {});
        r.correct = field<std::vector<int>>(rj, "correct", w, {});
        r.prefill_ms = field<double>(rj, "prefill_ms", w, 0);
        r.compress_ms = field<double>(rj, "compress_ms", w, 0);
        r.self_calibrated = field<bool>(rj, "self_calibrated", w, false);
        r.context_ids = field<std::vector<int64_t>>(rj, "context_ids", w, {});
        if (rj.contains("layers"))
            for (size_t l = 0; l < rj["layers"].size(); ++l)
                r.layers.push_back(
                    diagnostics_from_json(rj["layers"][l], w + " layers[" + std::to_string(l) + "]"));
        o->result.runs.push_back(std::move(r));
    }
    for (const auto& t : field<std::vector<std::string>>(j, "token_texts", where, {}))
        o->token_texts.push_back(QString::fromStdString(t));
    if (j.contains("needle_span") && j["needle_span"].is_array() && j["needle_span"].size() == 2)
        o->needle_span = std::make_pair(j["needle_span"][0].get<int>(), j["needle_span"][1].get<int>());
    return o;
}

}  // namespace

nlohmann::json diagnostics_json(const LayerDiagnostics& d) {
    nlohmann::json j = varrate::to_json(d, true);
    if (d.kept.defined()) {
        const at::Tensor k = d.kept.to(at::kCPU).to(at::kLong).contiguous();
        j["kept_shape"] = k.sizes().vec();
        j["kept"] = std::vector<int64_t>(k.data_ptr<int64_t>(), k.data_ptr<int64_t>() + k.numel());
    }
    return j;
}

LayerDiagnostics diagnostics_from_json(const nlohmann::json& j, const std::string& where) {
    LayerDiagnostics d;
    d.method = field<std::string>(j, "method", where, "");
    d.layer = field<int64_t>(j, "layer", where, 0);
    d.n_tokens = field<int64_t>(j, "n_tokens", where, 0);
    d.dim = field<int64_t>(j, "dim", where, 0);
    d.budget_B = field<int64_t>(j, "budget_B", where, 0);
    d.sum_ranks = field<int64_t>(j, "sum_ranks", where, 0);
    d.n_exact = field<int64_t>(j, "n_exact", where, 0);
    d.n_coded = field<int64_t>(j, "n_coded", where, 0);
    d.min_rank = field<int64_t>(j, "min_rank", where, 0);
    d.max_rank = field<int64_t>(j, "max_rank", where, 0);
    d.mean_rank = field<double>(j, "mean_rank", where, 0);
    d.floor_share = field<double>(j, "floor_share", where, 0);
    d.index_bytes = field<int64_t>(j, "index_bytes", where, 0);
    d.stored_bytes = field<int64_t>(j, "stored_bytes", where, 0);
    d.full_bytes = field<int64_t>(j, "full_bytes", where, 0);
    d.footprint = field<double>(j, "footprint", where, 0);
    d.mean_rel_error = field<double>(j, "mean_rel_error", where, 0);
    if (j.contains("timing_ms")) {
        const auto& t = j["timing_ms"];
        d.timing.anchor_search = field<double>(t, "anchor_search", where, 0);
        d.timing.salience = field<double>(t, "salience", where, 0);
        d.timing.water_filling = field<double>(t, "water_filling", where, 0);
        d.timing.projection = field<double>(t, "projection", where, 0);
        d.timing.reconstruction = field<double>(t, "reconstruction", where, 0);
    }
    try {
        if (j.contains("salience")) d.salience = float_tensor(j["salience"]);
        if (j.contains("salience_norm")) d.salience_norm = float_tensor(j["salience_norm"]);
        if (j.contains("rank")) d.rank = long_tensor(j["rank"]);
        if (j.contains("exact") && !j["exact"].is_null()) d.exact = long_tensor(j["exact"]).to(at::kBool);
        if (j.contains("rel_error")) d.rel_error = float_tensor(j["rel_error"]);
        if (j.contains("kept") && j.contains("kept_shape"))
            d.kept = long_tensor(j["kept"]).view(j["kept_shape"].get<std::vector<int64_t>>()).to(at::kBool);
    } catch (const nlohmann::json::exception&) {
        throw Error(where + ": per-token diagnostics are malformed");
    } catch (const c10::Error&) {
        throw Error(where + ": per-token diagnostics have inconsistent shapes");
    }
    return d;
}

nlohmann::json to_json(const RunSettings& s) {
    const CodecSettings& c = s.codec;
    return {{"questions", s.questions},
            {"answers", s.answers},
            {"answer_prefixes", s.answer_prefixes},
            {"methods", s.methods},
            {"codec",
             {{"budget", c.budget},
              {"r_min", c.r_min},
              {"rank", c.rank},
              {"stride", c.stride},
              {"anchors", c.anchors},
              {"window", c.window},
              {"obs_window", c.obs_window},
              {"pool_kernel", c.pool_kernel},
              {"paper_accounting", c.paper_accounting},
              {"precise_timing", c.precise_timing}}},
            {"mode", to_string(s.mode)},
            {"max_new_tokens", s.max_new_tokens},
            {"chat", s.chat},
            {"device", s.device},
            {"dtype", s.dtype},
            {"basis", to_string(s.basis)},
            {"basis_file", s.basis_file}};
}

RunSettings run_settings_from_json(const nlohmann::json& j, const std::string& where) {
    RunSettings s;
    s.questions = field<std::vector<std::string>>(j, "questions", where, {});
    s.answers = field<std::vector<std::string>>(j, "answers", where, {});
    s.answer_prefixes = field<std::vector<std::string>>(j, "answer_prefixes", where, {});
    s.methods = field<std::vector<std::string>>(j, "methods", where, s.methods);
    if (j.contains("codec")) {
        const auto& c = j["codec"];
        const std::string w = where + " codec";
        s.codec.budget = field<double>(c, "budget", w, s.codec.budget);
        s.codec.r_min = field<int64_t>(c, "r_min", w, s.codec.r_min);
        s.codec.rank = field<int64_t>(c, "rank", w, s.codec.rank);
        s.codec.stride = field<int64_t>(c, "stride", w, s.codec.stride);
        s.codec.anchors = field<int64_t>(c, "anchors", w, s.codec.anchors);
        s.codec.window = field<int64_t>(c, "window", w, s.codec.window);
        s.codec.obs_window = field<int64_t>(c, "obs_window", w, s.codec.obs_window);
        s.codec.pool_kernel = field<int64_t>(c, "pool_kernel", w, s.codec.pool_kernel);
        s.codec.paper_accounting = field<bool>(c, "paper_accounting", w, s.codec.paper_accounting);
        s.codec.precise_timing = field<bool>(c, "precise_timing", w, s.codec.precise_timing);
    }
    s.mode = parse_mode(field<std::string>(j, "mode", where, "query-aware"));
    s.max_new_tokens = field<int64_t>(j, "max_new_tokens", where, s.max_new_tokens);
    s.chat = field<bool>(j, "chat", where, false);
    s.device = field<std::string>(j, "device", where, "cpu");
    s.dtype = field<std::string>(j, "dtype", where, "fp32");
    s.basis = parse_basis_choice(field<std::string>(j, "basis", where, "shipped"));
    s.basis_file = field<std::string>(j, "basis_file", where, "");
    return s;
}

void write_file_atomic_qt(const QString& path, const QByteArray& bytes) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly))
        throw Error(path.toStdString() + ": cannot write (" + f.errorString().toStdString() + ")");
    if (f.write(bytes) != bytes.size() || !f.commit())
        throw Error(path.toStdString() + ": write failed (" + f.errorString().toStdString() + ")");
}

void save_session(const QString& path, const StudioSession& s) {
    nlohmann::json j = {{"format", "varrate-studio-session"},
                        {"version", kFormatVersion},
                        {"model_dir", s.model_dir.toStdString()},
                        {"document", s.document.toStdString()},
                        {"document_source", s.document_source.toStdString()},
                        {"needle", s.needle.toStdString()},
                        {"settings", to_json(s.settings)}};
    if (s.outcome) {
        j["results"] = varrate::to_json(s.outcome->result, s.outcome->request);  // `varrate compare --json`
        const CompareRequest& q = s.outcome->request;
        RunSettings rs;
        rs.questions = q.questions;
        rs.answers = q.answers;
        rs.answer_prefixes = q.answer_prefixes;
        rs.methods = q.methods;
        rs.codec = q.settings;
        rs.mode = q.mode;
        rs.max_new_tokens = q.max_new_tokens;
        rs.chat = q.chat;
        j["request"] = to_json(rs);
        j["request"]["context"] = s.outcome->request.context;
        j["restore"] = outcome_json(*s.outcome);
    }
    write_file_atomic_qt(path, QByteArray::fromStdString(j.dump(1) + "\n"));
}

StudioSession load_session(const QString& path) {
    const std::string where = path.toStdString();
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        throw Error(where + ": cannot open session file (" + f.errorString().toStdString() + ")");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f.readAll().toStdString());
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(where + ": not a JSON file (" + e.what() + ")");
    }
    if (!j.is_object() || j.value("format", "") != "varrate-studio-session")
        throw Error(where + ": not a VarRate Studio session (no \"format\": \"varrate-studio-session\")");
    if (j.value("version", 0) > kFormatVersion)
        throw Error(where + ": session format version " + std::to_string(j.value("version", 0)) +
                    " is newer than this app's " + std::to_string(kFormatVersion));
    StudioSession s;
    s.model_dir = QString::fromStdString(field<std::string>(j, "model_dir", where, ""));
    s.document = QString::fromStdString(field<std::string>(j, "document", where, ""));
    s.document_source = QString::fromStdString(field<std::string>(j, "document_source", where, ""));
    s.needle = QString::fromStdString(field<std::string>(j, "needle", where, ""));
    if (j.contains("settings")) s.settings = run_settings_from_json(j["settings"], where + " settings");
    if (j.contains("restore") && j.contains("request")) {
        const RunSettings rs = run_settings_from_json(j["request"], where + " request");
        const CompareRequest req = rs.request(field<std::string>(j["request"], "context", where, ""));
        s.outcome = outcome_from_json(j["restore"], req, where + " restore");
    }
    return s;
}

}  // namespace varrate::viz

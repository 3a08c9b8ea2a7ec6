#include "viz/session_file.h"

#include <QFile>
#include <QSaveFile>

#include "base/error.h"
#include "base/json_field.h"
#include "codec/codec_json.h"

namespace varrate::viz {

namespace {

constexpr int kFormatVersion = 1;

nlohmann::json outcome_json(const RunOutcome& o) {
    nlohmann::json runs = nlohmann::json::array();
    for (const MethodRun& r : o.result.runs) runs.push_back(to_json(r, true));
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
    o->result.basis_source = json_field<std::string>(j, "basis_source", where, "");
    o->model_dir = QString::fromStdString(json_field<std::string>(j, "model_dir", where, ""));
    o->wall_s = json_field<double>(j, "wall_s", where, 0);
    if (!j.contains("runs") || !j["runs"].is_array()) throw Error(where + ": 'runs' is missing");
    for (size_t i = 0; i < j["runs"].size(); ++i)
        o->result.runs.push_back(
            method_run_from_json(j["runs"][i], where + " runs[" + std::to_string(i) + "]"));
    for (const auto& t : json_field<std::vector<std::string>>(j, "token_texts", where, {}))
        o->token_texts.push_back(QString::fromStdString(t));
    if (const auto span = json_field<std::vector<int>>(j, "needle_span", where, {}); span.size() == 2)
        o->needle_span = std::make_pair(span[0], span[1]);
    return o;
}

}  // namespace

nlohmann::json to_json(const RunSettings& s) {
    return {{"questions", s.questions},
            {"answers", s.answers},
            {"answer_prefixes", s.answer_prefixes},
            {"methods", s.methods},
            {"codec", varrate::to_json(s.codec)},
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
    s.questions = json_field<std::vector<std::string>>(j, "questions", where, {});
    s.answers = json_field<std::vector<std::string>>(j, "answers", where, {});
    s.answer_prefixes = json_field<std::vector<std::string>>(j, "answer_prefixes", where, {});
    s.methods = json_field<std::vector<std::string>>(j, "methods", where, s.methods);
    if (j.contains("codec")) s.codec = codec_settings_from_json(j["codec"], where + " codec", s.codec);
    s.mode = parse_mode(json_field<std::string>(j, "mode", where, "query-aware"));
    s.max_new_tokens = json_field<int64_t>(j, "max_new_tokens", where, s.max_new_tokens);
    s.chat = json_field<bool>(j, "chat", where, false);
    s.device = json_field<std::string>(j, "device", where, "cpu");
    s.dtype = json_field<std::string>(j, "dtype", where, "fp32");
    s.basis = parse_basis_choice(json_field<std::string>(j, "basis", where, "shipped"));
    s.basis_file = json_field<std::string>(j, "basis_file", where, "");
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
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
        throw Error(where + ": not a JSON file (" + e.what() + ")");
    }
    if (!j.is_object() || j.value("format", "") != "varrate-studio-session")
        throw Error(where + ": not a VarRate Studio session (no \"format\": \"varrate-studio-session\")");
    if (j.value("version", 0) > kFormatVersion)
        throw Error(where + ": session format version " + std::to_string(j.value("version", 0)) +
                    " is newer than this app's " + std::to_string(kFormatVersion));
    StudioSession s;
    s.model_dir = QString::fromStdString(json_field<std::string>(j, "model_dir", where, ""));
    s.document = QString::fromStdString(json_field<std::string>(j, "document", where, ""));
    s.document_source = QString::fromStdString(json_field<std::string>(j, "document_source", where, ""));
    s.needle = QString::fromStdString(json_field<std::string>(j, "needle", where, ""));
    if (j.contains("settings")) s.settings = run_settings_from_json(j["settings"], where + " settings");
    if (j.contains("restore") && j.contains("request")) {
        const RunSettings rs = run_settings_from_json(j["request"], where + " request");
        const CompareRequest req = rs.request(json_field<std::string>(j["request"], "context", where, ""));
        auto outcome = outcome_from_json(j["restore"], req, where + " restore");
        // The file keeps the panel's settings, not the run's device, dtype and basis: the closest there is.
        outcome->run = s.settings;
        s.outcome = std::move(outcome);
    }
    return s;
}

}  // namespace varrate::viz

#pragma once
// One JSON file holds a whole studio session: the model path, the document, the run settings and the results
// (core/compare.h's to_json for readers of `varrate compare --json`, plus everything the views need to come
// back without re-running: per-token diagnostics of every layer, context ids and token texts). Written
// atomically (QSaveFile); reading validates and throws varrate::Error naming the file and the field.
#include <QString>

#include <memory>

#include <nlohmann/json.hpp>

#include "viz/run_panel.h"
#include "viz/run_worker.h"

namespace varrate::viz {

struct StudioSession {
    QString model_dir;
    QString document;
    QString document_source;  // file path, "generated", "pasted" or ""
    QString needle;           // the needle sentence of a generated NIAH document ("" otherwise)
    RunSettings settings;
    std::shared_ptr<const RunOutcome> outcome;  // null: no results yet
};

void save_session(const QString& path, const StudioSession& s);
StudioSession load_session(const QString& path);

nlohmann::json to_json(const RunSettings& s);
RunSettings run_settings_from_json(const nlohmann::json& j, const std::string& where);

// Writes bytes atomically (QSaveFile); throws Error naming the file.
void write_file_atomic_qt(const QString& path, const QByteArray& bytes);

}  // namespace varrate::viz

#include "viz/app_settings.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStringDecoder>

namespace varrate::viz {

namespace {

std::unique_ptr<QSettings> open_settings(const QString& ini_file) {
    return ini_file.isEmpty() ? std::make_unique<QSettings>("VarRate", "VarRate Studio")
                              : std::make_unique<QSettings>(ini_file, QSettings::IniFormat);
}

// Why a settings file cannot be trusted, or "": QSettings' own status, then what its lenient INI reader lets
// through (NUL bytes, invalid UTF-8: a truncated or overwritten file).
QString settings_problem(const QSettings& s) {
    if (s.status() == QSettings::FormatError) return "it is not a settings file";
    if (s.status() == QSettings::AccessError) return "it cannot be read";
    QFile f(s.fileName());
    if (!f.exists() || !f.open(QIODevice::ReadOnly)) return {};
    const QByteArray bytes = f.readAll();
    if (bytes.contains('\0')) return "it holds binary bytes";
    QStringDecoder utf8(QStringDecoder::Utf8);
    (void)utf8.decode(bytes);
    if (utf8.hasError()) return "it is not UTF-8 text";
    return {};
}

}  // namespace

AppSettings::AppSettings(const QString& ini_file) : s_(open_settings(ini_file)) {
    const QString problem = settings_problem(*s_);
    if (problem.isEmpty()) return;
    const QString file = s_->fileName();
    const QString aside = file + ".corrupt-" + QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
    s_.reset();
    const bool moved = QFile::rename(file, aside) || QFile::remove(file);
    s_ = open_settings(ini_file);
    reset_message_ = "The settings file " + file + " was reset to defaults: " + problem +
                     (moved && QFile::exists(aside) ? " (kept as " + aside + ")." : ".");
}

QString AppSettings::autosave_file() const {
    const QFileInfo f(s_->fileName());  // one per settings file: "studio.ini" -> "studio.autosave.json"
    return f.absolutePath() + "/" + f.completeBaseName() + ".autosave.json";
}

QStringList AppSettings::recent_models() const {
    return s_->value("models/recent").toStringList();
}

void AppSettings::add_recent_model(const QString& dir) {
    const QString clean = QDir::cleanPath(dir);
    QStringList list = recent_models();
    list.removeAll(clean);
    list.prepend(clean);
    while (list.size() > kMaxRecent) list.removeLast();
    s_->setValue("models/recent", list);
}

QString AppSettings::last_model() const {
    const QStringList list = recent_models();
    return list.isEmpty() ? QString() : list.first();
}

QString AppSettings::last_document() const {
    return s_->value("documents/last").toString();
}
void AppSettings::set_last_document(const QString& path) {
    s_->setValue("documents/last", path);
}

QString AppSettings::theme() const {
    const QString t = s_->value("view/theme", "dark").toString();
    return t == "light" ? "light" : "dark";
}
void AppSettings::set_theme(const QString& theme) {
    s_->setValue("view/theme", theme);
}

QByteArray AppSettings::geometry() const {
    return s_->value("window/geometry").toByteArray();
}
void AppSettings::set_geometry(const QByteArray& g) {
    s_->setValue("window/geometry", g);
}
QByteArray AppSettings::window_state() const {
    return s_->value("window/state").toByteArray();
}
void AppSettings::set_window_state(const QByteArray& st) {
    s_->setValue("window/state", st);
}

QString AppSettings::last_dir() const {
    return s_->value("dialogs/last_dir", QDir::homePath()).toString();
}
void AppSettings::set_last_dir(const QString& dir) {
    s_->setValue("dialogs/last_dir", dir);
}

void AppSettings::sync() {
    s_->sync();
}

}  // namespace varrate::viz

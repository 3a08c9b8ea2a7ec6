#include "viz/app_settings.h"

#include <QDir>

namespace varrate::viz {

AppSettings::AppSettings(const QString& ini_file)
    : s_(ini_file.isEmpty() ? std::make_unique<QSettings>("VarRate", "VarRate Studio")
                            : std::make_unique<QSettings>(ini_file, QSettings::IniFormat)) {}

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

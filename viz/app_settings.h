#pragma once
// What the desktop app remembers between runs (QSettings): recent models, the last document, the theme and
// the window geometry. An explicit ini file keeps tests and scripted screenshots away from the user's
// settings.
#include <QByteArray>
#include <QSettings>
#include <QString>
#include <QStringList>

#include <memory>

namespace varrate::viz {

class AppSettings {
  public:
    // ini_file empty: the platform's per-user store ("VarRate", "VarRate Studio").
    explicit AppSettings(const QString& ini_file = {});

    QStringList recent_models() const;  // most recent first, at most kMaxRecent
    void add_recent_model(const QString& dir);
    QString last_model() const;  // "" when none
    QString last_document() const;
    void set_last_document(const QString& path);
    QString theme() const;  // "dark" (default) or "light"
    void set_theme(const QString& theme);
    QByteArray geometry() const;
    void set_geometry(const QByteArray& geometry);
    QByteArray window_state() const;
    void set_window_state(const QByteArray& state);
    QString last_dir() const;  // the folder of the last file dialog
    void set_last_dir(const QString& dir);
    void sync();

    static constexpr int kMaxRecent = 8;

  private:
    std::unique_ptr<QSettings> s_;
};

}  // namespace varrate::viz

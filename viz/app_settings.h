#pragma once
// What the desktop app remembers between runs (QSettings): recent models, the last document, the theme and
// the window geometry. An explicit ini file keeps tests and scripted screenshots away from the user's
// settings. A settings file that cannot be read (a format error, binary bytes, invalid UTF-8) is set aside as
// "<file>.corrupt-<time>" and the app starts from defaults, saying so (reset_message).
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
    // Why the settings were reset at start-up ("" when they were read normally).
    QString reset_message() const { return reset_message_; }
    // The session the app autosaves while it runs and removes when it closes normally, beside the settings
    // file ("<name>.autosave.json"): finding it at start-up means the last run ended without closing.
    QString autosave_file() const;

    static constexpr int kMaxRecent = 8;

  private:
    std::unique_ptr<QSettings> s_;
    QString reset_message_;
};

}  // namespace varrate::viz

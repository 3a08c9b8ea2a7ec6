#pragma once
// Export of any widget (chart, heatmap, document view) to PNG, SVG, PDF or the clipboard. Custom-painted
// views are rendered through their paint code, so SVG and PDF keep vector lines and text. Files are written
// atomically (QSaveFile): a failed export leaves an existing file untouched.
#include <QImage>
#include <QString>

#include <functional>

class QMenu;
class QWidget;

namespace varrate::viz {

enum class ExportFormat { Png, Svg, Pdf };

// From the file suffix (.png, .svg, .pdf; case-insensitive). Throws varrate::Error for anything else.
ExportFormat export_format_for(const QString& path);
// The widget rendered at `scale` x its size (device pixel ratio set), on its palette's window colour.
QImage render_widget(QWidget* widget, double scale = 2.0);
// Writes the widget to `path` in `format` (or the suffix's). Throws varrate::Error naming the path on
// failure.
void export_widget(QWidget* widget, const QString& path, ExportFormat format);
void export_widget(QWidget* widget, const QString& path);
// Puts the widget's image on the clipboard.
void copy_widget_to_clipboard(QWidget* widget);
// Adds a context menu to the widget with "Export PNG/SVG/PDF..." and "Copy image" (file dialogs; errors in
// a message box), so every view exports the same way. `extra`, when set, adds a view's own entries (its data
// as CSV, ...) after a separator each time the menu opens.
void install_export_menu(QWidget* widget, const QString& base_name, std::function<void(QMenu*)> extra = {});

}  // namespace varrate::viz

// Exports go through QWidget::render, so every view exports exactly what it paints; the file is written into
// a QSaveFile and only committed when the painter finished without error.
#include "viz/chart_export.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QPdfWriter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>

#include "base/error.h"

namespace varrate::viz {

namespace {

[[noreturn]] void fail(const QString& path, const QString& what) {
    throw Error(QStringLiteral("export to %1: %2").arg(path, what).toStdString());
}

void open_for_write(QSaveFile& file, const QString& path) {
    if (!file.open(QIODevice::WriteOnly)) fail(path, file.errorString());
}

void commit(QSaveFile& file, const QString& path) {
    if (!file.commit()) fail(path, file.errorString());
}

QSize export_size(QWidget* widget) {
    widget->ensurePolished();
    const QSize s = widget->size();
    if (s.width() < 1 || s.height() < 1) fail(widget->objectName(), QStringLiteral("the widget has no size"));
    return s;
}

}  // namespace

ExportFormat export_format_for(const QString& path) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix == QLatin1String("png")) return ExportFormat::Png;
    if (suffix == QLatin1String("svg")) return ExportFormat::Svg;
    if (suffix == QLatin1String("pdf")) return ExportFormat::Pdf;
    fail(path, QStringLiteral("unknown image format '%1' (use .png, .svg or .pdf)").arg(suffix));
}

QImage render_widget(QWidget* widget, double scale) {
    const QSize s = export_size(widget);
    QImage image(s * scale, QImage::Format_ARGB32_Premultiplied);
    image.setDevicePixelRatio(scale);
    image.fill(widget->palette().color(QPalette::Window));
    QPainter p(&image);
    widget->render(&p, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    p.end();
    return image;
}

void export_widget(QWidget* widget, const QString& path, ExportFormat format) {
    const QSize size = export_size(widget);
    QSaveFile file(path);
    switch (format) {
        case ExportFormat::Png: {
            const QImage image = render_widget(widget, 2.0);
            open_for_write(file, path);
            if (!image.save(&file, "PNG")) {
                file.cancelWriting();
                fail(path, QStringLiteral("PNG encoding failed"));
            }
            break;
        }
        case ExportFormat::Svg: {
            open_for_write(file, path);
            QSvgGenerator svg;
            svg.setOutputDevice(&file);
            svg.setSize(size);
            svg.setViewBox(QRect(QPoint(0, 0), size));
            svg.setTitle(widget->windowTitle().isEmpty() ? QStringLiteral("VarRate Studio")
                                                         : widget->windowTitle());
            QPainter p;
            if (!p.begin(&svg)) {
                file.cancelWriting();
                fail(path, QStringLiteral("cannot start the SVG painter"));
            }
            p.fillRect(QRect(QPoint(0, 0), size), widget->palette().color(QPalette::Window));
            widget->render(&p, QPoint(), QRegion(), QWidget::DrawChildren);
            p.end();
            break;
        }
        case ExportFormat::Pdf: {
            open_for_write(file, path);
            QPdfWriter pdf(&file);
            // One page the size of the widget, 1 px = 1 pt, no margins.
            pdf.setResolution(72);
            pdf.setPageSize(QPageSize(QSizeF(size), QPageSize::Point, QString(), QPageSize::ExactMatch));
            pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
            pdf.setCreator(QStringLiteral("VarRate Studio"));
            QPainter p;
            if (!p.begin(&pdf)) {
                file.cancelWriting();
                fail(path, QStringLiteral("cannot start the PDF painter"));
            }
            p.fillRect(QRect(QPoint(0, 0), size), widget->palette().color(QPalette::Window));
            widget->render(&p, QPoint(), QRegion(), QWidget::DrawChildren);
            p.end();
            break;
        }
    }
    commit(file, path);
}

void export_widget(QWidget* widget, const QString& path) {
    export_widget(widget, path, export_format_for(path));
}

void copy_widget_to_clipboard(QWidget* widget) {
    QApplication::clipboard()->setImage(render_widget(widget, 2.0));
}

void install_export_menu(QWidget* widget, const QString& base_name,
                         std::function<void(QMenu& menu)> extra_actions) {
    widget->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(
        widget, &QWidget::customContextMenuRequested, widget,
        [widget, base_name, extra_actions = std::move(extra_actions)](const QPoint& at) {
            QMenu menu(widget);
            struct Choice {
                QString label, filter, suffix;
            };
            const Choice choices[] = {
                {QStringLiteral("Export PNG..."), QStringLiteral("PNG image (*.png)"), QStringLiteral("png")},
                {QStringLiteral("Export SVG..."), QStringLiteral("SVG image (*.svg)"), QStringLiteral("svg")},
                {QStringLiteral("Export PDF..."), QStringLiteral("PDF document (*.pdf)"),
                 QStringLiteral("pdf")}};
            for (const Choice& c : choices) {
                menu.addAction(c.label, widget, [widget, base_name, c] {
                    const QString path = QFileDialog::getSaveFileName(
                        widget, c.label, base_name + QLatin1Char('.') + c.suffix, c.filter);
                    if (path.isEmpty()) return;
                    try {
                        export_widget(widget, path);
                    } catch (const std::exception& e) {
                        QMessageBox::warning(widget, QStringLiteral("Export failed"),
                                             QString::fromStdString(e.what()));
                    }
                });
            }
            if (extra_actions) extra_actions(menu);
            menu.addSeparator();
            menu.addAction(QStringLiteral("Copy image"), widget,
                           [widget] { copy_widget_to_clipboard(widget); });
            menu.exec(widget->mapToGlobal(at));
        });
}

}  // namespace varrate::viz

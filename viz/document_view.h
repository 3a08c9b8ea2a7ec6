#pragma once
// The document as text, each token shaded by salience, allocated rank or reconstruction error of one method
// (one layer or the mean over layers), with a labelled colour bar. Hover shows the token's values and moves
// the shared cursor; the needle is boxed and exactly stored tokens (anchors, window) are underlined.
#include <QAbstractScrollArea>
#include <QString>

#include <vector>

#include "viz/run_model.h"

namespace varrate::viz {

class DocumentView : public QAbstractScrollArea {
    Q_OBJECT
  public:
    DocumentView(RunModel* model, PositionAxis* axis, QWidget* parent = nullptr);

    void set_method(const QString& method);
    void set_metric(TokenMetric metric);  // Salience shades by salience_norm; Rank by rank / D
    void set_layer(int layer);            // -1 = mean over layers
    QString method() const { return method_; }
    TokenMetric metric() const { return metric_; }
    int layer() const { return layer_; }

    // Token under a viewport point, or -1.
    int token_at(const QPoint& viewport_pos) const;
    // Where a token is drawn, in viewport coordinates (empty when it is not laid out).
    QRect token_rect(int position) const;
    // The hover text of a token: position, text with visible whitespace, salience, rank, exact/coded, error.
    QString token_tooltip(int position) const;

  protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    bool viewportEvent(QEvent* event) override;
    void changeEvent(QEvent* event) override;

  private:
    struct Line {
        int first = 0, last = 0;  // tokens [first, last)
        int y = 0;                // top in document coordinates
    };
    void reload();                  // series of the current method/metric/layer
    void relayout();                // layout when the width or the tokens changed; scroll range
    void layout_tokens(int width);  // token boxes and lines for a text width
    void scroll_to_token(int position);
    int line_of(int position) const;
    int colour_bar_height() const;

    RunModel* model_;
    PositionAxis* axis_;
    QString method_;
    TokenMetric metric_ = TokenMetric::Salience;
    int layer_ = -1;

    std::vector<float> shade_;  // [L] in 0..1
    std::vector<float> salience_, rank_, error_;
    std::vector<uint8_t> exact_;
    double shade_min_ = 0, shade_max_ = 1;  // values of shades 0 and 1 (colour bar labels)
    bool shade_log_ = false;                // salience is shaded on a log scale

    std::vector<QRect> boxes_;  // [L] in document coordinates
    std::vector<Line> lines_;
    int layout_width_ = -1;
    int64_t laid_out_revision_ = -1;  // RunModel::tokens_revision() of the layout
    int line_height_ = 0;
    int hover_ = -1;
};

}  // namespace varrate::viz

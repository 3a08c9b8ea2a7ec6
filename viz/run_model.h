#pragma once
// The desktop app's data model: the results of one comparison run, exposed as per-token series for the views,
// and the shared token-position axis (visible range + cursor) that links every view. Widgets never reach into
// core results directly; they read series from here and react to its signals (PlotJuggler-style separation).
#include <QObject>
#include <QString>
#include <QStringList>

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "core/compare.h"

namespace varrate {
class Tokenizer;
}

namespace varrate::viz {

// One display string per token id, as the rank log writes it (SentencePiece word boundaries kept).
std::vector<QString> token_display_texts(const Tokenizer& tokenizer, const std::vector<int64_t>& ids);
// A token with its whitespace made visible (space ·, newline ↵, tab →) for tooltips and tables.
QString visible_whitespace(const QString& text);
// Token span [begin, end) covering the first occurrence of `text` in the concatenated token texts (e.g. the
// needle sentence), or nothing when it does not occur.
std::optional<std::pair<int, int>> text_token_span(const std::vector<QString>& token_texts,
                                                   const QString& text);

enum class TokenMetric { Salience, SalienceNorm, Rank, RelError };

// Allocated ranks of one method, layer by layer (layers sorted, those without per-token ranks left out).
struct RankGrid {
    int n_layer = 0, n_tokens = 0;
    std::vector<int32_t> ranks;  // [n_layer, n_tokens] row-major
    int at(int layer, int position) const {
        return ranks[static_cast<size_t>(layer) * static_cast<size_t>(n_tokens) +
                     static_cast<size_t>(position)];
    }
};
// Display name of a metric ("salience", "rank", ...).
QString metric_name(TokenMetric metric);

class RunModel : public QObject {
    Q_OBJECT
  public:
    explicit RunModel(QObject* parent = nullptr);

    // token_texts: one display string per context token (same length as the runs' context_ids).
    void set_result(const CompareResult& result, const CompareRequest& request,
                    std::vector<QString> token_texts);
    void clear();
    bool has_result() const { return has_result_; }
    // Changes whenever the token texts do (not on a live re-allocation of the same tokens): views that lay
    // the text out redo it only then.
    int64_t tokens_revision() const { return tokens_revision_; }

    const CompareResult& result() const { return result_; }
    const CompareRequest& request() const { return request_; }
    QStringList methods() const;
    int n_tokens() const;
    int n_layer() const;
    const QString& token_text(int position) const;
    // The needle in token positions [begin, end), when the document has one (see text_token_span). It is
    // kept by set_result (set it for each document; clear() drops it).
    void set_needle_span(std::optional<std::pair<int, int>> span);
    std::optional<std::pair<int, int>> needle_span() const { return needle_; }

    // Per-token values of one method; layer -1 = mean over layers. Empty when the method has no such metric.
    std::vector<float> series(const QString& method, TokenMetric metric, int layer) const;
    // 1 = stored exactly / kept; layer -1: exact in at least half of the layers.
    std::vector<uint8_t> exact_mask(const QString& method, int layer) const;
    // Ranks of every layer of one method (empty grid when the method has none).
    RankGrid rank_grid(const QString& method) const;
    const MethodRun* run(const QString& method) const;
    // The full (uncompressed) dimension D of a coded token (0 without a result).
    int joint_dim() const;
    // A frozen result (pin) on the same tokens, whose series the rank and error charts overlay; label
    // e.g. "pinned κ 0.20". Kept across set_result (clear it with nullopt); clear() drops it.
    void set_pinned(std::optional<CompareResult> pinned, const QString& label = {});
    bool has_pinned() const { return pinned_.has_value(); }
    const QString& pinned_label() const { return pinned_label_; }
    std::vector<float> pinned_series(const QString& method, TokenMetric metric, int layer) const;
    // Rank floor r_min of the request's settings.
    int rank_floor() const { return static_cast<int>(request_.settings.r_min); }
    // Uniform rank B/|C| of one layer (layer -1: mean over layers); 0 when the method codes no token.
    double uniform_rank(const QString& method, int layer) const;

  Q_SIGNALS:
    void changed();

  private:
    bool has_result_ = false;
    int64_t tokens_revision_ = 0;
    CompareResult result_;
    CompareRequest request_;
    std::vector<QString> token_texts_;
    std::optional<std::pair<int, int>> needle_;
    std::optional<CompareResult> pinned_;
    QString pinned_label_;
    // series() results by (method, metric, layer): views ask for the same series on every setter change.
    mutable std::map<std::tuple<QString, int, int>, std::vector<float>> series_cache_;
};

// Visible token range [begin, end) and cursor, shared by every position-axis view.
class PositionAxis : public QObject {
    Q_OBJECT
  public:
    explicit PositionAxis(QObject* parent = nullptr);
    void set_length(int n_tokens);  // resets the view to everything
    int length() const { return length_; }
    double begin() const { return begin_; }
    double end() const { return end_; }
    int cursor() const { return cursor_; }
    void set_range(double begin, double end);  // clamped to [0, length], minimum width 8 tokens
    void zoom(double factor, double anchor);   // factor < 1 zooms in around anchor (a position)
    void pan(double delta_tokens);
    void set_cursor(int position);           // -1 = none
    void reset() { set_range(0, length_); }  // shows every token
    double width() const { return end_ - begin_; }

  Q_SIGNALS:
    void range_changed(double begin, double end);
    void cursor_changed(int position);

  private:
    int length_ = 0;
    double begin_ = 0, end_ = 0;
    int cursor_ = -1;
};

}  // namespace varrate::viz

// RunModel: per-token series of a comparison (one layer or the mean over layers), cached per request; and the
// shared position axis with its clamping rules.
#include "viz/run_model.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/stack.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "core/token_text.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate::viz {

std::vector<QString> token_display_texts(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
    std::vector<QString> out;
    out.reserve(ids.size());
    for (const std::string& t : varrate::token_display_texts(tokenizer, ids))
        out.push_back(QString::fromStdString(t));
    return out;
}

QString visible_whitespace(const QString& text) {
    QString out;
    out.reserve(text.size());
    for (QChar c : text) {
        if (c == QLatin1Char(' '))
            out += QChar(0x00B7);
        else if (c == QLatin1Char('\n'))
            out += QChar(0x21B5);
        else if (c == QLatin1Char('\t'))
            out += QChar(0x2192);
        else if (c == QLatin1Char('\r'))
            out += QStringLiteral("\\r");
        else
            out += c;
    }
    return out;
}

std::optional<std::pair<int, int>> text_token_span(const std::vector<QString>& token_texts,
                                                   const QString& text) {
    std::vector<std::string> texts;
    texts.reserve(token_texts.size());
    for (const QString& t : token_texts) texts.push_back(t.toStdString());
    const auto span = find_text_token_span(texts, text.toStdString());
    if (!span) return std::nullopt;
    return std::make_pair(static_cast<int>(span->first), static_cast<int>(span->second));
}

QString metric_name(TokenMetric metric) {
    switch (metric) {
        case TokenMetric::Salience:
            return QStringLiteral("salience");
        case TokenMetric::SalienceNorm:
            return QStringLiteral("normalised salience");
        case TokenMetric::Rank:
            return QStringLiteral("rank");
        case TokenMetric::RelError:
            return QStringLiteral("reconstruction error");
    }
    return {};
}

// --- RunModel ---

RunModel::RunModel(QObject* parent) : QObject(parent) {}

void RunModel::set_result(const CompareResult& result, const CompareRequest& request,
                          std::vector<QString> token_texts) {
    size_t n = 0;
    for (const MethodRun& r : result.runs) n = std::max(n, r.context_ids.size());
    if (!token_texts.empty() && token_texts.size() != n)
        throw Error("run model: " + std::to_string(token_texts.size()) + " token texts for a context of " +
                    std::to_string(n) + " tokens");
    for (const MethodRun& r : result.runs)
        for (const LayerDiagnostics& d : r.layers)
            if (d.n_tokens != static_cast<int64_t>(n))
                throw Error("run model: method '" + r.method + "' layer " + std::to_string(d.layer) +
                            " has " + std::to_string(d.n_tokens) + " tokens, the context has " +
                            std::to_string(n));
    if (token_texts.empty()) {
        token_texts.reserve(n);
        const std::vector<int64_t>* ids = nullptr;
        for (const MethodRun& r : result.runs)
            if (r.context_ids.size() == n) ids = &r.context_ids;
        for (size_t i = 0; i < n; ++i)
            token_texts.push_back(ids ? QStringLiteral("[%1]").arg((*ids)[i]) : QStringLiteral("?"));
    }
    result_ = result;
    request_ = request;
    if (token_texts != token_texts_) ++tokens_revision_;
    token_texts_ = std::move(token_texts);
    series_cache_.clear();
    if (needle_ && needle_->second > static_cast<int>(n)) needle_.reset();
    has_result_ = true;
    Q_EMIT changed();
}

void RunModel::clear() {
    has_result_ = false;
    result_ = {};
    request_ = {};
    token_texts_.clear();
    ++tokens_revision_;
    series_cache_.clear();
    needle_.reset();
    pinned_.reset();
    Q_EMIT changed();
}

QStringList RunModel::methods() const {
    QStringList out;
    for (const MethodRun& r : result_.runs) out << QString::fromStdString(r.method);
    return out;
}

int RunModel::n_tokens() const {
    return static_cast<int>(token_texts_.size());
}

int RunModel::n_layer() const {
    size_t n = 0;
    for (const MethodRun& r : result_.runs) n = std::max(n, r.layers.size());
    return static_cast<int>(n);
}

const QString& RunModel::token_text(int position) const {
    static const QString kNone;
    if (position < 0 || position >= n_tokens()) return kNone;
    return token_texts_[static_cast<size_t>(position)];
}

void RunModel::set_needle_span(std::optional<std::pair<int, int>> span) {
    if (span && (span->first < 0 || span->second <= span->first)) span.reset();
    needle_ = span;
    Q_EMIT changed();
}

const MethodRun* RunModel::run(const QString& method) const {
    const std::string m = method.toStdString();
    for (const MethodRun& r : result_.runs)
        if (r.method == m) return &r;
    return nullptr;
}

namespace {

const at::Tensor& metric_tensor(const LayerDiagnostics& d, TokenMetric metric) {
    switch (metric) {
        case TokenMetric::Salience:
            return d.salience;
        case TokenMetric::SalienceNorm:
            return d.salience_norm;
        case TokenMetric::Rank:
            return d.rank;
        case TokenMetric::RelError:
            return d.rel_error;
    }
    return d.salience;
}

std::vector<float> to_floats(const at::Tensor& t) {
    const at::Tensor c = t.to(at::kFloat).contiguous().cpu();
    const float* p = c.data_ptr<float>();
    return std::vector<float>(p, p + c.numel());
}

// One method's per-token values (layer -1: mean over layers); empty when it has none of length n.
std::vector<float> series_of(const MethodRun* r, TokenMetric metric, int layer, int n) {
    std::vector<float> out;
    if (!r) return out;
    std::vector<at::Tensor> parts;
    for (const LayerDiagnostics& d : r->layers) {
        if (layer >= 0 && d.layer != layer) continue;
        const at::Tensor& t = metric_tensor(d, metric);
        if (!t.defined() || t.numel() != n) continue;
        parts.push_back(t.to(at::kFloat));
    }
    if (!parts.empty()) out = to_floats(parts.size() == 1 ? parts[0] : at::stack(parts).mean(0));
    return out;
}

}  // namespace

std::vector<float> RunModel::series(const QString& method, TokenMetric metric, int layer) const {
    const auto key = std::make_tuple(method, static_cast<int>(metric), layer);
    if (auto it = series_cache_.find(key); it != series_cache_.end()) return it->second;
    std::vector<float> out = series_of(run(method), metric, layer, n_tokens());
    series_cache_[key] = out;
    return out;
}

void RunModel::set_pinned(std::optional<CompareResult> pinned, const QString& label) {
    if (!pinned && !pinned_) return;  // nothing to redraw
    pinned_ = std::move(pinned);
    pinned_label_ = label;
    Q_EMIT changed();
}

std::vector<float> RunModel::pinned_series(const QString& method, TokenMetric metric, int layer) const {
    if (!pinned_) return {};
    const MethodRun* r = nullptr;
    for (const MethodRun& m : pinned_->runs)
        if (m.method == method.toStdString()) r = &m;
    return series_of(r, metric, layer, n_tokens());
}

std::vector<uint8_t> RunModel::exact_mask(const QString& method, int layer) const {
    std::vector<uint8_t> out;
    const MethodRun* r = run(method);
    if (!r) return out;
    std::vector<at::Tensor> parts;
    for (const LayerDiagnostics& d : r->layers) {
        if (layer >= 0 && d.layer != layer) continue;
        if (!d.exact.defined() || d.exact.numel() != n_tokens()) continue;
        parts.push_back(d.exact.to(at::kFloat));
    }
    if (parts.empty()) return out;
    const std::vector<float> share = to_floats(at::stack(parts).mean(0));
    out.reserve(share.size());
    for (float s : share) out.push_back(s >= 0.5f ? 1 : 0);
    return out;
}

RankGrid RunModel::rank_grid(const QString& method) const {
    RankGrid g;
    const MethodRun* r = run(method);
    if (!r) return g;
    g.n_tokens = n_tokens();
    std::vector<const LayerDiagnostics*> layers;
    for (const LayerDiagnostics& d : r->layers)
        if (d.rank.defined() && d.rank.numel() == g.n_tokens) layers.push_back(&d);
    std::sort(layers.begin(), layers.end(), [](auto* a, auto* b) { return a->layer < b->layer; });
    g.n_layer = static_cast<int>(layers.size());
    g.ranks.resize(static_cast<size_t>(g.n_layer) * static_cast<size_t>(g.n_tokens));
    for (int l = 0; l < g.n_layer; ++l) {
        const at::Tensor t = layers[static_cast<size_t>(l)]->rank.to(at::kInt).contiguous().cpu();
        std::copy(t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + g.n_tokens,
                  g.ranks.begin() + static_cast<ptrdiff_t>(l) * g.n_tokens);
    }
    return g;
}

int RunModel::joint_dim() const {
    for (const MethodRun& r : result_.runs)
        for (const LayerDiagnostics& d : r.layers)
            if (d.dim > 0) return static_cast<int>(d.dim);
    return 0;
}

double RunModel::uniform_rank(const QString& method, int layer) const {
    const MethodRun* r = run(method);
    if (!r) return 0;
    double sum = 0;
    int n = 0;
    for (const LayerDiagnostics& d : r->layers) {
        if (layer >= 0 && d.layer != layer) continue;
        if (d.n_coded <= 0) continue;
        sum += static_cast<double>(d.budget_B) / static_cast<double>(d.n_coded);
        ++n;
    }
    return n > 0 ? sum / n : 0;
}

// --- PositionAxis ---

PositionAxis::PositionAxis(QObject* parent) : QObject(parent) {}

void PositionAxis::set_length(int n_tokens) {
    length_ = std::max(0, n_tokens);
    begin_ = 0;
    end_ = length_;
    Q_EMIT range_changed(begin_, end_);
    if (cursor_ >= length_) set_cursor(-1);
}

void PositionAxis::set_range(double begin, double end) {
    if (!std::isfinite(begin) || !std::isfinite(end)) return;
    if (end < begin) std::swap(begin, end);
    const double min_width = std::min<double>(8, length_);
    double width = std::clamp(end - begin, min_width, static_cast<double>(length_));
    // Keep the requested centre when the width had to grow, then slide the window inside [0, length].
    const double centre = (begin + end) / 2;
    if (end - begin < width) begin = centre - width / 2;
    begin = std::clamp(begin, 0.0, length_ - width);
    end = begin + width;
    if (begin == begin_ && end == end_) return;
    begin_ = begin;
    end_ = end;
    Q_EMIT range_changed(begin_, end_);
}

void PositionAxis::zoom(double factor, double anchor) {
    if (!(factor > 0) || length_ <= 0) return;
    const double w = end_ - begin_;
    const double t = w > 0 ? (anchor - begin_) / w : 0.5;  // keep the anchor where it is on screen
    const double nw = w * factor;
    const double b = anchor - t * nw;
    set_range(b, b + nw);
}

void PositionAxis::pan(double delta_tokens) {
    if (length_ <= 0) return;
    const double w = end_ - begin_;
    const double b = std::clamp(begin_ + delta_tokens, 0.0, length_ - w);
    set_range(b, b + w);
}

void PositionAxis::set_cursor(int position) {
    if (position < -1 || position >= length_) position = -1;
    if (position == cursor_) return;
    cursor_ = position;
    Q_EMIT cursor_changed(cursor_);
}

}  // namespace varrate::viz

#include "core/suites/needle_probe.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

bool has_digit(const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::optional<std::vector<int64_t>> find_needle_value_tokens(const Tokenizer& tokenizer,
                                                             const std::vector<int64_t>& context_ids,
                                                             const std::string& needle_sentence) {
    // In the document the sentence follows a space (or opens it); byte-level BPE attaches that space to the
    // first word, SentencePiece adds its own. The last token may merge with what follows, so it is dropped.
    for (const std::string& text : {" " + needle_sentence, needle_sentence}) {
        const std::vector<int64_t> whole = tokenizer.encode(text, false);
        std::vector<int64_t> ids = whole;
        if (ids.size() > 2) ids.pop_back();
        if (ids.empty()) continue;
        const auto at = std::search(context_ids.begin(), context_ids.end(), ids.begin(), ids.end());
        if (at == context_ids.end()) continue;
        const int64_t start = at - context_ids.begin();
        std::vector<int64_t> positions;
        for (size_t i = 0; i < ids.size(); ++i)
            if (has_digit(tokenizer.decode({ids[i]}))) positions.push_back(start + static_cast<int64_t>(i));
        // The value's last digits may sit in the dropped token: take it when the context still has it.
        const size_t last = ids.size();
        if (last < whole.size() && static_cast<size_t>(start) + last < context_ids.size() &&
            context_ids[start + last] == whole[last] && has_digit(tokenizer.decode({whole[last]})))
            positions.push_back(start + static_cast<int64_t>(last));
        if (!positions.empty()) return positions;
    }
    return std::nullopt;
}

std::optional<NeedleRetention> needle_retention(const std::vector<LayerDiagnostics>& layers,
                                                const std::vector<int64_t>& positions) {
    if (layers.empty() || positions.empty()) return std::nullopt;
    NeedleRetention r;
    double salience_sum = 0;
    int64_t salience_layers = 0;
    for (const LayerDiagnostics& d : layers) {
        if (!d.rel_error.defined() || !d.rank.defined()) return std::nullopt;
        const int64_t n = d.rel_error.size(0);
        for (int64_t p : positions)
            if (p < 0 || p >= n) return std::nullopt;
        const at::Tensor idx = at::tensor(positions, at::kLong);
        r.layer_rel_error.push_back(d.rel_error.index_select(0, idx).to(at::kDouble).mean().item<double>());
        r.layer_kept_fraction.push_back(d.rank.index_select(0, idx).to(at::kDouble).mean().item<double>() /
                                        static_cast<double>(std::max<int64_t>(d.dim, 1)));
        r.rel_error += r.layer_rel_error.back();
        r.kept_fraction += r.layer_kept_fraction.back();
        if (d.salience.defined() && d.salience.size(0) == n) {
            // The observation window's own positions carry the maximum as padding: rank among the others.
            const at::Tensor s = d.salience.to(at::kDouble);
            const at::Tensor scored = s < s.max();
            const double n_scored = scored.sum().item<double>();
            if (n_scored > 0) {
                const at::Tensor v = s.index_select(0, idx);  // [n_value]
                const at::Tensor below =
                    (s.unsqueeze(0) < v.unsqueeze(1)) & scored.unsqueeze(0);  // [n_value, L]
                r.layer_salience_percentile.push_back(
                    (below.sum(1).to(at::kDouble) / n_scored).clamp_max(1.0).mean().item<double>());
                salience_sum += r.layer_salience_percentile.back();
                ++salience_layers;
            }
        }
    }
    const double n_layer = static_cast<double>(layers.size());
    r.n_tokens = static_cast<int64_t>(positions.size());
    r.rel_error /= n_layer;
    r.kept_fraction /= n_layer;
    if (salience_layers == static_cast<int64_t>(layers.size()))
        r.salience_percentile = salience_sum / static_cast<double>(salience_layers);
    else
        r.layer_salience_percentile.clear();
    return r;
}

nlohmann::json to_json(const NeedleRetention& r) {
    const bool has_salience = r.salience_percentile >= 0;
    return {{"tokens", r.n_tokens},
            {"rel_error", r.rel_error},
            {"kept_fraction", r.kept_fraction},
            {"salience_percentile", has_salience ? nlohmann::json(r.salience_percentile) : nlohmann::json()},
            {"per_layer",
             {{"rel_error", r.layer_rel_error},
              {"kept_fraction", r.layer_kept_fraction},
              {"salience_percentile",
               has_salience ? nlohmann::json(r.layer_salience_percentile) : nlohmann::json()}}}};
}

void RetentionTally::add(const nlohmann::json& r) {
    if (!r.is_object() || !r.contains("kept_fraction") || !r["kept_fraction"].is_number()) return;
    ++n;
    rel_error += r.value("rel_error", 0.0);
    kept_fraction += r["kept_fraction"].get<double>();
    if (r.contains("salience_percentile") && r["salience_percentile"].is_number()) {
        ++n_salience;
        salience_percentile += r["salience_percentile"].get<double>();
    }
    const auto layers = r.find("per_layer");
    if (layers == r.end() || !layers->is_object()) return;
    const nlohmann::json per_layer = layers->value("kept_fraction", nlohmann::json());
    if (per_layer.is_array()) {
        if (layer_kept_fraction.size() < per_layer.size()) layer_kept_fraction.resize(per_layer.size(), 0.0);
        for (size_t l = 0; l < per_layer.size(); ++l)
            if (per_layer[l].is_number()) layer_kept_fraction[l] += per_layer[l].get<double>();
    }
}

void RetentionTally::merge(const RetentionTally& o) {
    n += o.n;
    n_salience += o.n_salience;
    rel_error += o.rel_error;
    kept_fraction += o.kept_fraction;
    salience_percentile += o.salience_percentile;
    if (layer_kept_fraction.size() < o.layer_kept_fraction.size())
        layer_kept_fraction.resize(o.layer_kept_fraction.size(), 0.0);
    for (size_t l = 0; l < o.layer_kept_fraction.size(); ++l)
        layer_kept_fraction[l] += o.layer_kept_fraction[l];
}

double RetentionTally::mean_rel_error() const {
    return n > 0 ? rel_error / static_cast<double>(n) : 0.0;
}

double RetentionTally::mean_kept_fraction() const {
    return n > 0 ? kept_fraction / static_cast<double>(n) : 0.0;
}

double RetentionTally::mean_salience_percentile() const {
    return n_salience > 0 ? salience_percentile / static_cast<double>(n_salience) : -1.0;
}

std::vector<double> RetentionTally::mean_layer_kept_fraction() const {
    std::vector<double> means;
    if (n > 0)
        for (double k : layer_kept_fraction) means.push_back(k / static_cast<double>(n));
    return means;
}

nlohmann::json RetentionTally::to_json() const {
    const double salience = mean_salience_percentile();
    return {{"records", n},
            {"rel_error", n > 0 ? nlohmann::json(mean_rel_error()) : nlohmann::json()},
            {"kept_fraction", n > 0 ? nlohmann::json(mean_kept_fraction()) : nlohmann::json()},
            {"salience_percentile", salience >= 0 ? nlohmann::json(salience) : nlohmann::json()},
            {"per_layer_kept_fraction", mean_layer_kept_fraction()}};
}

}  // namespace varrate

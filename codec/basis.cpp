#include "codec/basis.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "codec/anchors.h"
#include "models/safetensors.h"

namespace varrate {

namespace {

const char* kFormat = "varrate-basis";

std::string layer_name(int64_t i, const char* what) {
    return fmt::format("layer.{}.{}", i, what);
}

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
                 const std::filesystem::path& path) {
    auto it = meta.find(key);
    if (it == meta.end())
        throw Error(fmt::format("basis file {}: metadata '{}' is missing", path.string(), key));
    try {
        size_t used = 0;
        int64_t v = std::stoll(it->second, &used);
        if (used != it->second.size()) throw std::invalid_argument("trailing characters");
        return v;
    } catch (const std::exception&) {
        throw Error(fmt::format("basis file {}: metadata '{}' is not an integer: '{}'", path.string(), key,
                                it->second));
    }
}

}  // namespace

Basis::Basis(BasisInfo info, std::vector<at::Tensor> layers, std::vector<at::Tensor> spectra)
    : info_(std::move(info)), layers_(std::move(layers)), spectra_(std::move(spectra)) {
    for (size_t i = 0; i < layers_.size(); ++i) {
        at::Tensor& v = layers_[i];
        if (!v.defined() || v.dim() != 2 || v.size(0) != info_.rank || v.size(1) != info_.dim)
            throw Error(fmt::format("basis: layer {} must be [R={}, D={}]", i, info_.rank, info_.dim));
        v = v.to(at::kCPU, at::kFloat).contiguous();
    }
    if (!spectra_.empty() && spectra_.size() != layers_.size())
        throw Error(fmt::format("basis: {} spectra for {} layers", spectra_.size(), layers_.size()));
    for (auto& s : spectra_)
        if (s.defined()) s = s.to(at::kCPU, at::kFloat).contiguous();
}

const at::Tensor& Basis::layer(int64_t i) const {
    if (i < 0 || i >= n_layer())
        throw Error(fmt::format("basis has {} layers, layer {} was asked for", n_layer(), i));
    return layers_[i];
}

const at::Tensor& Basis::spectrum(int64_t i) const {
    static const at::Tensor undefined;
    if (i < 0 || i >= n_layer())
        throw Error(fmt::format("basis has {} layers, layer {} was asked for", n_layer(), i));
    return spectra_.empty() ? undefined : spectra_[i];
}

int64_t Basis::directions_for_energy(int64_t layer_index, double fraction) const {
    const at::Tensor& s = spectrum(layer_index);
    if (!s.defined()) throw Error(fmt::format("basis layer {} has no spectrum", layer_index));
    at::Tensor e = s.to(at::kDouble).clamp_min(0.0);
    const double total = e.sum().item<double>();
    if (total <= 0) return 0;
    at::Tensor reached = (e.cumsum(0) / total) >= fraction - 1e-12;
    return std::min<int64_t>(e.numel(), (reached.to(at::kLong).cumsum(0) == 0).sum().item<int64_t>() + 1);
}

void Basis::save(const std::filesystem::path& path) const {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (int64_t i = 0; i < n_layer(); ++i) {
        tensors.emplace_back(layer_name(i, "basis"), layers_[i]);
        if (!spectra_.empty() && spectra_[i].defined())
            tensors.emplace_back(layer_name(i, "spectrum"), spectra_[i]);
    }
    std::map<std::string, std::string> meta = {
        {"format", kFormat},
        {"model_fingerprint", info_.model_fingerprint},
        {"n_layers", std::to_string(n_layer())},
        {"dim", std::to_string(info_.dim)},
        {"rank", std::to_string(info_.rank)},
        {"stride", std::to_string(info_.stride)},
        {"anchors", std::to_string(info_.anchors)},
        {"window", std::to_string(info_.window)},
        {"calibration_tokens", std::to_string(info_.calibration_tokens)},
        {"self_calibrated", info_.self_calibrated ? "true" : "false"},
    };
    write_safetensors(path, tensors, meta);
}

Basis Basis::load(const std::filesystem::path& path, const BasisRequirements& req) {
    SafetensorsArchive archive = SafetensorsArchive::open(path);
    const auto& meta = archive.metadata();
    auto fmt_it = meta.find("format");
    if (fmt_it == meta.end() || fmt_it->second != kFormat)
        throw Error(fmt::format("{} is not a VarRate basis file (metadata 'format' is not '{}')",
                                path.string(), kFormat));
    BasisInfo info;
    auto fp = meta.find("model_fingerprint");
    info.model_fingerprint = fp == meta.end() ? "" : fp->second;
    info.dim = meta_int(meta, "dim", path);
    info.rank = meta_int(meta, "rank", path);
    info.stride = meta_int(meta, "stride", path);
    info.anchors = meta_int(meta, "anchors", path);
    info.window = meta_int(meta, "window", path);
    info.calibration_tokens = meta_int(meta, "calibration_tokens", path);
    auto sc = meta.find("self_calibrated");
    info.self_calibrated = sc != meta.end() && sc->second == "true";
    const int64_t n_layer = meta_int(meta, "n_layers", path);

    std::vector<at::Tensor> layers, spectra;
    for (int64_t i = 0; i < n_layer; ++i) {
        const std::string name = layer_name(i, "basis");
        if (!archive.contains(name))
            throw Error(fmt::format("basis file {}: tensor '{}' is missing", path.string(), name));
        at::Tensor v = archive.tensor(name);
        if (v.dim() != 2 || v.size(0) != info.rank || v.size(1) != info.dim)
            throw Error(fmt::format("basis file {}: tensor '{}' has shape [{}], expected [{}, {}]",
                                    path.string(), name, fmt::join(v.sizes().vec(), ", "), info.rank,
                                    info.dim));
        layers.push_back(v.to(at::kFloat).clone());
        const std::string sname = layer_name(i, "spectrum");
        if (archive.contains(sname)) spectra.push_back(archive.tensor(sname).to(at::kFloat).clone());
    }
    if (!spectra.empty() && static_cast<int64_t>(spectra.size()) != n_layer) spectra.clear();
    Basis basis(std::move(info), std::move(layers), std::move(spectra));
    basis.check(req, "basis file " + path.string());
    return basis;
}

void Basis::check(const BasisRequirements& req, const std::string& where) const {
    if (!req.model_fingerprint.empty() && req.model_fingerprint != info_.model_fingerprint)
        throw Error(fmt::format("{} was made for model '{}', not for '{}'", where, info_.model_fingerprint,
                                req.model_fingerprint));
    auto field = [&](const char* name, int64_t want, int64_t have) {
        if (want != 0 && want != have)
            throw Error(fmt::format("{} has {}={}, but {} is needed", where, name, have, want));
    };
    field("dim D", req.dim, info_.dim);
    field("stride", req.stride, info_.stride);
    field("anchors c", req.anchors, info_.anchors);
}

BasisCalibrator::BasisCalibrator(const CodecSettings& settings, int64_t n_layer)
    : settings_(settings), second_moment_(n_layer), tokens_(n_layer, 0) {}

void BasisCalibrator::add(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, "basis calibration", /*needs_pre_rope=*/true);
    if (capture.layer < 0 || capture.layer >= static_cast<int64_t>(tokens_.size()))
        throw Error(fmt::format("basis calibration: layer {} is outside the {} layers being calibrated",
                                capture.layer, tokens_.size()));
    const int64_t dim = 2 * shape.n_kv_head * shape.head_dim;
    if (dim_ != 0 && dim != dim_)
        throw Error(fmt::format("basis calibration: layer {} has D={}, earlier captures had D={}",
                                capture.layer, dim, dim_));
    dim_ = dim;
    const AnchorLayout layout = make_anchor_layout(shape.n_tokens, settings_.stride, settings_.window);
    if (layout.n_coded() == 0 || layout.n_anchors() < settings_.anchors)
        throw Error(
            fmt::format("basis calibration: a context of {} tokens has {} anchors and {} coded tokens; it "
                        "needs >= {} anchors and >= 1 coded token (stride {}, window {})",
                        shape.n_tokens, layout.n_anchors(), layout.n_coded(), settings_.anchors,
                        settings_.stride, settings_.window));
    const at::Tensor z = joint_vectors(capture.keys_pre_rope, capture.values);
    const at::Tensor e = anchor_residuals(z, layout, settings_.anchors).residual.to(at::kDouble);  // [n, D]
    const at::Tensor m = e.t().mm(e).to(at::kCPU);
    at::Tensor& acc = second_moment_[capture.layer];
    if (acc.defined())
        acc.add_(m);
    else
        acc = m.contiguous();
    tokens_[capture.layer] += layout.n_coded();
}

Basis BasisCalibrator::finish(int64_t rank, const std::string& model_fingerprint,
                              bool self_calibrated) const {
    if (dim_ == 0) throw Error("basis calibration: no captures were added");
    if (rank <= 0) throw Error(fmt::format("basis calibration: rank must be positive, got {}", rank));
    if (rank > dim_) {
        spdlog::info("basis calibration: rank {} is above D={}; keeping {} directions", rank, dim_, dim_);
        rank = dim_;
    }
    std::vector<at::Tensor> layers, spectra;
    int64_t min_tokens = -1;
    for (size_t i = 0; i < second_moment_.size(); ++i) {
        if (!second_moment_[i].defined())
            throw Error(fmt::format("basis calibration: layer {} received no captures", i));
        auto [evals, evecs] = at::linalg_eigh(second_moment_[i], "L");  // ascending, columns
        at::Tensor order = at::arange(dim_ - 1, -1, -1, at::TensorOptions().dtype(at::kLong));
        at::Tensor vals = evals.index_select(0, order);      // descending
        at::Tensor rows = evecs.index_select(1, order).t();  // [D, D], row j = j-th direction
        // Deterministic sign: the largest-magnitude component of each direction is positive.
        at::Tensor pivot = rows.gather(1, rows.abs().argmax(1, true));
        rows = rows * at::where(pivot < 0, -at::ones_like(pivot), at::ones_like(pivot));
        layers.push_back(rows.narrow(0, 0, rank).to(at::kFloat).contiguous());
        spectra.push_back(vals.clamp_min(0.0).to(at::kFloat));
        min_tokens = min_tokens < 0 ? tokens_[i] : std::min(min_tokens, tokens_[i]);
    }
    BasisInfo info;
    info.model_fingerprint = model_fingerprint;
    info.dim = dim_;
    info.rank = rank;
    info.stride = settings_.stride;
    info.anchors = settings_.anchors;
    info.window = settings_.window;
    info.calibration_tokens = min_tokens;
    info.self_calibrated = self_calibrated;
    return Basis(std::move(info), std::move(layers), std::move(spectra));
}

}  // namespace varrate

#include "core/session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "core/codec_defaults.h"
#include "models/model_fingerprint.h"

namespace varrate {

std::string positions_warning(const ModelConfig& config, int64_t positions, const std::string& what) {
    if (positions <= config.max_position_embeddings) return "";
    return fmt::format(
        "{} spans {} positions, beyond the model's max_position_embeddings of {}: the model was not trained "
        "on positions that far, so its outputs there are unreliable, with or without compression",
        what, positions, config.max_position_embeddings);
}

std::string to_string(BasisChoice b) {
    switch (b) {
        case BasisChoice::File:
            return "file";
        case BasisChoice::CalibrateNow:
            return "calibrate";
        default:
            return "shipped";
    }
}

BasisChoice parse_basis_choice(const std::string& s) {
    if (s == "shipped") return BasisChoice::Shipped;
    if (s == "file") return BasisChoice::File;
    if (s == "calibrate") return BasisChoice::CalibrateNow;
    throw Error("unknown basis choice '" + s + "' (use shipped, file or calibrate)");
}

std::unique_ptr<Session> Session::open(const std::filesystem::path& model_dir, const RuntimeOptions& runtime,
                                       const std::filesystem::path& basis_file, const JobControl& job) {
    std::unique_ptr<Session> s(new Session());
    s->model_dir_ = model_dir;
    if (job.progress) job.progress("load", 0, 3);
    // Cancel between layers of a long load: the progress callback is called after each one.
    s->model_ = LlamaModel::load(model_dir, runtime,
                                 [&job](const std::string&, int64_t, int64_t) { check_cancel(job); });
    if (job.progress) job.progress("load", 1, 3);
    if (!std::filesystem::exists(model_dir / "tokenizer.json"))
        throw Error(model_dir.string() + ": no tokenizer.json in the model directory");
    s->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(model_dir));
    // Ids past the embedding table would fail in the middle of a prefill: a tokenizer from another model.
    if (const int64_t v = s->tokenizer_->vocab_size(); v > s->model_->config().vocab_size)
        throw Error(
            fmt::format("{}: tokenizer.json has ids up to {} but config.json's vocab_size is {}: the "
                        "tokenizer belongs to another model",
                        model_dir.string(), v - 1, s->model_->config().vocab_size));
    if (job.progress) job.progress("load", 2, 3);
    s->fingerprint_ = model_fingerprint(s->model_->config(), model_dir);
    s->codec_defaults_ = read_codec_defaults(model_dir, width_codec_defaults(s->joint_dim()));
    std::filesystem::path bf = basis_file;
    if (bf.empty() && std::filesystem::exists(model_dir / kBasisFile)) bf = model_dir / kBasisFile;
    if (!bf.empty()) s->set_shipped_basis(s->load_basis(bf), bf.string());
    if (job.progress) job.progress("load", 3, 3);
    return s;
}

void Session::set_basis(std::shared_ptr<const Basis> basis, const std::string& source) {
    basis_ = std::move(basis);
    basis_source_ = source;
}

void Session::set_shipped_basis(std::shared_ptr<const Basis> basis, const std::string& source) {
    shipped_basis_ = basis;
    shipped_source_ = source;
    set_basis(std::move(basis), source);
}

CodecSettings Session::default_codec_settings() const {
    return varrate::default_codec_settings(model_->config(), codec_defaults_);
}

int64_t Session::joint_dim() const {
    return varrate::joint_dim(model_->config());
}

std::shared_ptr<const Basis> Session::load_basis(const std::filesystem::path& file) const {
    BasisRequirements req;
    req.model_fingerprint = fingerprint_;
    req.dim = joint_dim();
    auto b = std::make_shared<Basis>(Basis::load(file, req));
    if (b->n_layer() != model_->config().n_layer)
        throw Error(fmt::format("{}: basis has {} layers, the model has {}", file.string(), b->n_layer(),
                                model_->config().n_layer));
    return b;
}

void Session::select_basis(BasisChoice choice, const std::filesystem::path& file,
                           const std::vector<int64_t>& context_ids, const CodecSettings& settings,
                           const JobControl& job) {
    switch (choice) {
        case BasisChoice::Shipped:
            set_basis(shipped_basis_, shipped_source_);
            return;
        case BasisChoice::File:
            if (file.empty()) throw Error("basis: 'file' is chosen but no basis file is given");
            set_basis(load_basis(file), file.string());
            return;
        case BasisChoice::CalibrateNow:
            if (context_ids.empty()) {
                set_basis(nullptr, "");  // each run self-calibrates on its own context
                return;
            }
            set_basis(std::make_shared<Basis>(calibrate({context_ids}, settings,
                                                        std::min(settings.rank, joint_dim()), true, job)),
                      "calibrated on the document");
            return;
    }
}

std::vector<std::vector<int64_t>> Session::calibration_texts(const std::vector<std::filesystem::path>& files,
                                                             const CodecSettings& settings,
                                                             int64_t max_tokens) const {
    std::vector<std::vector<int64_t>> texts;
    for (const auto& f : files) {
        std::vector<int64_t> ids = tokenizer_->encode(read_text_file(f), true);
        if (static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(max_tokens);
        if (static_cast<int64_t>(ids.size()) < settings.window + 2 * settings.stride)
            throw Error(fmt::format(
                "{}: only {} tokens; calibration needs more than the window ({}) plus two strides ({})",
                f.string(), ids.size(), settings.window, settings.stride));
        texts.push_back(std::move(ids));
    }
    return texts;
}

void Session::check_basis(const Basis& basis, const CodecSettings& settings, const std::string& where) const {
    BasisRequirements req;
    req.model_fingerprint = fingerprint_;
    req.dim = joint_dim();
    req.stride = settings.stride;
    req.anchors = settings.anchors;
    basis.check(req, where);
    const int64_t want = std::min(settings.rank, joint_dim());
    if (basis.info().rank < want)
        throw Error(
            fmt::format("{}: basis has {} rows per layer but --rank {} needs {}; lower --rank or recalibrate",
                        where, basis.info().rank, settings.rank, want));
}

Basis Session::calibrate(const std::vector<std::vector<int64_t>>& texts, const CodecSettings& settings,
                         int64_t rank, bool self_calibrated, const JobControl& job) const {
    if (texts.empty()) throw Error("calibration needs at least one text");
    BasisCalibrator calibrator(settings, model_->config().n_layer);
    for (size_t i = 0; i < texts.size(); ++i) {
        check_cancel(job);
        if (job.progress)
            job.progress("calibrate", static_cast<int64_t>(i), static_cast<int64_t>(texts.size()));
        KVCache cache = model_->new_cache();
        ForwardOptions fo;
        fo.cancel = job.cancel;
        fo.observer_window = settings.obs_window;
        fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
            calibrator.add(cap);
            return std::nullopt;
        };
        model_->forward(texts[i], cache, fo);
    }
    if (job.progress)
        job.progress("calibrate", static_cast<int64_t>(texts.size()), static_cast<int64_t>(texts.size()));
    return calibrator.finish(rank, fingerprint_, self_calibrated);
}

std::shared_ptr<const Basis> Session::basis_for(const std::vector<int64_t>& context_ids,
                                                const CodecSettings& settings, const JobControl& job) const {
    if (basis_) {
        check_basis(*basis_, settings, basis_source_);
        return basis_;
    }
    spdlog::info(
        "no basis given or found beside the model: calibrating on the context itself (self-calibrated; its "
        "bytes are charged to the budget unless --paper-accounting)");
    return std::make_shared<Basis>(
        calibrate({context_ids}, settings, std::min(settings.rank, joint_dim()), true, job));
}

}  // namespace varrate

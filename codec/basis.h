#pragma once
// Per-layer residual basis V [R, D] (fp32, rows = top-R principal directions of the anchor residuals,
// by decreasing singular value), its safetensors file, and the calibrator that builds it from captures.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "codec/method.h"
#include "models/llama_model.h"

namespace varrate {

struct BasisInfo {
    std::string model_fingerprint;   // caller-supplied identity of the model the basis belongs to
    int64_t dim = 0;                 // D
    int64_t rank = 0;                // R rows per layer
    int64_t stride = 0;              // anchor stride the residuals were taken with
    int64_t anchors = 0;             // c
    int64_t window = 0;              // w
    int64_t calibration_tokens = 0;  // residual tokens per layer behind the basis
    bool self_calibrated = false;    // built from the very context it compresses
};

// What a basis must match to be used; empty / 0 fields are not checked.
struct BasisRequirements {
    std::string model_fingerprint;
    int64_t dim = 0, stride = 0, anchors = 0;
};

class Basis {
  public:
    // layers: [R, D] each; spectra (optional): [D] eigenvalues of the residual second moment, descending.
    Basis(BasisInfo info, std::vector<at::Tensor> layers, std::vector<at::Tensor> spectra = {});

    const BasisInfo& info() const { return info_; }
    int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
    const at::Tensor& layer(int64_t i) const;     // [R, D] fp32 CPU
    const at::Tensor& spectrum(int64_t i) const;  // [D] fp32 CPU (undefined when unknown)
    // Leading directions holding `fraction` of layer i's residual energy (e.g. 0.9, 0.99).
    int64_t directions_for_energy(int64_t layer, double fraction) const;

    // Tensors "layer.{i}.basis" (and "layer.{i}.spectrum") with the info as metadata.
    void save(const std::filesystem::path& path) const;
    // Loads and validates a basis file; a requirement mismatch is an Error naming the file and the field.
    static Basis load(const std::filesystem::path& path, const BasisRequirements& req = {});
    // Throws Error naming `where` and the first mismatching field.
    void check(const BasisRequirements& req, const std::string& where) const;

  private:
    BasisInfo info_;
    std::vector<at::Tensor> layers_;
    std::vector<at::Tensor> spectra_;
};

// Accumulates sum_t e_t^T e_t (double, [D, D], CPU) per layer over the coded tokens of many captures,
// with the codec's own anchor/residual code, then keeps the top-R eigenvectors.
class BasisCalibrator {
  public:
    // Uses settings.stride, anchors and window.
    BasisCalibrator(const CodecSettings& settings, int64_t n_layer);
    void add(const LayerCapture& capture);
    int64_t tokens(int64_t layer) const { return tokens_.at(layer); }
    // Eigendecomposes every layer (LibTorch linalg in double). rank is clamped to D (logged).
    Basis finish(int64_t rank, const std::string& model_fingerprint, bool self_calibrated) const;

  private:
    CodecSettings settings_;
    int64_t dim_ = 0;
    std::vector<at::Tensor> second_moment_;  // [D, D] double CPU per layer
    std::vector<int64_t> tokens_;
};

}  // namespace varrate

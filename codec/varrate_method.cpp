#include "codec/varrate_method.h"

#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "codec/anchors.h"
#include "codec/footprint.h"
#include "codec/salience.h"
#include "codec/water_filling.h"
#include "core/base/error.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point& t) {
    const auto now = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
    return ms;
}

}  // namespace

VarRateMethod::VarRateMethod(const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                             RankAllocation allocation)
    : settings_(settings), basis_(std::move(basis)), allocation_(allocation) {
    if (!basis_)
        throw Error(fmt::format("{}: a basis is required (calibrate one, or load a basis file)", name()));
    const BasisInfo& info = basis_->info();
    if (settings_.rank > info.dim) {
        spdlog::info("{}: rank R={} is above D={}; using R=D", name(), settings_.rank, info.dim);
        settings_.rank = info.dim;
    }
    if (info.stride != settings_.stride || info.anchors != settings_.anchors)
        throw Error(
            fmt::format("{}: the basis was calibrated with stride {} and c={} anchors, the codec uses stride "
                        "{} and c={}",
                        name(), info.stride, info.anchors, settings_.stride, settings_.anchors));
    device_basis_.resize(basis_->n_layer());
    device_basis_dtype_.resize(basis_->n_layer(), at::kFloat);
}

bool VarRateMethod::basis_charged() const {
    return basis_->info().self_calibrated && !settings_.paper_accounting;
}

const at::Tensor& VarRateMethod::basis_on(int64_t layer, int64_t rank, const at::Device& device,
                                          at::ScalarType cache_dtype) {
    at::Tensor& cached = device_basis_.at(layer);
    // A charged basis is stored with the cache, at its precision: encode and decode with what is stored.
    const at::ScalarType stored = basis_charged() ? cache_dtype : at::kFloat;
    if (!cached.defined() || cached.device() != device || cached.size(0) != rank ||
        device_basis_dtype_.at(layer) != stored) {
        cached = basis_->layer(layer).narrow(0, 0, rank).to(device, stored).to(at::kFloat).contiguous();
        device_basis_dtype_.at(layer) = stored;
    }
    return cached;
}

LayerResult VarRateMethod::compress(const LayerCapture& capture) {
    auto t = Clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    // Settings errors first (they name the smallest feasible kappa), before any work.
    plan_codec_budget(settings_, shape.n_tokens, 2 * shape.n_kv_head * shape.head_dim,
                      element_size(capture.keys.scalar_type()), name(), basis_->info().self_calibrated);
    if (allocation_ == RankAllocation::Uniform) {
        // Flat: a constant signal, which the shared path turns into exactly uniform ranks.
        return compress_with_salience(capture,
                                      at::ones({shape.n_tokens}, capture.keys.options().dtype(at::kFloat)));
    }
    at::Tensor s = varrate_salience(capture, settings_.obs_window, settings_.pool_kernel);
    sync_for_timing(s, settings_.precise_timing);
    return compress_with_salience(capture, s, ms_since(t));
}

LayerResult VarRateMethod::compress_with_salience(const LayerCapture& capture, const at::Tensor& salience,
                                                  double salience_ms) {
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    const int64_t n_tok = shape.n_tokens, dim = 2 * shape.n_kv_head * shape.head_dim;
    const at::ScalarType dtype = capture.keys.scalar_type();
    const CodecBudget plan =
        plan_codec_budget(settings_, n_tok, dim, element_size(dtype), name(), basis_->info().self_calibrated);
    if (!salience.defined() || salience.dim() != 1 || salience.size(0) != n_tok)
        throw Error(fmt::format("{}: layer {} salience must be [L={}]", name(), capture.layer, n_tok));
    if (capture.layer < 0 || capture.layer >= basis_->n_layer())
        throw Error(fmt::format("{}: the basis has {} layers, the model's layer {} has none", name(),
                                basis_->n_layer(), capture.layer));
    if (basis_->info().dim != dim)
        throw Error(fmt::format("{}: the basis has D={}, layer {} has D=2*{}*{}={}", name(),
                                basis_->info().dim, capture.layer, shape.n_kv_head, shape.head_dim, dim));
    const int64_t rank = plan.rank_cap;
    if (basis_->info().rank < rank)
        throw Error(fmt::format(
            "{}: the basis has {} rows per layer, fewer than the rank R={} (lower R to at most {} "
            "or calibrate a basis with more rows); for L={} the smallest feasible kappa is {:.4f}",
            name(), basis_->info().rank, rank, basis_->info().rank, n_tok, plan.min_feasible_budget));
    const bool sync = settings_.precise_timing;
    const auto dev = capture.keys.device();
    LayerDiagnostics d;
    d.method = name();
    d.layer = capture.layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.timing.salience = salience_ms;
    auto t = Clock::now();

    // 1-3: joint vectors, exact/coded split, residuals to the nearest anchors' mean.
    const AnchorLayout layout = make_anchor_layout(n_tok, settings_.stride, settings_.window);
    const at::Tensor coded = layout.coded_pos.to(dev);
    const at::Tensor z = joint_vectors(capture.keys_pre_rope, capture.values);  // [L, D] fp32
    const AnchorResiduals res = anchor_residuals(z, layout, settings_.anchors);
    sync_for_timing(res.residual, sync);
    d.timing.anchor_search = ms_since(t);

    // 4-11: salience over the coded set, water-filled into integer ranks with sum B.
    const at::Tensor s_coded = salience.to(dev, at::kFloat).index_select(0, coded);
    const at::Tensor s_hat = normalise_salience(s_coded);
    const at::Tensor ranks = water_fill(s_hat, plan.budget_B, settings_.r_min, rank);  // [n_coded] int64
    sync_for_timing(ranks, sync);
    d.timing.water_filling = ms_since(t);

    // 12: one projection at full rank R, truncated per token to its leading r_t coefficients, which are
    // stored (and charged) at cache precision: round them, so the reconstruction is what would be decoded.
    const at::Tensor& V = basis_on(capture.layer, rank, dev, dtype);  // [R, D]
    at::Tensor coeff = res.residual.mm(V.t());                        // [n_coded, R] fp32
    if (dtype != at::kFloat) coeff = coeff.to(dtype).to(at::kFloat);
    coeff.mul_(at::arange(rank, ranks.options()).unsqueeze(0) < ranks.unsqueeze(1));
    sync_for_timing(coeff, sync);
    d.timing.projection = ms_since(t);

    // 12-14: z^ = z-bar + V^T (m . c); exact tokens are copied untouched; keys re-rotated to post-RoPE.
    const int64_t n_kv = shape.n_kv_head, hd = shape.head_dim, n_coded = plan.n_coded;
    const at::Tensor z_hat = at::addmm(res.mean, coeff, V);                             // [n_coded, D] fp32
    const at::Tensor parts = z_hat.view({n_coded, 2, n_kv, hd}).permute({1, 2, 0, 3});  // [2, G, n_coded, hd]
    const at::Tensor cos = capture.rope_cos.index_select(0, coded).to(at::kFloat);      // [n_coded, hd]
    const at::Tensor sin = capture.rope_sin.index_select(0, coded).to(at::kFloat);
    const at::Tensor k_post = apply_rope(parts[0], cos, sin);  // [G, n_coded, hd]
    LayerResult out;
    out.kv.keys = capture.keys.clone();
    out.kv.values = capture.values.clone();
    out.kv.keys.index_copy_(1, coded, k_post.to(dtype));
    out.kv.values.index_copy_(1, coded, parts[1].to(dtype));
    sync_for_timing(out.kv.values, sync);
    d.timing.reconstruction = ms_since(t);

    // Diagnostics: built on the device, copied to the host once.
    const at::Tensor z_coded = z.index_select(0, coded);
    const at::Tensor err =
        (z_coded - z_hat.to(dtype).to(at::kFloat)).norm(2, {1}) / z_coded.norm(2, {1}).clamp_min(1e-30);
    auto fopts = z.options();
    at::Tensor rank_all = at::full({n_tok}, dim, ranks.options()).index_copy_(0, coded, ranks);
    at::Tensor err_all = at::zeros({n_tok}, fopts).index_copy_(0, coded, err);
    at::Tensor norm_all = at::zeros({n_tok}, fopts).index_copy_(0, coded, s_hat);
    const at::Tensor rf = ranks.to(at::kDouble);
    const at::Tensor stats =
        at::stack({rf.sum(), rf.min(), rf.max(), rf.mean(), (ranks == settings_.r_min).to(at::kDouble).mean(),
                   err_all.to(at::kDouble).mean()})
            .to(at::kCPU);
    const double* st = stats.data_ptr<double>();
    d.budget_B = plan.budget_B;
    d.sum_ranks = static_cast<int64_t>(st[0]);
    d.n_exact = plan.n_exact;
    d.n_coded = plan.n_coded;
    d.min_rank = static_cast<int64_t>(st[1]);
    d.max_rank = static_cast<int64_t>(st[2]);
    d.mean_rank = st[3];
    d.floor_share = st[4];
    d.mean_rel_error = st[5];
    d.index_bytes = plan.index_bytes;
    d.basis_bytes = plan.basis_bytes();
    d.stored_bytes = plan.stored_bytes(d.sum_ranks);
    d.full_bytes = plan.full_bytes();
    d.footprint = static_cast<double>(d.stored_bytes) / static_cast<double>(d.full_bytes);
    if (allocation_ == RankAllocation::Salience) d.salience = salience.to(at::kCPU, at::kFloat);
    d.salience_norm = norm_all.to(at::kCPU);
    d.rank = rank_all.to(at::kCPU);
    d.exact = layout.exact_mask;
    d.rel_error = err_all.to(at::kCPU);
    out.diagnostics = std::move(d);
    return out;
}

}  // namespace varrate

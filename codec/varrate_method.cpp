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

namespace {

struct VarRateAnalysis : LayerAnalysis {
    const Basis* basis = nullptr;  // identity: what the coefficients were projected on
    CodecSettings settings;        // the structural settings and R of the analysis
    int64_t n_kv_head = 0, head_dim = 0, dim = 0, rank = 0;  // rank: the coefficients held, R
    at::ScalarType dtype = at::kFloat;
    AnchorLayout layout;
    at::Tensor coded;     // [n_coded] int64 positions on the device
    at::Tensor salience;  // [L] CPU fp32 raw salience (VarRate only)
    at::Tensor s_hat;     // [n_coded] fp32, normalised over the coded set (flat: ones)
    at::Tensor mean;      // [n_coded, D] fp32 z-bar
    at::Tensor coeff;     // [n_coded, R] fp32 coefficients as stored (rounded to the cache dtype)
    at::Tensor err_sq;    // [n_coded, R + 1] fp32 ||z - z^||^2 when the token keeps r coefficients
    at::Tensor z_norm;    // [n_coded] fp32 ||z||
};

}  // namespace

std::shared_ptr<const LayerAnalysis> VarRateMethod::analyse(const LayerCapture& capture) {
    auto t = Clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    // Structural errors (L too short for the anchors and the window, r_min above R) before any work; the
    // budget is allocate()'s to check, so plan at kappa = 1.
    CodecSettings structural = settings_;
    structural.budget = 1.0;
    plan_codec_budget(structural, shape.n_tokens, 2 * shape.n_kv_head * shape.head_dim,
                      element_size(capture.keys.scalar_type()), name(), basis_->info().self_calibrated);
    if (allocation_ == RankAllocation::Uniform) {
        // Flat: a constant signal, which the shared path turns into exactly uniform ranks.
        return analyse_with_salience(capture,
                                     at::ones({shape.n_tokens}, capture.keys.options().dtype(at::kFloat)));
    }
    at::Tensor s = varrate_salience(capture, settings_.obs_window, settings_.pool_kernel);
    sync_for_timing(s, settings_.precise_timing);
    return analyse_with_salience(capture, s, ms_since(t));
}

std::shared_ptr<const LayerAnalysis> VarRateMethod::analyse_with_salience(const LayerCapture& capture,
                                                                          const at::Tensor& salience,
                                                                          double salience_ms) {
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    const int64_t n_tok = shape.n_tokens, dim = 2 * shape.n_kv_head * shape.head_dim;
    const at::ScalarType dtype = capture.keys.scalar_type();
    CodecSettings structural = settings_;
    structural.budget = 1.0;
    const CodecBudget plan = plan_codec_budget(structural, n_tok, dim, element_size(dtype), name(),
                                               basis_->info().self_calibrated);
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
    auto a = std::make_shared<VarRateAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = n_tok;
    a->n_kv_head = shape.n_kv_head;
    a->head_dim = shape.head_dim;
    a->dim = dim;
    a->rank = rank;
    a->dtype = dtype;
    a->basis = basis_.get();
    a->settings = settings_;
    a->timing.salience = salience_ms;
    auto t = Clock::now();

    // 1-3: joint vectors, exact/coded split, residuals to the nearest anchors' mean.
    a->layout = make_anchor_layout(n_tok, settings_.stride, settings_.window);
    a->coded = a->layout.coded_pos.to(dev);
    const at::Tensor z = joint_vectors(capture.keys_pre_rope, capture.values);  // [L, D] fp32
    AnchorResiduals res = anchor_residuals(z, a->layout, settings_.anchors);
    a->mean = std::move(res.mean);
    sync_for_timing(res.residual, sync);
    a->timing.anchor_search = ms_since(t);

    // Salience over the coded set, normalised once: every budget water-fills the same signal.
    a->s_hat = normalise_salience(salience.to(dev, at::kFloat).index_select(0, a->coded));
    if (allocation_ == RankAllocation::Salience) a->salience = salience.to(at::kCPU, at::kFloat);

    // 12: one projection at full rank R. Coefficients are stored (and charged) at cache precision: round
    // them, so that the reconstruction is what would be decoded.
    const at::Tensor& V = basis_on(capture.layer, rank, dev, dtype);  // [R, D]
    const at::Tensor exact = res.residual.mm(V.t());                  // [n_coded, R] fp32
    a->coeff = dtype != at::kFloat ? exact.to(dtype).to(at::kFloat) : exact;
    // The error at every rank r, from coefficient energies (the basis rows are orthonormal):
    //   ||z - z^(r)||^2 = ||res_perp||^2 + sum_{i<r} (c_i - c^_i)^2 + sum_{i>=r} c_i^2,
    // res_perp the residual's part outside the R rows (zero when R = D). Suffix sums of positive terms keep
    // fp32 accurate where the error is small; the perpendicular part is formed in fp64.
    const int64_t n_coded = exact.size(0);
    const at::Tensor sq = exact.square();
    at::Tensor table = at::zeros({n_coded, rank + 1}, exact.options());
    table.narrow(1, 0, rank).copy_(sq.flip({1}).cumsum(1).flip({1}));
    if (dtype != at::kFloat) table.narrow(1, 1, rank).add_((exact - a->coeff).square().cumsum(1));
    if (rank < dim) {
        const at::Tensor perp = (res.residual.to(at::kDouble).square().sum(1) - sq.to(at::kDouble).sum(1))
                                    .clamp_min(0)
                                    .to(at::kFloat);
        table.add_(perp.unsqueeze(1));
    }
    a->err_sq = std::move(table);
    a->z_norm = z.index_select(0, a->coded).norm(2, {1});
    sync_for_timing(a->err_sq, sync);
    a->timing.projection = ms_since(t);
    return a;
}

std::shared_ptr<const LayerAnalysis> VarRateMethod::derive(const LayerCapture& capture,
                                                           const LayerAnalysis& other) {
    const auto* o = dynamic_cast<const VarRateAnalysis*>(&other);
    if (!o || o->basis != basis_.get() || !structural_difference(o->settings, settings_).empty() ||
        o->settings.rank != settings_.rank || o->settings.paper_accounting != settings_.paper_accounting ||
        o->layer != capture.layer || o->n_tokens != capture.keys.size(1))
        return nullptr;
    auto t = Clock::now();
    auto a = std::make_shared<VarRateAnalysis>(*o);  // tensors shared, not copied
    a->timing = StageTiming{};
    if (allocation_ == RankAllocation::Uniform) {
        a->salience = at::Tensor();
        a->s_hat = at::ones_like(o->s_hat);  // exactly what analyse() normalises a constant signal to
    } else {
        const at::Tensor s = varrate_salience(capture, settings_.obs_window, settings_.pool_kernel);
        a->s_hat = normalise_salience(s.to(at::kFloat).index_select(0, a->coded));
        a->salience = s.to(at::kCPU, at::kFloat);
        sync_for_timing(a->s_hat, settings_.precise_timing);
        a->timing.salience = ms_since(t);
    }
    return a;
}

LayerAllocation VarRateMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = Clock::now();
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    const std::string diff = structural_difference(settings_, budget);
    if (!diff.empty())
        throw Error(fmt::format("{}: layer {} was analysed with other settings ({})", name(), a.layer, diff));
    const int64_t n_tok = a.n_tokens, dim = a.dim;
    const CodecBudget plan =
        plan_codec_budget(budget, n_tok, dim, element_size(a.dtype), name(), basis_->info().self_calibrated);
    const int64_t rank = plan.rank_cap;
    if (rank > a.rank)
        throw Error(fmt::format("{}: layer {} was analysed at rank R={}; R={} needs a new analysis", name(),
                                a.layer, a.rank, rank));

    // 4-11: water-filling of B by the normalised salience into integer ranks with sum B.
    LayerAllocation out;
    out.coded_ranks = water_fill(a.s_hat, plan.budget_B, budget.r_min, rank);  // [n_coded] int64
    const at::Tensor& ranks = out.coded_ranks;
    const at::Tensor err = a.err_sq.gather(1, ranks.unsqueeze(1)).squeeze(1).clamp_min(0).sqrt() /
                           a.z_norm.clamp_min(1e-30);  // [n_coded]

    // Diagnostics: built on the device, copied to the host once.
    const at::Tensor& coded = a.coded;
    auto fopts = a.z_norm.options();
    at::Tensor rank_all = at::full({n_tok}, dim, ranks.options()).index_copy_(0, coded, ranks);
    at::Tensor err_all = at::zeros({n_tok}, fopts).index_copy_(0, coded, err);
    at::Tensor norm_all = at::zeros({n_tok}, fopts).index_copy_(0, coded, a.s_hat);
    const at::Tensor rf = ranks.to(at::kDouble);
    const at::Tensor stats =
        at::stack({rf.sum(), rf.min(), rf.max(), rf.mean(), (ranks == budget.r_min).to(at::kDouble).mean(),
                   err_all.to(at::kDouble).mean()})
            .to(at::kCPU);
    const double* st = stats.data_ptr<double>();
    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.layer = a.layer;
    d.n_tokens = n_tok;
    d.dim = dim;
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
    d.salience = a.salience;
    d.salience_norm = norm_all.to(at::kCPU);
    d.rank = rank_all.to(at::kCPU);
    d.exact = a.layout.exact_mask;
    d.rel_error = err_all.to(at::kCPU);
    d.timing = a.timing;
    d.timing.water_filling = ms_since(t);
    return out;
}

LayerKV VarRateMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                   const LayerAllocation& allocation) {
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    const at::Tensor& ranks = allocation.coded_ranks;  // [n_coded]
    if (!ranks.defined() || ranks.size(0) != a.coded.size(0))
        throw Error(fmt::format("{}: layer {} allocation does not match its analysis", name(), a.layer));
    // z^ = z-bar + V^T (m . c), each token truncated to its leading r_t coefficients; exact tokens are
    // copied untouched; keys re-rotated to post-RoPE.
    const at::Tensor& V = basis_on(a.layer, a.rank, a.coded.device(), a.dtype);  // [R, D]
    const at::Tensor keep = at::arange(a.rank, ranks.options()).unsqueeze(0) < ranks.unsqueeze(1);
    const at::Tensor z_hat = at::addmm(a.mean, a.coeff * keep, V);  // [n_coded, D] fp32
    const int64_t n_kv = a.n_kv_head, hd = a.head_dim, n_coded = z_hat.size(0);
    const at::Tensor parts = z_hat.view({n_coded, 2, n_kv, hd}).permute({1, 2, 0, 3});  // [2, G, n_coded, hd]
    const at::Tensor cos = capture.rope_cos.index_select(0, a.coded).to(at::kFloat);    // [n_coded, hd]
    const at::Tensor sin = capture.rope_sin.index_select(0, a.coded).to(at::kFloat);
    const at::Tensor k_post = apply_rope(parts[0], cos, sin);  // [G, n_coded, hd]
    LayerKV kv{capture.keys.clone(), capture.values.clone()};
    kv.keys.index_copy_(1, a.coded, k_post.to(a.dtype));
    kv.values.index_copy_(1, a.coded, parts[1].to(a.dtype));
    sync_for_timing(kv.values, settings_.precise_timing);
    return kv;
}

}  // namespace varrate

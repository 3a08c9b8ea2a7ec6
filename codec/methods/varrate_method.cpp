#include "codec/methods/varrate_method.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/anchors.h"
#include "codec/footprint.h"
#include "codec/gemm.h"
#include "codec/quantize.h"
#include "codec/salience.h"
#include "codec/water_filling.h"
#include "models/device.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

}  // namespace

at::Tensor top_k_ranks(const at::Tensor& s_hat, int64_t budget, int64_t r_min, int64_t rank_cap) {
    const int64_t n = s_hat.size(0);
    at::Tensor ranks = at::full({n}, r_min, s_hat.options().dtype(at::kLong));
    if (n == 0 || rank_cap <= r_min) return ranks;
    const int64_t spare = std::clamp<int64_t>(budget - n * r_min, 0, n * (rank_cap - r_min));
    const int64_t k = spare / (rank_cap - r_min), rest = spare % (rank_cap - r_min);
    // Stable: equal saliences go to the earlier token.
    const at::Tensor order = std::get<1>(at::sort(s_hat, /*stable=*/true, 0, /*descending=*/true));
    if (k > 0) ranks.index_fill_(0, order.narrow(0, 0, k), rank_cap);
    if (rest > 0) ranks.index_fill_(0, order.narrow(0, k, 1), r_min + rest);
    return ranks;
}

VarRateMethod::VarRateMethod(const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                             RankAllocation allocation, SalienceSignal signal, std::string registered_name,
                             bool across_layers, TokenSalience scorer)
    : settings_(settings),
      basis_(std::move(basis)),
      allocation_(allocation),
      signal_(allocation == RankAllocation::Uniform ? SalienceSignal::Constant : signal),
      scorer_(std::move(scorer)),
      name_(std::move(registered_name)),
      across_layers_(across_layers) {
    if (across_layers_ && allocation_ == RankAllocation::Uniform)
        throw Error("flat: budgets across layers need a salience signal");
    if (name_.empty()) name_ = allocation_ == RankAllocation::Uniform ? "flat" : "varrate";
    if ((signal_ == SalienceSignal::Scorer) != static_cast<bool>(scorer_))
        throw Error(fmt::format("{}: a scorer's salience needs its score function and only it", name()));
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
    bf16_basis_.resize(basis_->n_layer());
    scaled_basis_.resize(basis_->n_layer());
}

at::Tensor VarRateMethod::coefficient_scale(int64_t layer, int64_t rank, const at::Device& device) const {
    const at::Tensor& spectrum = basis_->spectrum(layer);
    if (!spectrum.defined() || spectrum.size(0) < rank) return {};
    // sqrt of the residual second moment along each basis row: the coefficients' typical magnitude.
    const at::Tensor s = spectrum.narrow(0, 0, rank).to(at::kFloat).clamp_min(0).sqrt();
    return s.clamp_min(std::max(s.max().item<float>() * 1e-6f, 1e-30f)).to(device);
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
        bf16_basis_.at(layer) = at::Tensor();
        scaled_basis_.at(layer) = at::Tensor();
    }
    return cached;
}

const at::Tensor& VarRateMethod::bf16_basis_on(int64_t layer, int64_t rank, const at::Device& device) {
    const at::Tensor& v = basis_on(layer, rank, device, at::kBFloat16);  // resets bf16_basis_ when it changes
    at::Tensor& cached = bf16_basis_.at(layer);
    if (!cached.defined()) cached = v.to(at::kBFloat16);
    return cached;
}

namespace {

// Every coded token's squared reconstruction error at every rank 0..R, kept by an analysis that is allocated
// more than once (a budget sweep, the app's live controls), so that later allocations read their errors
// instead of projecting again. Built on an analysis's second allocation (a single-budget run never pays for
// it) when it stays within kErrorTableBytes a layer; VarRate and flat share it through derive().
constexpr int64_t kErrorTableBytes = int64_t(64) << 20;

struct ErrorTable {
    std::mutex mutex;
    at::Tensor err_sq;  // [n_coded, R + 1] fp32 in position order; undefined until built (or too large)
};

struct VarRateAnalysis : LayerAnalysis {
    const Basis* basis = nullptr;                            // identity: what the residuals are projected on
    CodecSettings settings;                                  // the structural settings and R of the analysis
    int64_t n_kv_head = 0, head_dim = 0, dim = 0, rank = 0;  // rank: the basis rows a budget may use, R
    at::ScalarType dtype = at::kFloat;
    AnchorLayout layout;
    at::Tensor coded;      // [n_coded] int64 positions on the device
    at::Tensor exact;      // [n_exact] int64 positions on the device
    at::Tensor salience;   // [L] CPU fp32 raw salience (VarRate only)
    at::Tensor s_hat;      // [n_coded] fp32, normalised over the coded set (flat: ones)
    WaterFillSignal fill;  // s_hat sorted, for every budget's water-filling
    // Residuals, their energies and nearest anchors; z-bar is formed again from the anchors when
    // materialised, rather than held as another [n_coded, D].
    AnchorResiduals res;
    at::Tensor z_norm;  // [n_coded] fp32 ||z||
    std::shared_ptr<ErrorTable> errors = std::make_shared<ErrorTable>();
    mutable int allocations = 0;  // of this analysis (not of those sharing `errors`), under errors->mutex
};

// The leading basis rows that allocate() projects a token of rank r on and materialise() reconstructs it
// from, one GEMM per width in use: r rounded up to a multiple of 16 (r <= 64), 32 (r <= 256) or 64, at most
// R, so that padding costs at most about a quarter of a token's own work while a layer needs at most a few
// dozen GEMMs. A basis of at most 128 rows is applied whole, in one GEMM over all coded tokens in position
// order (exactly the masked full-rank product): below that, a GEMM's fixed cost outweighs the padding saved.
at::Tensor gemm_widths(const at::Tensor& ranks, int64_t rank_cap) {  // [n] int64 -> [n] int64
    if (rank_cap <= 128) return at::full_like(ranks, rank_cap);
    const at::Tensor unit =
        at::where(ranks <= 64, at::full_like(ranks, 16),
                  at::where(ranks <= 256, at::full_like(ranks, 32), at::full_like(ranks, 64)));
    return ((ranks + unit - 1).div(unit, "floor") * unit).clamp_max(rank_cap);
}

// Runs of equal widths in widths sorted in decreasing order (host; a loop over the runs, not the tokens).
std::vector<RankGroup> plan_rank_groups(const int64_t* sorted, int64_t n) {
    std::vector<RankGroup> groups;
    for (int64_t begin = 0; begin < n;) {
        const int64_t width = sorted[begin];
        const int64_t end =
            std::partition_point(sorted + begin, sorted + n, [&](int64_t w) { return w == width; }) - sorted;
        groups.push_back(RankGroup{end - begin, width, {}, {}, {}, {}});
        begin = end;
    }
    return groups;
}

// Coefficients c = V e of each group's tokens up to the group's width, stored at cache precision (c^: the
// reconstruction is what would be decoded) and zero past each token's rank. With err_sq ([n_coded] fp64, rank
// order) each token's squared error too: with the basis rows orthonormal, it is what the kept coefficients
// lost to rounding, what the dropped ones held, and what lies past the width:
//   ||z - z^||^2 = sum_{i<r} (c_i - c^_i)^2 + sum_{r<=i<width} c_i^2 + (||e||^2 - sum_{i<width} c_i^2),
// the last term zero when the width is D (every row of a complete basis), else a difference formed in fp64
// (of norms accurate to fp32 rounding).
// Quantized (coef_bits < 16), c^ is dequantized from b-bit codes in groups of 32 along the rank (the group's
// scale and minimum over the token's kept coefficients only), and quant_sq ([n_coded] fp64, rank order) takes
// what the kept coefficients lost to their precision, the quantization part of err_sq.
// sigma ([R] fp32, optional) divides each coefficient index before quantization (and multiplies it back): the
// coefficients of one group then share a scale of their own magnitude instead of the leading one's.
void project_groups(const VarRateAnalysis& a, const at::Tensor& V, const at::Tensor& sorted_ranks,
                    const at::Tensor& order, int64_t coef_bits, const at::Tensor& sigma,
                    std::vector<RankGroup>& groups, at::Tensor* err_sq, at::Tensor* quant_sq = nullptr) {
    int64_t begin = 0;
    for (RankGroup& g : groups) {
        const at::Tensor rows = order.narrow(0, begin, g.tokens);
        const at::Tensor e = a.res.residual.index_select(0, rows);   // [n, D]
        at::Tensor c = at::empty({g.tokens, g.width}, e.options());  // [n, width] fp32
        gemm_out(c, e, V.narrow(0, 0, g.width).t(), 0.0, 1.0, /*onednn=*/a.dtype == at::kBFloat16);
        const at::Tensor dropped = at::arange(g.width, sorted_ranks.options()).unsqueeze(0) >=  // [n, width]
                                   sorted_ranks.narrow(0, begin, g.tokens).unsqueeze(1);
        at::Tensor stored;
        if (coef_bits < 16) {
            const int64_t n_groups = (g.width + kQuantGroup - 1) / kQuantGroup,
                          padded = n_groups * kQuantGroup;
            const at::Tensor s = sigma.defined() ? sigma.narrow(0, 0, g.width) : at::Tensor();
            const at::Tensor cp = at::constant_pad_nd(s.defined() ? c / s : c, {0, padded - g.width});
            const at::Tensor keep = at::arange(padded, sorted_ranks.options()).unsqueeze(0) <  // [n, padded]
                                    sorted_ranks.narrow(0, begin, g.tokens).unsqueeze(1);
            QuantizedGroups q =
                quantize_groups(cp.view({-1, kQuantGroup}), coef_bits, keep.view({-1, kQuantGroup}));
            stored =
                dequantize_groups(q.codes, q.scale, q.min).view({g.tokens, padded}).narrow(1, 0, g.width);
            g.codes = q.codes.view({g.tokens, padded});
            g.group_scale = q.scale.view({g.tokens, n_groups});
            g.group_min = q.min.view({g.tokens, n_groups});
            stored = s.defined() ? stored * s : stored.contiguous();
        } else {
            stored = a.dtype != at::kFloat ? c.to(a.dtype).to(at::kFloat) : c.clone();
        }
        stored.masked_fill_(dropped, 0.0);
        if (quant_sq)
            quant_sq->narrow(0, begin, g.tokens)
                .copy_((c - stored).masked_fill_(dropped, 0.0).norm(2, {1}))
                .square_();
        if (err_sq) {
            at::Tensor e2 = err_sq->narrow(0, begin, g.tokens);
            e2.copy_((c - stored).norm(2, {1}))
                .square_();  // what the stored row lost: rounding or quantization, dropped rows
            if (g.width < a.dim)
                e2.add_((a.res.energy.index_select(0, rows) - c.norm(2, {1}).to(at::kDouble).square())
                            .clamp_min(0));
        }
        g.coefficients = std::move(stored);
        begin += g.tokens;
    }
}

// The analysis's error table (ErrorTable), built on its second allocation; undefined before that and when
// it would exceed kErrorTableBytes. Entry [t, r] is project_groups' squared error of coded token t at rank r,
// with the width taken as R: sum_{i<r} (c_i - c^_i)^2 + sum_{r<=i<R} c_i^2 + (||e||^2 - sum_{i<R} c_i^2),
// formed in fp64 (no cancellation but the last term's) and held in fp32.
at::Tensor error_table(const VarRateAnalysis& a, const at::Tensor& V) {  // V: [R, D] fp32
    ErrorTable& t = *a.errors;
    const std::lock_guard<std::mutex> lock(t.mutex);
    if (t.err_sq.defined()) return t.err_sq;
    const int64_t n = a.coded.size(0), R = a.rank;
    if (++a.allocations < 2 || n * (R + 1) * 4 > kErrorTableBytes) return {};
    at::Tensor table = at::empty({n, R + 1}, a.z_norm.options());  // [n_coded, R + 1] fp32
    constexpr int64_t kChunk = 4096;  // bounds the fp64 temporaries to a few MiB per R
    for (int64_t begin = 0; begin < n; begin += kChunk) {
        const int64_t m = std::min(kChunk, n - begin);
        at::Tensor c = at::empty({m, R}, a.res.residual.options());  // [m, R] fp32
        gemm_out(c, a.res.residual.narrow(0, begin, m), V.t(), 0.0, 1.0, a.dtype == at::kBFloat16);
        const at::Tensor stored = a.dtype != at::kFloat ? c.to(a.dtype).to(at::kFloat) : c;
        const at::Tensor round_sq = (c - stored).to(at::kDouble).square();  // [m, R]
        const at::Tensor c_sq = c.to(at::kDouble).square();                 // [m, R]
        const at::Tensor zero = at::zeros({m, 1}, round_sq.options());
        const at::Tensor lost = at::cat({zero, round_sq.cumsum(1)}, 1);                     // [m, R + 1]
        const at::Tensor dropped = at::cat({c_sq.flip({1}).cumsum(1).flip({1}), zero}, 1);  // [m, R + 1]
        at::Tensor err = lost.add_(dropped);
        if (R < a.dim) err.add_((a.res.energy.narrow(0, begin, m) - c_sq.sum(1)).clamp_min(0).unsqueeze(1));
        table.narrow(0, begin, m).copy_(err);
    }
    t.err_sq = table;
    return table;
}

}  // namespace

std::shared_ptr<const LayerAnalysis> VarRateMethod::analyse(const LayerCapture& capture) {
    auto t = Clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    // Structural errors (L too short for the anchors and the window, r_min above R) before any work; the
    // budget is allocate()'s to check, so plan at kappa = 1.
    CodecSettings structural = settings_;
    structural.budget = 1.0;
    plan_codec_budget(structural, shape.n_tokens, 2 * shape.n_kv_head * shape.head_dim,
                      element_size(capture.keys.scalar_type()), name(), basis_->info().self_calibrated,
                      uniform_ranks());
    if (allocation_ == RankAllocation::Uniform) {
        // Flat: a constant signal, which the shared path turns into exactly uniform ranks.
        return analyse_with_salience(capture,
                                     at::ones({shape.n_tokens}, capture.keys.options().dtype(at::kFloat)));
    }
    at::Tensor s = raw_salience(capture);
    sync_for_timing(s, settings_.precise_timing);
    return analyse_with_salience(capture, s, lap_ms(t));
}

at::Tensor VarRateMethod::raw_salience(const LayerCapture& capture) const {
    return scorer_ ? scorer_(capture, settings_) : allocation_salience(signal_, capture, settings_);
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
                                               basis_->info().self_calibrated, uniform_ranks());
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

    // 1-3: joint vectors, exact/coded split, residuals to the nearest anchors' mean, and the norms that
    // every budget's errors are measured against.
    a->layout = make_anchor_layout(n_tok, settings_.stride, settings_.window);
    a->coded = a->layout.coded_pos.to(dev);
    a->exact = a->layout.exact_pos.to(dev);
    const at::Tensor z = joint_vectors(capture.keys_pre_rope, capture.values);  // [L, D] fp32
    // A bf16 runtime runs its fp32 GEMMs on oneDNN (codec/gemm.h); fp32 runtimes keep at::mm bit for bit.
    a->res = anchor_residuals(z, a->layout, settings_.anchors, /*chunk=*/2048, /*with_mean=*/false,
                              /*onednn_gemm=*/dtype == at::kBFloat16);
    a->z_norm = z.norm(2, {1}).index_select(0, a->coded);
    // Salience over the coded set, normalised once: every budget water-fills the same signal.
    a->s_hat = normalise_salience(salience.to(dev, at::kFloat).index_select(0, a->coded));
    a->fill = water_fill_signal(a->s_hat);
    if (allocation_ != RankAllocation::Uniform) a->salience = salience.to(at::kCPU, at::kFloat);
    sync_for_timing(a->s_hat, sync);
    a->timing.anchor_search = lap_ms(t);
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
        a->fill = water_fill_signal(a->s_hat);
    } else {
        const at::Tensor s = raw_salience(capture);
        a->s_hat = normalise_salience(s.to(at::kFloat).index_select(0, a->coded));
        a->fill = water_fill_signal(a->s_hat);
        a->salience = s.to(at::kCPU, at::kFloat);
        sync_for_timing(a->s_hat, settings_.precise_timing);
        a->timing.salience = lap_ms(t);
    }
    return a;
}

std::vector<double> VarRateMethod::layer_budgets(
    const std::vector<std::shared_ptr<const LayerAnalysis>>& layers, const CodecSettings& budget) {
    if (!across_layers_ || layers.empty()) return {};
    if (budget.coef_bits < 16)
        throw Error(fmt::format("{}: budgets across layers are for unquantized coefficients (--coef-bits 16)",
                                name()));
    std::vector<CodecBudget> plans;
    std::vector<at::Tensor> signals;  // per layer [n_coded] fp64 CPU: raw salience of the coded tokens
    int64_t total = 0;
    for (const auto& l : layers) {
        const auto& a = dynamic_cast<const VarRateAnalysis&>(*l);
        plans.push_back(plan_codec_budget(budget, a.n_tokens, a.dim, element_size(a.dtype), name(),
                                          basis_->info().self_calibrated, uniform_ranks()));
        total += plans.back().budget_B;
        signals.push_back(a.salience.index_select(0, a.coded.to(at::kCPU)).to(at::kDouble).clamp_min(0));
    }
    const at::Tensor all = at::cat(signals);
    const double top = all.max().item<double>();
    const at::Tensor s = top > 0 ? all / top : at::ones_like(all);
    const at::Tensor levels = water_fill_levels(s, total, budget.r_min, plans.front().rank_cap);  // [sum n]
    std::vector<double> out;
    int64_t offset = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const CodecBudget& p = plans[i];
        const int64_t n = signals[i].size(0);
        const auto B = static_cast<int64_t>(std::floor(levels.narrow(0, offset, n).sum().item<double>()));
        offset += n;
        // kappa_l whose scalar total is this layer's fixed part (exact rows, indices, basis) plus B: the
        // planner floors kappa * L * D, so aim half a scalar above.
        const int64_t fixed = p.n_exact * p.dim + p.index_scalars + p.basis_scalars + p.landmark_scalars;
        const double scalars = static_cast<double>(p.n_tokens) * static_cast<double>(p.dim);
        out.push_back(std::min(1.0, (static_cast<double>(B + fixed) + 0.5) / scalars));
    }
    return out;
}

LayerAllocation VarRateMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = Clock::now();
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    const std::string diff = structural_difference(settings_, budget);
    if (!diff.empty())
        throw Error(fmt::format("{}: layer {} was analysed with other settings ({})", name(), a.layer, diff));
    const int64_t n_tok = a.n_tokens, dim = a.dim;
    const CodecBudget plan = plan_codec_budget(budget, n_tok, dim, element_size(a.dtype), name(),
                                               basis_->info().self_calibrated, uniform_ranks());
    const int64_t rank = plan.rank_cap;
    if (rank > a.rank)
        throw Error(fmt::format("{}: layer {} was analysed at rank R={}; R={} needs a new analysis", name(),
                                a.layer, a.rank, rank));

    // 4-11: water-filling of B by the normalised salience into integer ranks with sum B.
    LayerAllocation out;
    out.coded_ranks = allocation_ == RankAllocation::TopK
                          ? top_k_ranks(a.s_hat, plan.budget_B, budget.r_min, rank)
                          : water_fill(a.fill, plan.budget_B, budget.r_min, rank);  // [n_coded] int64
    const at::Tensor& ranks = out.coded_ranks;
    const int64_t n_coded = ranks.size(0);
    // Tokens by decreasing GEMM width (equal widths in position order), one GEMM per width. The GEMM shapes
    // are the one host copy this needs.
    if (a.rank <= 128) {
        // One width (gemm_widths): position order, one group, nothing to sort or copy.
        out.rank_order = at::arange(n_coded, ranks.options());
        if (n_coded > 0) out.rank_groups = {RankGroup{n_coded, a.rank, {}, {}, {}, {}}};
    } else {
        auto by_width = at::sort(gemm_widths(ranks, a.rank), /*stable=*/true, 0, /*descending=*/true);
        out.rank_order = std::get<1>(by_width);  // [n_coded]
        const at::Tensor widths = std::get<0>(by_width).to(at::kCPU);
        out.rank_groups = plan_rank_groups(widths.data_ptr<int64_t>(), n_coded);
    }
    const at::Tensor& order = out.rank_order;
    double fill_ms = lap_ms(t);

    // 12: each coded token's error at its rank: read from the analysis's error table when it keeps one
    // (materialise() then projects), else from the coefficients projected here (project_groups), which
    // materialise() reconstructs from.
    // Quantized coefficients are projected every time: the table holds no quantization error.
    out.coef_bits = budget.coef_bits;
    out.landmark_chunk = plan.landmark_chunk;
    out.select_tokens = plan.landmark_chunk > 0 ? budget.select_tokens : 0;
    const at::Tensor& V = basis_on(a.layer, a.rank, a.coded.device(), a.dtype);  // [R, D]
    const at::Tensor table = plan.quantized() ? at::Tensor() : error_table(a, V);
    at::Tensor err, err_pos, quant;  // [n_coded]: relative errors, their positions, the quantization part
    if (table.defined()) {
        const at::Tensor err_sq = table.gather(1, ranks.unsqueeze(1)).squeeze(1).to(at::kDouble);
        err = err_sq.sqrt() / a.z_norm.clamp_min(1e-30);
        err_pos = a.coded;
        quant = at::zeros_like(err);  // not quantized
    } else {
        at::Tensor err_sq = at::empty({n_coded}, a.z_norm.options().dtype(at::kDouble));  // rank order
        at::Tensor quant_sq = at::empty_like(err_sq);
        const at::Tensor sigma =
            plan.quantized() ? coefficient_scale(a.layer, a.rank, a.coded.device()) : at::Tensor();
        project_groups(a, V, ranks.index_select(0, order), order, budget.coef_bits, sigma, out.rank_groups,
                       &err_sq, &quant_sq);
        const at::Tensor z_norm = a.z_norm.index_select(0, order).clamp_min(1e-30);
        err = err_sq.sqrt() / z_norm;
        quant = plan.quantized() ? quant_sq.sqrt() / z_norm : at::zeros_like(err);
        err_pos = a.coded.index_select(0, order);
    }
    sync_for_timing(err, settings_.precise_timing);
    const double projection_ms = lap_ms(t);

    // Diagnostics: built on the device, copied to the host in one piece (fp64 holds the ranks exactly).
    const auto dopts = err.options();
    const at::Tensor rf = ranks.to(at::kDouble);
    at::Tensor rank_all =
        at::full({n_tok}, static_cast<double>(dim), dopts).index_copy_(0, a.coded, rf);  // [L]
    at::Tensor err_all = at::zeros({n_tok}, dopts).index_copy_(0, err_pos, err);
    at::Tensor norm_all = at::zeros({n_tok}, dopts).index_copy_(0, a.coded, a.s_hat.to(at::kDouble));
    const at::Tensor n_groups = (ranks + kQuantGroup - 1).div(kQuantGroup, "floor").sum().to(at::kDouble);
    const at::Tensor stats =
        at::stack({rf.sum(), rf.min(), rf.max(), rf.mean(), (ranks == budget.r_min).to(at::kDouble).mean(),
                   err_all.mean(), quant.sum() / static_cast<double>(n_tok), n_groups});
    const at::Tensor host = at::cat({stats, rank_all, err_all, norm_all}).to(at::kCPU);  // [8 + 3 L]
    const double* st = host.data_ptr<double>();

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
    d.mean_quant_error = st[6];
    d.coef_bits = plan.quantized() ? plan.coef_bits : 8 * element_size(a.dtype);
    d.index_bits = plan.index_bits;
    d.set_bits = plan.set_bits;
    d.rank_bits = plan.rank_bits;
    d.basis_bytes = plan.basis_bytes();
    d.stored_bytes = plan.stored_bytes(d.sum_ranks, static_cast<int64_t>(st[7]));
    d.full_bytes = plan.full_bytes();
    d.footprint = static_cast<double>(d.stored_bytes) / static_cast<double>(d.full_bytes);
    d.salience = a.salience;
    d.rank = host.narrow(0, 8, n_tok).to(at::kLong);
    d.rel_error = host.narrow(0, 8 + n_tok, n_tok).to(at::kFloat);
    d.salience_norm = host.narrow(0, 8 + 2 * n_tok, n_tok).to(at::kFloat);
    d.exact = a.layout.exact_mask;
    d.timing = a.timing;
    d.timing.projection = projection_ms;
    d.timing.water_filling = fill_ms + lap_ms(t);
    return out;
}

std::vector<RankGroup> VarRateMethod::coefficient_groups(const LayerAnalysis& analysis,
                                                         const LayerAllocation& allocation) {
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    const at::Tensor& order = allocation.rank_order;  // [n_coded]
    const int64_t n_coded = a.coded.size(0);
    int64_t grouped = 0;
    for (const RankGroup& g : allocation.rank_groups) grouped += g.tokens;
    if (!order.defined() || order.size(0) != n_coded || grouped != n_coded)
        throw Error(fmt::format("{}: layer {} allocation does not match its analysis", name(), a.layer));
    // An allocation that read its errors from the analysis's table has no coefficients yet.
    std::vector<RankGroup> groups = allocation.rank_groups;
    if (std::any_of(groups.begin(), groups.end(),
                    [](const RankGroup& g) { return !g.coefficients.defined(); }))
        project_groups(
            a, basis_on(a.layer, a.rank, a.coded.device(), a.dtype),
            allocation.coded_ranks.index_select(0, order), order, allocation.coef_bits,
            allocation.coef_bits < 16 ? coefficient_scale(a.layer, a.rank, a.coded.device()) : at::Tensor(),
            groups, nullptr);
    return groups;
}

std::shared_ptr<const LayerPrefix> VarRateMethod::store(const LayerCapture& capture,
                                                        const LayerAnalysis& analysis,
                                                        const LayerAllocation& allocation) {
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    if (!capture.rope_inv_freq.defined())
        throw Error(
            fmt::format("{}: layer {} capture has no RoPE frequencies to store it with", name(), a.layer));
    const std::vector<RankGroup> groups = coefficient_groups(analysis, allocation);
    const at::Tensor& order = allocation.rank_order;   // [n_coded]
    const at::Tensor ranks = allocation.coded_ranks;   // [n_coded] int64, position order
    const at::Tensor start = ranks.cumsum(0) - ranks;  // [n_coded] exclusive
    const int64_t sum_ranks = allocation.diagnostics.sum_ranks;
    const bool quantized = allocation.coef_bits < 16;
    // Each group's coefficients (rank order, zero past each rank) into one flat array in position order;
    // quantized, their codes, and each token's groups' scales and minima likewise.
    at::Tensor flat = quantized ? at::empty({sum_ranks}, ranks.options().dtype(at::kByte))
                                : at::empty({sum_ranks}, capture.keys.options());
    const at::Tensor n_groups = (ranks + kQuantGroup - 1).div(kQuantGroup, "floor");  // [n_coded]
    const at::Tensor group_start = n_groups.cumsum(0) - n_groups;                     // [n_coded] exclusive
    const int64_t total_groups = quantized ? n_groups.sum().item<int64_t>() : 0;
    at::Tensor scale = at::empty({total_groups}, ranks.options().dtype(at::kHalf));
    at::Tensor minimum = at::empty_like(scale);
    int64_t begin = 0;
    for (const RankGroup& g : groups) {
        const at::Tensor rows = order.narrow(0, begin, g.tokens);
        const at::Tensor i = at::arange(g.width, ranks.options()).unsqueeze(0);  // [1, width]
        const at::Tensor keep = i < ranks.index_select(0, rows).unsqueeze(1);    // [n, width]
        const at::Tensor idx = start.index_select(0, rows).unsqueeze(1) + i;     // [n, width]
        if (quantized) {
            flat.index_put_({idx.masked_select(keep)}, g.codes.narrow(1, 0, g.width).masked_select(keep));
            const at::Tensor j = at::arange(g.group_scale.size(1), ranks.options()).unsqueeze(0);
            const at::Tensor used = j < n_groups.index_select(0, rows).unsqueeze(1);  // [n, groups]
            const at::Tensor gi = (group_start.index_select(0, rows).unsqueeze(1) + j).masked_select(used);
            scale.index_put_({gi}, g.group_scale.masked_select(used));
            minimum.index_put_({gi}, g.group_min.masked_select(used));
        } else {
            flat.index_put_({idx.masked_select(keep)},
                            g.coefficients.masked_select(keep).to(flat.scalar_type()));
        }
        begin += g.tokens;
    }
    const at::Tensor exact = CompressedLayer::exact_order(a.n_tokens, a.settings.stride, a.settings.window)
                                 .to(capture.keys.device());
    CompressedLayer::Parts p;
    p.layer = a.layer;
    p.n_tokens = a.n_tokens;
    p.n_kv_head = a.n_kv_head;
    p.head_dim = a.head_dim;
    p.stride = a.settings.stride;
    p.window = a.settings.window;
    p.exact_keys = capture.keys_pre_rope.index_select(1, exact);
    p.exact_values = capture.values.index_select(1, exact);
    CompressedLayer::pack_metadata(p, a.res.nearest, ranks, a.layout.n_anchors(), a.rank, uniform_ranks());
    if (quantized) {
        p.coef_bits = allocation.coef_bits;
        p.codes = pack_bits(flat, p.coef_bits);
        p.group_scale = scale;
        p.group_min = minimum;
    } else {
        p.coefficients = flat;
    }
    p.basis = basis_on(a.layer, a.rank, a.coded.device(), a.dtype);
    if (quantized) {
        // The codes hold c / sigma: the store reconstructs with the basis rows scaled by sigma instead, held
        // once per layer (shared by every store, as the unscaled rows are).
        at::Tensor& scaled = scaled_basis_.at(a.layer);
        if (!scaled.defined() || !scaled.is_same_size(p.basis)) {
            const at::Tensor sigma = coefficient_scale(a.layer, a.rank, a.coded.device());
            scaled = sigma.defined() ? p.basis * sigma.unsqueeze(1) : p.basis;
        }
        p.basis = scaled;
    }
    p.inv_freq = capture.rope_inv_freq;
    p.rope_dtype = capture.rope_cos.scalar_type();
    if (allocation.landmark_chunk > 0) {
        p.landmark_chunk = allocation.landmark_chunk;
        p.select_tokens = allocation.select_tokens;
        p.landmarks = CompressedLayer::make_landmarks(capture.keys, p.stride, p.window, p.landmark_chunk);
    }
    return std::make_shared<const CompressedLayer>(std::move(p));
}

LayerKV VarRateMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                   const LayerAllocation& allocation) {
    const auto& a = dynamic_cast<const VarRateAnalysis&>(analysis);
    const at::Tensor& order = allocation.rank_order;  // [n_coded]
    const int64_t n_coded = a.coded.size(0);
    const std::vector<RankGroup> groups = coefficient_groups(analysis, allocation);
    // z^ = z-bar + V^T c^, one GEMM per run of allocation.rank_groups over only the basis rows its tokens
    // use (a GEMM over the masked full-rank coefficients would spend most of its work on zeros).
    // A bf16 cache is reconstructed with bf16 GEMMs (paper A.11: bf16 compute for the reconstruction,
    // accuracy unchanged): the stored coefficients are bf16 values already, the basis is held in bf16 once
    // per layer, and the product (accumulated in fp32) is rounded to bf16 once before z-bar is added in fp32,
    // which adds at most about one rounding step of the cache's own precision. fp32 caches keep the fp32
    // product.
    const bool bf16 = a.dtype == at::kBFloat16;
    // LibTorch 1.13's CPU bf16 matmul accumulates in fp32 only on CPUs with bf16 instructions; elsewhere
    // (AVX2) its fallback loses precision (3 % of the largest key at R = 256), so there the bf16 operands are
    // multiplied in fp32 instead: the same contract, emulated.
    const bool exact_bf16_matmul = !a.coded.device().is_cpu() || cpu_has_bf16_matmul();
    const at::Tensor& V = bf16 ? bf16_basis_on(a.layer, a.rank, a.coded.device())
                               : basis_on(a.layer, a.rank, a.coded.device(), a.dtype);  // [R, D]
    at::Tensor z_hat = at::empty({n_coded, a.dim}, a.res.residual.options());           // [n_coded, D] fp32
    int64_t begin = 0;
    for (const RankGroup& g : groups) {
        at::Tensor z_rows = z_hat.narrow(0, begin, g.tokens);  // [n, D]
        anchor_means_out(z_rows, a.res, a.res.nearest.index_select(0, order.narrow(0, begin, g.tokens)));
        if (bf16 && exact_bf16_matmul)
            z_rows.add_(g.coefficients.to(at::kBFloat16).mm(V.narrow(0, 0, g.width)));  // [n, D] bf16
        else if (bf16)  // the same bf16 values multiplied in fp32, the product rounded once
            z_rows.add_(g.coefficients.to(at::kBFloat16)
                            .to(at::kFloat)
                            .mm(V.narrow(0, 0, g.width).to(at::kFloat))
                            .to(at::kBFloat16));
        else
            z_rows.addmm_(g.coefficients, V.narrow(0, 0, g.width));
        begin += g.tokens;
    }
    // Split into keys and values, keys re-rotated to post-RoPE at their positions (apply_rope's
    // x cos + rotate_half(x) sin, half by half into one buffer); exact tokens copied untouched.
    const int64_t n_kv = a.n_kv_head, hd = a.head_dim, half = hd / 2;
    const at::Tensor pos = a.coded.index_select(0, order);                              // [n_coded]
    const at::Tensor parts = z_hat.view({n_coded, 2, n_kv, hd}).permute({1, 2, 0, 3});  // [2, G, n_coded, hd]
    const at::Tensor cos = capture.rope_cos.index_select(0, pos).to(at::kFloat);        // [n_coded, hd]
    const at::Tensor sin = capture.rope_sin.index_select(0, pos).to(at::kFloat);
    const at::Tensor x1 = parts[0].narrow(2, 0, half), x2 = parts[0].narrow(2, half, half);
    at::Tensor k_post = at::empty({n_kv, n_coded, hd}, z_hat.options());  // [G, n_coded, hd]
    at::Tensor k1 = k_post.narrow(2, 0, half), k2 = k_post.narrow(2, half, half);
    at::Tensor term = at::empty({n_kv, n_coded, half}, z_hat.options());
    at::mul_out(k1, x1, cos.narrow(1, 0, half));
    k1.sub_(at::mul_out(term, x2, sin.narrow(1, 0, half)));  // x1 cos - x2 sin
    at::mul_out(k2, x2, cos.narrow(1, half, half));
    k2.add_(at::mul_out(term, x1, sin.narrow(1, half, half)));  // x2 cos + x1 sin
    // Keys and values of the layer in one buffer, each filled by one copy of its exact and of its coded rows.
    at::Tensor both = at::empty({2, n_kv, a.n_tokens, hd}, capture.keys.options());  // [2, G, L, hd]
    LayerKV kv{both[0], both[1]};
    kv.keys.index_copy_(1, a.exact, capture.keys.index_select(1, a.exact));
    kv.values.index_copy_(1, a.exact, capture.values.index_select(1, a.exact));
    at::Tensor coded_rows = at::empty({2, n_kv, n_coded, hd}, capture.keys.options());
    coded_rows[0].copy_(k_post);
    coded_rows[1].copy_(parts[1]);
    both.index_copy_(2, pos, coded_rows);
    sync_for_timing(kv.values, settings_.precise_timing);
    return kv;
}

}  // namespace varrate

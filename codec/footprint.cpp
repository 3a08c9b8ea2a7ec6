#include "codec/footprint.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "codec/anchor_sets.h"
#include "codec/anchors.h"
#include "codec/quantize.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

int64_t floor_scalars(double kappa, int64_t n_tokens, int64_t dim) {
    // kappa * L * D, floored; the tiny slack keeps e.g. 0.2 * 1000 * 64 from flooring to 12799.
    return static_cast<int64_t>(
        std::floor(kappa * static_cast<double>(n_tokens) * static_cast<double>(dim) + 1e-6));
}

// Smallest kappa (rounded up to 1e-4) whose floored scalar budget reaches `needed` scalars.
double smallest_kappa(int64_t needed, int64_t n_tokens, int64_t dim) {
    const double total = static_cast<double>(n_tokens) * static_cast<double>(dim);
    double k = std::ceil(static_cast<double>(needed) / total * 1e4) / 1e4;
    while (floor_scalars(k, n_tokens, dim) < needed) k += 1e-4;
    return k;
}

// The command that replaces a per-context basis by one calibrated once on other texts (not charged).
std::string calibrate_hint(const CodecSettings& s, int64_t rank) {
    return fmt::format(
        "calibrate a basis once on separate texts (it is then shared by every context and not charged): "
        "`varrate calibrate --model MODEL_DIR --text-file TEXT [--text-file TEXT ...] --rank {} --stride {} "
        "--anchors {} --window {} --out MODEL_DIR/varrate-basis.safetensors` (found beside the model, or "
        "pass it with --basis)",
        rank, s.stride, s.anchors, s.window);
}

// Scalars of cache precision that `sum_ranks` coefficients of `n_coded` tokens take at most: at cache
// precision one each; quantized, b bits each plus one scale and minimum per group of 32, a partial group per
// token reserved (sum ceil(r / 32) <= sum r / 32 + n_coded).
int64_t coefficient_scalars(const CodecBudget& b, int64_t sum_ranks) {
    if (!b.quantized()) return sum_ranks;
    const int64_t g = kQuantGroup, param_bits = 8 * kGroupParamBytes;
    const int64_t bits = (sum_ranks * (b.coef_bits * g + param_bits) + g - 1) / g + param_bits * b.n_coded;
    const int64_t scalar_bits = 8 * b.element_size;
    return (bits + scalar_bits - 1) / scalar_bits;
}

// The most coefficients that `scalars` of cache precision hold (the inverse of coefficient_scalars).
int64_t coefficients_in(const CodecBudget& b, int64_t scalars) {
    if (!b.quantized()) return scalars;
    const int64_t g = kQuantGroup, param_bits = 8 * kGroupParamBytes;
    const int64_t bits = scalars * 8 * b.element_size - param_bits * b.n_coded;
    return bits <= 0 ? 0 : bits * g / (b.coef_bits * g + param_bits);
}

}  // namespace

MetadataScheme metadata_scheme() {
    static const MetadataScheme scheme = [] {
        const char* bits = std::getenv("VARRATE_METADATA_BITS");
        if (bits && std::string(bits) == "16") return MetadataScheme::Int16;
        const char* v = std::getenv("VARRATE_METADATA");
        const std::string name = v ? v : "";
        if (name.empty() || name == "sets") return MetadataScheme::Sets;
        if (name == "ordinals") return MetadataScheme::Ordinals;
        if (name == "int16") return MetadataScheme::Int16;
        throw Error(
            fmt::format("VARRATE_METADATA={} is not a metadata scheme (sets, ordinals or int16)", name));
    }();
    return scheme;
}

int64_t anchor_index_bits(int64_t n_anchors) {
    if (metadata_scheme() == MetadataScheme::Int16) return n_anchors < 32768 ? 16 : 32;
    return bit_width(std::max<int64_t>(n_anchors - 1, 0));
}

int64_t anchor_set_stream_bits(int64_t n_anchors, int64_t c) {
    return metadata_scheme() == MetadataScheme::Sets ? anchor_set_bits(n_anchors, c) : 0;
}

int64_t rank_bits_for(int64_t rank_cap, bool uniform_ranks) {
    const MetadataScheme scheme = metadata_scheme();
    if (scheme == MetadataScheme::Int16) return 16;
    if (scheme == MetadataScheme::Sets && uniform_ranks) return 0;
    return bit_width(std::max<int64_t>(rank_cap, 0));
}

int64_t CodecBudget::index_total_bytes() const {
    const int64_t sets =
        set_bits > 0 ? packed_bytes(n_coded, set_bits) : packed_bytes(n_coded * anchors, index_bits);
    return sets + packed_bytes(n_coded, rank_bits);
}

int64_t CodecBudget::coefficient_bytes(int64_t sum_ranks, int64_t n_groups) const {
    if (!quantized()) return sum_ranks * element_size;
    return packed_bytes(sum_ranks, coef_bits) + n_groups * kGroupParamBytes;
}

CodecBudget plan_codec_budget(const CodecSettings& s, int64_t n_tokens, int64_t dim, int64_t element_size,
                              const std::string& who, bool self_calibrated_basis, bool uniform_ranks) {
    if (s.stride <= 0 || s.anchors <= 0 || s.window < 0 || s.r_min < 0 || s.rank <= 0)
        throw Error(
            fmt::format("{}: settings need stride > 0, anchors > 0, window >= 0, r_min >= 0, rank > 0 "
                        "(got stride {}, anchors {}, window {}, r_min {}, rank {})",
                        who, s.stride, s.anchors, s.window, s.r_min, s.rank));
    const AnchorLayout layout = make_anchor_layout(n_tokens, s.stride, s.window);
    CodecBudget b;
    b.n_tokens = n_tokens;
    b.dim = dim;
    b.n_anchors = layout.n_anchors();
    b.n_exact = layout.n_exact();
    b.n_coded = layout.n_coded();
    b.rank_cap = std::min(s.rank, dim);
    b.element_size = element_size;
    b.anchors = s.anchors;
    b.index_bits = anchor_index_bits(b.n_anchors);
    b.set_bits = anchor_set_stream_bits(b.n_anchors, s.anchors);
    b.rank_bits = rank_bits_for(b.rank_cap, uniform_ranks);
    if (b.n_coded == 0 || b.n_anchors < s.anchors)
        throw InfeasibleBudget(
            fmt::format("{}: a context of L={} tokens is too short for stride {}, c={} anchors and a window "
                        "of {}: it has {} "
                        "anchors and {} coded tokens (needs >= {} anchors and >= 1 coded token); no kappa is "
                        "feasible for this L",
                        who, n_tokens, s.stride, s.anchors, s.window, b.n_anchors, b.n_coded, s.anchors));
    if (s.coef_bits != 16 && !is_supported_bits(s.coef_bits))
        throw Error(
            fmt::format("{}: coefficient bits {} is not supported (2, 3, 4, 8, or 16 for the cache "
                        "precision)",
                        who, s.coef_bits));
    b.coef_bits = s.coef_bits;
    if (s.r_min > b.rank_cap)
        throw Error(fmt::format("{}: rank floor r_min={} is above the rank cap R={} (D={})", who, s.r_min,
                                b.rank_cap, dim));
    if (!s.paper_accounting) {
        const int64_t bytes = b.index_total_bytes();
        b.index_scalars = (bytes + element_size - 1) / element_size;
        // A decoder of this context needs every row the codec projects on; they are stored at cache
        // precision.
        if (self_calibrated_basis) b.basis_rows = b.rank_cap;
    }
    b.basis_scalars = b.basis_rows * dim;
    if (s.select_tokens > 0) {
        if (s.landmark_chunk < 1)
            throw Error(fmt::format("{}: selective attention needs a landmark chunk >= 1 (got {})", who,
                                    s.landmark_chunk));
        b.landmark_chunk = s.landmark_chunk;
        b.landmark_scalars = (b.n_coded + s.landmark_chunk - 1) / s.landmark_chunk * dim;  // min and max keys
    }
    const int64_t floor_scalars_needed = coefficient_scalars(b, s.r_min * b.n_coded);
    const int64_t needed_uncharged =
        b.n_exact * dim + b.index_scalars + b.landmark_scalars + floor_scalars_needed;
    const int64_t needed = needed_uncharged + b.basis_scalars;
    b.min_feasible_budget = smallest_kappa(needed, n_tokens, dim);
    b.min_feasible_uncharged = smallest_kappa(needed_uncharged, n_tokens, dim);
    const std::string landmark_note =
        b.landmark_scalars > 0
            ? fmt::format(
                  " (selective attention's landmarks, two keys per KV head and {} coded tokens, take {} "
                  "scalars of it)",
                  b.landmark_chunk, b.landmark_scalars)
            : std::string();
    const std::string hint =
        (b.basis_scalars > 0
             ? fmt::format(
                   "the smallest feasible kappa for L={} (D={}, {} exact + {} coded tokens at r_min={}, "
                   "a charged basis of R={} x D={}) is {:.4f}",
                   n_tokens, dim, b.n_exact, b.n_coded, s.r_min, b.basis_rows, dim, b.min_feasible_budget)
             : fmt::format("the smallest feasible kappa for L={} (D={}, {} exact + {} coded tokens at "
                           "r_min={}) is {:.4f}",
                           n_tokens, dim, b.n_exact, b.n_coded, s.r_min, b.min_feasible_budget)) +
        landmark_note;
    check_budget(s.budget, who, hint);
    const int64_t total = floor_scalars(s.budget, n_tokens, dim);
    const int64_t left = total - b.n_exact * dim - b.index_scalars - b.basis_scalars - b.landmark_scalars;
    b.budget_B = coefficients_in(b, left);
    if (left < floor_scalars_needed || b.budget_B < s.r_min * b.n_coded) {
        if (b.basis_scalars > 0)
            throw InfeasibleBudget(fmt::format(
                "{}: budget kappa={} is infeasible with a basis fitted on this very context: its R={} x D={} "
                "= {} scalars per layer are charged like any stored scalar ({:.1f}% of the L x D cache), and "
                "with {} exact tokens ({} scalars), {} index scalars and the floor r_min={} per coded token "
                "({} scalars) they exceed the {} scalars of kappa x L x D; {}. With a calibrated basis file "
                "the smallest feasible kappa is {:.4f}: {}",
                who, s.budget, b.basis_rows, dim, b.basis_scalars,
                100.0 * static_cast<double>(b.basis_scalars) / static_cast<double>(n_tokens * dim), b.n_exact,
                b.n_exact * dim, b.index_scalars, s.r_min, s.r_min * b.n_coded, total, hint,
                b.min_feasible_uncharged, calibrate_hint(s, b.rank_cap)));
        throw InfeasibleBudget(
            fmt::format("{}: budget kappa={} is infeasible: it leaves B={} scalars for {} coded tokens, "
                        "below the floor r_min={} per token ({} scalars); {}",
                        who, s.budget, b.budget_B, b.n_coded, s.r_min, s.r_min * b.n_coded, hint));
    }
    if (b.budget_B > b.rank_cap * b.n_coded) {
        spdlog::debug(
            "{}: budget kappa={} exceeds rank R={} for every coded token at L={}; B capped from {} to {}",
            who, s.budget, b.rank_cap, n_tokens, b.budget_B, b.rank_cap * b.n_coded);
        b.budget_B = b.rank_cap * b.n_coded;
    }
    return b;
}

int64_t snapkv_kept_tokens(const CodecSettings& s, int64_t n_tokens, const std::string& who) {
    const int64_t w = s.obs_window;
    // int(L * kappa) >= w  <=>  kappa >= w / L (rounded up to 1e-4 so the product does not fall short).
    double k_min = std::ceil(static_cast<double>(w) / static_cast<double>(n_tokens) * 1e4) / 1e4;
    while (static_cast<int64_t>(static_cast<double>(n_tokens) * k_min) < w) k_min += 1e-4;
    if (n_tokens <= w)
        throw InfeasibleBudget(
            fmt::format("{}: a context of L={} tokens is not longer than the observation window {}; "
                        "no kappa is feasible for this L",
                        who, n_tokens, w));
    check_budget(s.budget, who,
                 fmt::format("the smallest feasible kappa for L={} is {:.4f}", n_tokens, k_min));
    const int64_t kept = static_cast<int64_t>(static_cast<double>(n_tokens) * s.budget);
    if (kept < w)
        throw InfeasibleBudget(
            fmt::format("{}: budget kappa={} keeps int(L*kappa)={} tokens per KV head, fewer than the "
                        "always-kept window of {}; the smallest feasible kappa for L={} is {:.4f}",
                        who, s.budget, kept, w, n_tokens, k_min));
    return kept;
}

}  // namespace varrate

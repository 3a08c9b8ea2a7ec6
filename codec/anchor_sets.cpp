#include "codec/anchor_sets.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "codec/quantize.h"

namespace varrate {

namespace {

// C(a, i) for a in [0, n) and i in [1, c]: [c, n] int64 on `like`'s device, row i - 1 for i. Each row from
// the last, C(a, i) = C(a, i - 1) (a - i + 1) / i, exact because the product is i C(a, i), which
// anchor_set_bits keeps below 2^63 (row i is 0 for a < i: the factor a - i + 1 is 0 at a = i - 1).
at::Tensor binomial_rows(int64_t n, int64_t c, const at::Tensor& like) {
    const at::Tensor a = at::arange(n, like.options().dtype(at::kLong));
    std::vector<at::Tensor> rows;
    at::Tensor row = a;  // C(a, 1)
    rows.push_back(row);
    for (int64_t i = 2; i <= c; ++i) {
        row = (row * (a - (i - 1)).clamp_min(0)).div(i, "floor");
        rows.push_back(row);
    }
    return at::stack(rows);
}

// Exact C(n, c) for counts below 2^62 (anchor_set_bits checks first), multiplicatively: C(n - c + i, i) for
// i = 1..c.
int64_t anchor_set_count_unchecked(int64_t n_anchors, int64_t c) {
    unsigned __int128 count = 1;
    for (int64_t i = 1; i <= c; ++i) count = count * static_cast<unsigned __int128>(n_anchors - c + i) / i;
    return static_cast<int64_t>(count);
}

void check_codable(int64_t n_anchors, int64_t c, const char* who) {
    if (anchor_set_bits(n_anchors, c) == 0)
        throw Error(fmt::format("{}: sets of {} of {} anchors do not fit in {} bits", who, c, n_anchors,
                                kMaxAnchorSetBits));
}

}  // namespace

int64_t anchor_set_bits(int64_t n_anchors, int64_t c) {
    if (c < 1 || n_anchors < c) return 0;
    // binomial_rows forms i C(a, i) for every a < n and i <= c: each must stay below 2^63 (log2 from lgamma
    // is good to far better than the bit of margin left here). Then C(n, c) = C(n - 1, c) + C(n - 1, c - 1)
    // is below 2^62 too.
    auto log2_binomial = [](double a, double i) {
        return (std::lgamma(a + 1.0) - std::lgamma(i + 1.0) - std::lgamma(a - i + 1.0)) / std::log(2.0);
    };
    for (int64_t i = 1; i <= c; ++i)
        if (i <= n_anchors - 1 &&
            std::log2(static_cast<double>(i)) +
                    log2_binomial(static_cast<double>(n_anchors - 1), static_cast<double>(i)) >
                61.0)
            return 0;
    const int64_t bits = bit_width(anchor_set_count_unchecked(n_anchors, c) - 1);  // the largest set's number
    return bits <= kMaxAnchorSetBits ? bits : 0;
}

int64_t anchor_set_count(int64_t n_anchors, int64_t c) {
    return anchor_set_bits(n_anchors, c) > 0 ? anchor_set_count_unchecked(n_anchors, c) : 0;
}

at::Tensor encode_anchor_sets(const at::Tensor& ordinals, int64_t n_anchors) {
    if (ordinals.dim() != 2) throw Error("anchor sets: ordinals must be [n, c]");
    const int64_t n = ordinals.size(0), c = ordinals.size(1);
    check_codable(n_anchors, c, "anchor sets");
    if (n == 0) return at::empty({0}, ordinals.options().dtype(at::kLong));
    const at::Tensor sorted = std::get<0>(at::sort(ordinals.to(at::kLong), 1));  // [n, c] ascending
    const at::Tensor table = binomial_rows(n_anchors, c, sorted);                // [c, n_anchors]
    at::Tensor rank = at::zeros({n}, sorted.options());
    for (int64_t i = 0; i < c; ++i) rank.add_(table[i].index_select(0, sorted.select(1, i)));
    return rank;
}

at::Tensor decode_anchor_sets(const at::Tensor& ranks, int64_t n_anchors, int64_t c) {
    if (ranks.dim() != 1) throw Error("anchor sets: ranks must be [n]");
    check_codable(n_anchors, c, "anchor sets");
    const int64_t n = ranks.size(0);
    at::Tensor left = ranks.to(at::kLong).clone();
    at::Tensor out = at::empty({n, c}, left.options());
    if (n == 0) return out;
    const at::Tensor table = binomial_rows(n_anchors, c, left);  // rows nondecreasing in a
    for (int64_t i = c; i >= 1; --i) {
        // The largest a with C(a, i) <= left: the first entry above it, minus one (C(0, i) = 0 <= left).
        const at::Tensor row = table[i - 1].contiguous();
        const at::Tensor a = at::searchsorted(row, left, /*out_int32=*/false, /*right=*/true).sub_(1);
        out.select(1, i - 1).copy_(a);
        left.sub_(row.index_select(0, a));
    }
    return out;
}

}  // namespace varrate

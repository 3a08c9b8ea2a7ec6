#include "codec/quantize.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/method.h"
#include "models/host_read.h"

namespace varrate {

namespace {

// 2^0 .. 2^(n-1) as int64 on `like`'s device.
at::Tensor powers_of_two(int64_t n, const at::Tensor& like) {
    return at::pow(2, at::arange(n, like.options().dtype(at::kLong))).to(at::kLong);
}

// Widths a packed stream takes: 1 to 62 bits per code (quantized codes, anchor indices and sets, ranks); the
// bit arithmetic is int64.
void check_width(int64_t bits, const char* who) {
    if (bits < 1 || bits > 62)
        throw Error(fmt::format("{}: {} bits is not a packable width (1 to 62)", who, bits));
}

void check_bits(int64_t bits, const char* who) {
    if (!is_supported_bits(bits))
        throw Error(fmt::format("{}: {} bits is not a supported width (2, 3, 4 or 8)", who, bits));
}

// When `bits` divides 8 and the codes start on a byte, each byte holds 8 / bits of them, lowest bits first:
// shifted and masked in uint8, never widened (decoding unpacks every block at every step).
at::Tensor unpack_aligned(const at::Tensor& bytes, int64_t bits, int64_t count) {
    const at::Tensor shifts = at::arange(0, 8, bits, bytes.options().dtype(at::kLong)).to(at::kByte);
    return at::bitwise_and(bytes.unsqueeze(1).__rshift__(shifts), (1 << bits) - 1)
        .reshape({-1})
        .narrow(0, 0, count);
}

// Whole-byte widths (16, 24, ...: the store's anchor sets at 32 and 128 anchors) starting on a byte: each
// code is its bytes, little-endian, shifted into place in int64 (one multiply-add per byte, not one per bit).
at::Tensor unpack_whole_bytes(const at::Tensor& bytes, int64_t bits, int64_t count) {
    const int64_t width = bits / 8;
    const at::Tensor b = bytes.narrow(0, 0, count * width).view({count, width}).to(at::kLong);
    at::Tensor out = b.select(1, width - 1).clone();
    for (int64_t k = width - 2; k >= 0; --k) out.mul_(256).add_(b.select(1, k));
    return out;
}

}  // namespace

bool is_supported_bits(int64_t bits) {
    return bits == 2 || bits == 3 || bits == 4 || bits == 8;
}

int64_t packed_bytes(int64_t count, int64_t bits) {
    return (count * bits + 7) / 8;
}

QuantizedGroups quantize_groups(const at::Tensor& x, int64_t bits, const at::Tensor& valid) {
    check_bits(bits, "quantize");
    if (!x.defined() || x.dim() != 2)
        throw Error(fmt::format("quantize: groups must be [n, g], got {}", shape_str(x)));
    const at::Tensor xf = x.to(at::kFloat);
    const double inf = std::numeric_limits<double>::infinity();
    at::Tensor lo, hi;
    if (valid.defined()) {
        lo = xf.masked_fill(valid.logical_not(), inf).amin(1);   // [n]
        hi = xf.masked_fill(valid.logical_not(), -inf).amax(1);  // [n]
        const at::Tensor empty = valid.any(1).logical_not();     // a group with nothing to hold
        lo.masked_fill_(empty, 0.0);
        hi.masked_fill_(empty, 0.0);
    } else {
        lo = xf.amin(1);
        hi = xf.amax(1);
    }
    const double levels = static_cast<double>((int64_t(1) << bits) - 1);
    QuantizedGroups q;
    q.scale = ((hi - lo) / levels).to(at::kHalf);
    q.min = lo.to(at::kHalf);
    const at::Tensor sf = q.scale.to(at::kFloat), mf = q.min.to(at::kFloat);
    if (!to_host(at::isfinite(sf).all().logical_and(at::isfinite(mf).all())).item<bool>())
        throw Error(
            "quantize: a group's range exceeds fp16 (|values| above 65504): this cache cannot be quantized "
            "with fp16 scales");
    const at::Tensor safe = at::where(sf > 0, sf, at::ones_like(sf)).unsqueeze(1);
    at::Tensor codes = ((xf - mf.unsqueeze(1)) / safe).round_().clamp_(0.0, levels);
    if (valid.defined()) codes.masked_fill_(valid.logical_not(), 0.0);
    q.codes = codes.to(at::kByte);
    return q;
}

at::Tensor dequantize_groups(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& min) {
    return codes.to(at::kFloat) * scale.to(at::kFloat).unsqueeze(1) + min.to(at::kFloat).unsqueeze(1);
}

at::Tensor pack_bits(const at::Tensor& codes, int64_t bits) {
    check_width(bits, "pack");
    const at::Tensor flat = codes.reshape({-1}).to(at::kLong);
    const int64_t m = flat.size(0);
    at::Tensor out = at::empty({packed_bytes(m, bits)}, flat.options().dtype(at::kByte));
    if (m == 0) return out;
    const at::Tensor code_bits = powers_of_two(bits, flat);  // [bits]
    const at::Tensor byte_bits = powers_of_two(8, flat);     // [8]
    // Chunks of 8 k codes end on a byte boundary whatever the width, and bound the bit temporaries.
    constexpr int64_t kChunk = int64_t(1) << 20;
    for (int64_t begin = 0; begin < m; begin += kChunk) {
        const int64_t n = std::min(kChunk, m - begin);
        const at::Tensor c = flat.narrow(0, begin, n).unsqueeze(1);                       // [n, 1]
        at::Tensor stream = at::bitwise_and(c.div(code_bits, "floor"), 1).reshape({-1});  // [n * bits]
        const int64_t n_bytes = packed_bytes(n, bits);
        if (stream.size(0) < n_bytes * 8)
            stream = at::cat({stream, at::zeros({n_bytes * 8 - stream.size(0)}, stream.options())});
        out.narrow(0, begin * bits / 8, n_bytes)
            .copy_((stream.view({n_bytes, 8}) * byte_bits).sum(1).to(at::kByte));
    }
    return out;
}

at::Tensor unpack_bits(const at::Tensor& packed, int64_t bits, int64_t begin, int64_t count) {
    check_width(bits, "unpack");
    const int64_t bit0 = begin * bits, bit1 = (begin + count) * bits;
    if (begin < 0 || count < 0 || (bit1 + 7) / 8 > packed.size(0))
        throw Error(fmt::format("unpack: codes [{}, {}) of {} bits lie past a stream of {} bytes", begin,
                                begin + count, bits, packed.size(0)));
    const at::ScalarType out_type = bits <= 8 ? at::kByte : at::kLong;
    if (count == 0) return at::empty({0}, packed.options().dtype(out_type));
    const int64_t byte0 = bit0 / 8, n_bytes = (bit1 + 7) / 8 - byte0;
    const at::Tensor bytes = packed.narrow(0, byte0, n_bytes);
    if (bits == 8) return bytes;
    if (8 % bits == 0 && bit0 % 8 == 0) return unpack_aligned(bytes, bits, count);
    if (bits % 8 == 0 && bit0 % 8 == 0) return unpack_whole_bytes(bytes, bits, count);
    const at::Tensor b = bytes.to(at::kLong).unsqueeze(1);  // [n_bytes, 1]
    const at::Tensor stream = at::bitwise_and(b.div(powers_of_two(8, b), "floor"), 1).reshape({-1});
    const at::Tensor mine = stream.narrow(0, bit0 - byte0 * 8, count * bits).view({count, bits});
    return (mine * powers_of_two(bits, b)).sum(1).to(out_type);
}

at::Tensor unpack_bits_at(const at::Tensor& packed, int64_t bits, const at::Tensor& indices) {
    check_width(bits, "unpack");
    if (bits > 56) throw Error(fmt::format("unpack: a gather reads codes of up to 56 bits, not {}", bits));
    const at::ScalarType out_type = bits <= 8 ? at::kByte : at::kLong;
    if (indices.numel() == 0) return at::empty({0}, packed.options().dtype(out_type));
    // Code i starts at bit i * bits: its byte, the shift within it, and the (bits + 7) / 8 + 1 bytes at most
    // that it spans, assembled little-endian (at most 63 bits: no sign trouble once masked).
    const at::Tensor bit0 = indices.to(at::kLong) * bits;
    const at::Tensor byte0 = bit0.div(8, "floor");
    const int64_t span = (bits + 7 + 7) / 8;
    const at::Tensor offsets = at::arange(span, bit0.options());
    const at::Tensor where = (byte0.unsqueeze(1) + offsets).clamp_max(packed.size(0) - 1);  // [n, span]
    const at::Tensor bytes = packed.index_select(0, where.reshape({-1})).to(at::kLong).view(where.sizes());
    const at::Tensor word = at::bitwise_left_shift(bytes, offsets * 8).sum(1);
    const at::Tensor code =
        at::bitwise_and(at::bitwise_right_shift(word, bit0 - byte0 * 8), (int64_t{1} << bits) - 1);
    return code.to(out_type);
}

int64_t bit_width(int64_t max_value) {
    int64_t bits = 1;
    while (bits < 62 && (int64_t(1) << bits) <= max_value) ++bits;
    return bits;
}

}  // namespace varrate

#pragma once
// Group-wise asymmetric b-bit integer quantization (KIVI's min/max scheme: scale = (max - min) / (2^b - 1),
// code = round((x - min) / scale)), with each group's scale and minimum held in fp16, and the codes packed
// into one little-endian bit stream (code i occupies bits [i b, (i + 1) b)), the layout every packed integer
// stream of the project uses. VarRate's coefficients and
// KIVI's keys and values are quantized, stored and dequantized by these same functions.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace varrate {

// Bit widths a cache may be quantized to.
bool is_supported_bits(int64_t bits);  // 2, 3, 4, 8
// Bytes of `count` codes of `bits` bits packed.
int64_t packed_bytes(int64_t count, int64_t bits);
// Values per quantization group (KIVI's group size; VarRate groups each token's coefficients along its rank).
constexpr int64_t kQuantGroup = 32;
// Bytes of one group's scale and minimum (two fp16).
constexpr int64_t kGroupParamBytes = 4;

struct QuantizedGroups {
    at::Tensor codes;  // [n, g] uint8, in [0, 2^bits); 0 where not valid
    at::Tensor scale;  // [n] fp16
    at::Tensor min;    // [n] fp16
};

// Quantizes each row of x [n, g] (fp32) as one group; `valid` [n, g] bool (optional) excludes entries (a
// token's coefficients past its rank) from the group's range. The codes are computed against the fp16-rounded
// scale and minimum, so dequantize_groups reproduces exactly what was measured.
QuantizedGroups quantize_groups(const at::Tensor& x, int64_t bits, const at::Tensor& valid = at::Tensor());
// codes [n, g] (any integer type) with scale/min [n] -> [n, g] fp32.
at::Tensor dequantize_groups(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& min);

// codes [m] (integers in [0, 2^bits), 1 <= bits <= 62) -> [packed_bytes(m, bits)] uint8, on the codes'
// device. The same stream holds quantized codes and the compressed store's anchor indices or sets and ranks.
at::Tensor pack_bits(const at::Tensor& codes, int64_t bits);
// Codes [begin, begin + count) of a packed stream -> [count] on the stream's device: uint8 for widths up to
// 8 bits, int64 above.
at::Tensor unpack_bits(const at::Tensor& packed, int64_t bits, int64_t begin, int64_t count);
// Codes at positions `indices` ([n] int64, each in the stream) of a packed stream of `bits` <= 56 bits -> [n]
// on the stream's device (uint8 up to 8 bits, int64 above): a gather, reading only the bytes they span.
at::Tensor unpack_bits_at(const at::Tensor& packed, int64_t bits, const at::Tensor& indices);
// Bits that hold every integer in [0, max_value] (at least 1): the width of a packed index or rank.
int64_t bit_width(int64_t max_value);

}  // namespace varrate

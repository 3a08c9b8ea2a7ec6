// KIVI (codec/kivi_method.h, codec/quantized_layer.h): keys per channel, values per token, the recent tokens
// exact; attention over the packed layer equals attention over its dequantization, the bytes it holds are its
// accounted footprint, the footprint is KIVI's (~19 % / ~31 % of a 16-bit cache), and error falls with bits.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "codec/methods/kivi_method.h"
#include "codec/quantize.h"
#include "codec/quantized_layer.h"
#include "codec/registry.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

struct Kivi {
    LayerCapture capture;
    LayerAllocation allocation;
    LayerKV materialised;
    std::shared_ptr<const QuantizedLayer> store;
};

Kivi run_kivi(int64_t bits, int64_t n_head, int64_t n_kv_head, int64_t head_dim, int64_t n_tokens,
              at::ScalarType dtype) {
    SyntheticShape shape;
    shape.n_head = n_head;
    shape.n_kv_head = n_kv_head;
    shape.head_dim = head_dim;
    shape.n_tokens = n_tokens;
    CodecSettings s;
    s.precise_timing = false;
    auto m = make_method("kivi" + std::to_string(bits), s);
    Kivi k;
    k.capture = synthetic_capture(shape, 31, 0, dtype);
    const auto analysis = m->analyse(k.capture);
    k.allocation = m->allocate(*analysis, s);
    k.materialised = m->materialise(k.capture, *analysis, k.allocation);
    k.store = std::dynamic_pointer_cast<const QuantizedLayer>(m->store(k.capture, *analysis, k.allocation));
    return k;
}

}  // namespace

class TestCodecKivi : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // Attention over the packed layer (blocks dequantized into scratch) equals dense attention over the
    // layer's dequantization, which is what materialise() returns; the residual is kept exactly.
    void attention_equals_dequantized_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<int>("n_head");
        QTest::addColumn<bool>("bf16");
        QTest::newRow("kivi2 fp32 gqa 1:1") << 2 << 2 << false;
        QTest::newRow("kivi4 fp32 gqa 4:1") << 4 << 8 << false;
        QTest::newRow("kivi2 bf16 gqa 4:1") << 2 << 8 << true;
        QTest::newRow("kivi4 bf16 gqa 1:1") << 4 << 2 << true;
    }
    void attention_equals_dequantized() {
        QFETCH(int, bits);
        QFETCH(int, n_head);
        QFETCH(bool, bf16);
        const at::ScalarType dtype = bf16 ? at::kBFloat16 : at::kFloat;
        const Kivi k = run_kivi(bits, n_head, 2, 32, 1500, dtype);  // 1344 quantized tokens: two blocks
        QCOMPARE(k.store->parts().n_quant, int64_t(1344));
        const LayerKV r = k.store->reconstruct();
        QVERIFY(at::equal(r.keys, k.materialised.keys));
        QVERIFY(at::equal(r.values, k.materialised.values));
        QVERIFY(at::equal(r.keys.narrow(1, 1344, 156), k.capture.keys.narrow(1, 1344, 156)));
        at::Generator gen = at::detail::createCPUGenerator(3);
        for (int64_t n_q : {1, 4}) {
            const int64_t n_tail = n_q + 2;
            const auto f32 = at::TensorOptions().dtype(at::kFloat);
            const at::Tensor q = at::normal(0.0, 1.0, {n_head, n_q, 32}, gen, f32).to(dtype);
            const at::Tensor tk = at::normal(0.0, 1.0, {2, n_tail, 32}, gen, f32).to(dtype);
            const at::Tensor tv = at::normal(0.0, 1.0, {2, n_tail, 32}, gen, f32).to(dtype);
            const double scale = 1.0 / std::sqrt(32.0);
            const at::Tensor got = k.store->attend(q, tk, tv, scale);
            const at::Tensor want =
                test::dense_causal_attention(q, at::cat({r.keys, tk}, 1), at::cat({r.values, tv}, 1), scale);
            const double d = test::rel_max_diff(got, want);
            qInfo("n_q %lld: differs by %.3g", static_cast<long long>(n_q), d);
            QVERIFY2(d <= (bf16 ? 2e-2 : 1e-5), qPrintable(QString("differs by %1").arg(d)));
        }
    }

    // The footprint is what the bits say: codes + fp16 scale and minimum per group of 32 + the exact
    // residual, measured from the tensors and equal to the accounted bytes; ~19 % (2-bit) and ~31 % (4-bit)
    // of a 16-bit cache at 8k tokens; the error falls with bits.
    void footprint_is_kivis() {
        const int64_t L = 8192, G = 2, hd = 64;
        double previous = 1e9;
        for (int64_t bits : {2, 4}) {
            const Kivi k = run_kivi(bits, 4, G, hd, L, at::kBFloat16);
            const LayerDiagnostics& d = k.allocation.diagnostics;
            const int64_t nq = (L - KiviMethod::kResidual) / 32 * 32;
            const int64_t codes = 2 * packed_bytes(nq * G * hd, bits);
            const int64_t params = kGroupParamBytes * (nq / 32 * G * hd + nq * G * hd / 32);
            const int64_t residual = 2 * (L - nq) * G * hd * 2;
            QCOMPARE(d.stored_bytes, codes + params + residual);
            QCOMPARE(k.store->resident_bytes(), d.stored_bytes);
            QCOMPARE(d.full_bytes, L * 2 * G * hd * 2);
            qInfo("kivi%lld: footprint %.4f, rel error %.4f", static_cast<long long>(bits), d.footprint,
                  d.mean_rel_error);
            const double expected = (static_cast<double>(bits) + 1.0) / 16.0;  // codes + one fp16 pair per 32
            QVERIFY(std::abs(d.footprint - expected) < 0.02);
            QCOMPARE(d.mean_quant_error, d.mean_rel_error);
            QVERIFY(d.mean_rel_error < previous);
            previous = d.mean_rel_error;
            QCOMPARE(d.n_exact, L - nq);
        }
    }

    // The store against a loop over KIVI's grouping written out here: keys per channel, each channel's groups
    // of 32 consecutive tokens sharing an fp16 scale (max - min) / (2^b - 1) and minimum; values per token,
    // each head's groups of 32 channels; the recent tokens exact. The reconstruction equals the loop's
    // dequantization, every entry within half a step of its group (plus the fp16 rounding of the minimum),
    // and the loop with the two axes swapped (keys per token, values per channel) does not match it.
    void grouping_matches_a_loop_reference() {
        const int64_t G = 2, hd = 64, L = 300, bits = 2;
        const Kivi k = run_kivi(bits, 4, G, hd, L, at::kFloat);
        const int64_t nq = k.store->parts().n_quant;
        QCOMPARE(nq, int64_t{160});  // (300 - 128) rounded down to whole groups of 32
        const LayerKV r = k.store->reconstruct();
        const float levels = static_cast<float>((1 << bits) - 1);
        // Dequantizes x[i] for the group of indices `idx` of a flat [G, L, hd] fp32 array.
        auto dequant_group = [&](const float* x, const std::vector<int64_t>& idx, float* out, float* step) {
            float lo = std::numeric_limits<float>::infinity(), hi = -lo;
            for (int64_t i : idx) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
            const float scale = static_cast<float>(c10::Half((hi - lo) / levels));
            const float mn = static_cast<float>(c10::Half(lo));
            const float safe = scale > 0 ? scale : 1.0f;
            for (int64_t i : idx) {
                const float code = std::clamp(std::nearbyint((x[i] - mn) / safe), 0.0f, levels);
                out[i] = code * scale + mn;
                step[i] = scale / 2 + std::abs(mn - lo);
            }
        };
        auto reference = [&](const at::Tensor& t, bool per_channel) {  // [G, L, hd] fp32 -> same, dequantized
            const at::Tensor x = t.to(at::kFloat).contiguous();
            at::Tensor out = x.clone(), bound = at::zeros_like(x);
            const float* px = x.data_ptr<float>();
            float* po = out.data_ptr<float>();
            float* pb = bound.data_ptr<float>();
            for (int64_t g = 0; g < G; ++g) {
                if (per_channel) {
                    for (int64_t c = 0; c < hd; ++c)
                        for (int64_t t0 = 0; t0 < nq; t0 += 32) {
                            std::vector<int64_t> idx;
                            for (int64_t t = t0; t < t0 + 32; ++t) idx.push_back((g * L + t) * hd + c);
                            dequant_group(px, idx, po, pb);
                        }
                } else {
                    for (int64_t t = 0; t < nq; ++t)
                        for (int64_t c0 = 0; c0 < hd; c0 += 32) {
                            std::vector<int64_t> idx;
                            for (int64_t c = c0; c < c0 + 32; ++c) idx.push_back((g * L + t) * hd + c);
                            dequant_group(px, idx, po, pb);
                        }
                }
            }
            return std::make_pair(out, bound);
        };
        const auto [keys_ref, keys_bound] = reference(k.capture.keys, /*per_channel=*/true);
        const auto [values_ref, values_bound] = reference(k.capture.values, /*per_channel=*/false);
        const double kd = (r.keys - keys_ref).abs().max().item<double>();
        const double vd = (r.values - values_ref).abs().max().item<double>();
        QVERIFY2(kd < 1e-5 && vd < 1e-5,
                 qPrintable(QString("keys %1, values %2 from the loop").arg(kd).arg(vd)));
        QVERIFY(((r.keys - k.capture.keys).abs() <= keys_bound + 1e-6).all().item<bool>());
        QVERIFY(((r.values - k.capture.values).abs() <= values_bound + 1e-6).all().item<bool>());
        QVERIFY(at::equal(r.keys.narrow(1, nq, L - nq), k.capture.keys.narrow(1, nq, L - nq)));
        // The axes swapped: a different quantization, far from the store's.
        const auto swapped_keys = reference(k.capture.keys, /*per_channel=*/false).first;
        const auto swapped_values = reference(k.capture.values, /*per_channel=*/true).first;
        QVERIFY((r.keys - swapped_keys).abs().max().item<double>() > 100 * kd + 1e-3);
        QVERIFY((r.values - swapped_values).abs().max().item<double>() > 100 * vd + 1e-3);
    }

    // A head narrower than 32 channels is one value group; a context shorter than the residual is kept whole.
    void narrow_heads_and_short_contexts() {
        const Kivi k = run_kivi(2, 4, 2, 8, 300, at::kFloat);
        QCOMPARE(QuantizedLayer::value_group(8), int64_t(8));
        QCOMPARE(k.store->parts().n_quant, int64_t(160));
        QVERIFY(test::rel_max_diff(k.store->reconstruct().values, k.capture.values) < 0.5);
        const Kivi s = run_kivi(4, 4, 2, 16, 100, at::kFloat);
        QCOMPARE(s.store->parts().n_quant, int64_t(0));
        QVERIFY(at::equal(s.materialised.keys, s.capture.keys));
        QCOMPARE(s.allocation.diagnostics.mean_rel_error, 0.0);
    }

    // A malformed layer is refused with a message naming what is wrong.
    void malformed_parts_are_refused() {
        const Kivi k = run_kivi(2, 4, 2, 32, 400, at::kFloat);
        QuantizedLayer::Parts p = k.store->parts();
        p.key_codes = p.key_codes.narrow(0, 0, 10);
        EXPECT_ERROR(QuantizedLayer{p}, "key codes has shape");
        p = k.store->parts();
        p.bits = 5;
        EXPECT_ERROR(QuantizedLayer{p}, "5 bits is not");
        EXPECT_ERROR(make_method("kivi3", CodecSettings{}), "unknown compression method 'kivi3'");
    }
};

QTEST_GUILESS_MAIN(TestCodecKivi)
#include "test_codec_kivi.moc"

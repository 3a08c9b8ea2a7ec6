// Group-wise b-bit quantization (codec/quantize.h) and VarRate / flat with quantized coefficients: codes pack
// and unpack exactly, every value is within half a step of its group's grid, the codec's error falls as bits
// rise (its quantization part reported apart), the budget counted in bits holds more coefficients and is met,
// and 16 bits is the unquantized codec.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/methods/varrate_method.h"
#include "codec/quantize.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

CodecSettings settings(double kappa, int64_t bits) {
    CodecSettings s;
    s.budget = kappa;
    s.r_min = 2;
    s.rank = 1024;  // clamped to D
    s.coef_bits = bits;
    s.precise_timing = false;
    return s;
}

struct Run {
    LayerAllocation allocation;
    LayerKV kv;
};

// One layer of a synthetic capture (D = 2 * 2 * 32 = 128) coded at kappa with `bits` coefficients.
Run run_codec(double kappa, int64_t bits, RankAllocation allocation = RankAllocation::Salience,
              at::ScalarType dtype = at::kFloat, bool paper_accounting = false) {
    SyntheticShape shape;
    shape.n_head = 4;
    shape.n_kv_head = 2;
    shape.head_dim = 32;
    shape.n_tokens = 900;
    CodecSettings s = settings(kappa, bits);
    s.paper_accounting = paper_accounting;
    VarRateMethod m(s, random_basis(1, 128, 128, s.stride, s.anchors, 7), allocation);
    const LayerCapture capture = synthetic_capture(shape, 21, 0, dtype);
    const auto analysis = m.analyse(capture);
    Run r;
    r.allocation = m.allocate(*analysis, s);
    r.kv = m.materialise(capture, *analysis, r.allocation);
    return r;
}

}  // namespace

class TestCodecQuantize : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // Codes of every width survive packing, read back whole and from unaligned ranges; the stream has
    // exactly ceil(m b / 8) bytes, laid out little-endian (code i at bits [i b, (i + 1) b), bit k of the
    // stream being bit k % 8 of byte k / 8), read here bit by bit. The widths: the quantized codes' (2, 3,
    // 4, 8), the store's anchor indices and ranks (1 to 17 here, up to 32) and its anchor sets (up to 56;
    // whole bytes, 16 and 24, take a path of their own).
    void pack_unpack_round_trip_data() {
        QTest::addColumn<int>("bits");
        for (int b : {1, 2, 3, 4, 5, 7, 8, 11, 16, 17, 24, 32, 33, 47, 56, 62})
            QTest::newRow(qPrintable(QString("%1-bit").arg(b))) << b;
    }
    void pack_unpack_round_trip() {
        QFETCH(int, bits);
        at::Generator gen = at::detail::createCPUGenerator(5);
        const int64_t m = 1237;
        const at::Tensor codes = at::randint(0, int64_t(1) << bits, {m}, gen, at::kLong);
        const at::Tensor packed = pack_bits(codes, bits);
        QCOMPARE(packed.scalar_type(), at::kByte);
        QCOMPARE(packed.size(0), (m * bits + 7) / 8);
        const at::Tensor bytes = packed.to(at::kLong);
        const int64_t* pb = bytes.data_ptr<int64_t>();
        const int64_t* pc = codes.data_ptr<int64_t>();
        for (int64_t i = 0; i < m; ++i) {
            int64_t v = 0;
            for (int64_t k = 0; k < bits; ++k) {
                const int64_t bit = i * bits + k;
                v |= ((pb[bit / 8] >> (bit % 8)) & 1) << k;
            }
            QCOMPARE(v, pc[i]);
        }
        QVERIFY(at::equal(unpack_bits(packed, bits, 0, m).to(at::kLong), codes));
        for (auto [begin, count] : {std::pair<int64_t, int64_t>{1, 7}, {5, 300}, {1000, 237}, {13, 0}})
            QVERIFY(at::equal(unpack_bits(packed, bits, begin, count).to(at::kLong),
                              codes.narrow(0, begin, count)));
        EXPECT_ERROR(unpack_bits(packed, bits, m - 3, 10), "lie past a stream");
        EXPECT_ERROR(pack_bits(codes, 0), "0 bits is not a packable width (1 to 62)");
        EXPECT_ERROR(unpack_bits(packed, 63, 0, 1), "63 bits is not a packable width (1 to 62)");
        QCOMPARE(bit_width(0), int64_t{1});
        QCOMPARE(bit_width(1), int64_t{1});
        QCOMPARE(bit_width(31), int64_t{5});
        QCOMPARE(bit_width(32), int64_t{6});
    }

    // Each value is within half a step of its group's grid (plus the fp16 rounding of the minimum); masked
    // entries neither widen the range nor get a code; a constant group is exact.
    void groups_quantize_within_half_a_step() {
        at::Generator gen = at::detail::createCPUGenerator(6);
        at::Tensor x = at::normal(0.0, 3.0, {64, 32}, gen, at::TensorOptions().dtype(at::kFloat));
        at::Tensor valid =
            at::arange(32, at::kLong).unsqueeze(0) < at::randint(1, 33, {64, 1}, gen, at::kLong);
        x.masked_fill_(valid.logical_not(), 1e4);  // outliers where masked: must not matter
        x[0].fill_(1.25);
        valid[0].fill_(true);
        for (int64_t bits : {2, 3, 4, 8}) {
            const QuantizedGroups q = quantize_groups(x, bits, valid);
            QVERIFY(q.codes.to(at::kLong).max().item<int64_t>() < (int64_t(1) << bits));
            QVERIFY(at::equal(q.codes.masked_select(valid.logical_not()),
                              at::zeros({(~valid).sum().item<int64_t>()}, at::kByte)));
            const at::Tensor back = dequantize_groups(q.codes, q.scale, q.min);
            const at::Tensor step = q.scale.to(at::kFloat).unsqueeze(1);
            const at::Tensor err = (back - x).abs().masked_fill_(valid.logical_not(), 0.0);
            const at::Tensor slack = 0.5 * step + 1e-3 * x.abs() + 1e-6;
            QVERIFY2((err <= slack).all().item<bool>(),
                     qPrintable(QString("%1 bits: an error above half a step").arg(bits)));
            QCOMPARE(back[0][5].item<float>(), 1.25f);
        }
    }

    // The codec's error falls as bits rise; the quantization part is reported apart and is what separates the
    // quantized runs from truncation; more coefficients fit the same byte budget at fewer bits; the stored
    // bytes never exceed kappa; 16 bits is the unquantized codec, rank for rank and value for value.
    void codec_error_falls_with_bits() {
        const double kappa = 0.2;  // below every width's rank cap, so each spends its bits
        const Run plain = run_codec(kappa, 16);
        const LayerDiagnostics& p = plain.allocation.diagnostics;
        QCOMPARE(p.mean_quant_error, 0.0);
        QCOMPARE(p.coef_bits, int64_t(32));  // fp32 cache: coefficients at fp32
        double previous_quant = 1e9;
        int64_t previous_ranks = -1;
        for (int64_t bits : {2, 3, 4, 8}) {
            const Run q = run_codec(kappa, bits);
            const LayerDiagnostics& d = q.allocation.diagnostics;
            qInfo(
                "%lld bits: sum ranks %lld (unquantized %lld), rel error %.4f (quantization %.4f), "
                "footprint %.4f",
                static_cast<long long>(bits), static_cast<long long>(d.sum_ranks),
                static_cast<long long>(p.sum_ranks), d.mean_rel_error, d.mean_quant_error, d.footprint);
            QCOMPARE(d.coef_bits, bits);
            QVERIFY(d.stored_bytes <= static_cast<int64_t>(kappa * static_cast<double>(d.full_bytes)));
            QVERIFY(d.footprint > kappa - 0.01);  // the budget is spent, to within a partial group per token
            QVERIFY(d.mean_quant_error > 0 && d.mean_quant_error < d.mean_rel_error);
            QVERIFY2(d.mean_quant_error < previous_quant, "quantization error must fall as bits rise");
            QVERIFY2(d.sum_ranks > p.sum_ranks, "fewer bits per coefficient must buy more coefficients");
            if (previous_ranks >= 0) QVERIFY(d.sum_ranks < previous_ranks);
            previous_quant = d.mean_quant_error;
            previous_ranks = d.sum_ranks;
        }
        // At equal ranks (every token at R: kappa 1 with nothing but coefficients charged) the total error
        // falls with bits too.
        double previous_total = 1e9;
        for (int64_t bits : {2, 3, 4, 8, 16}) {
            const Run q =
                run_codec(1.0, bits, RankAllocation::Salience, at::kFloat, /*paper_accounting=*/true);
            QCOMPARE(q.allocation.diagnostics.min_rank, int64_t(128));
            const double e = q.allocation.diagnostics.mean_rel_error;
            QVERIFY2(
                e < previous_total,
                qPrintable(QString("%1 bits: error %2 not below %3").arg(bits).arg(e).arg(previous_total)));
            previous_total = e;
        }
        // 16 bits: the unquantized codec (the default), bit for bit.
        const Run again = run_codec(kappa, 16);
        QVERIFY(at::equal(again.allocation.diagnostics.rank, p.rank));
        QVERIFY(at::equal(again.kv.keys, plain.kv.keys));
        QCOMPARE(again.allocation.diagnostics.stored_bytes, p.stored_bytes);
        CodecSettings defaults;
        QCOMPARE(defaults.coef_bits, int64_t(16));
    }

    // The planner counts bits: the stored bytes of any rank sum it allows fit kappa, and unsupported widths
    // are refused with a message naming them.
    void planner_counts_bits() {
        for (int64_t bits : {2, 3, 4, 8}) {
            CodecSettings s = settings(0.15, bits);
            s.window = 32;
            const CodecBudget b = plan_codec_budget(s, 4000, 256, 2);
            // sum_t ceil(r_t / 32) <= (sum_t r_t + 31 n_coded) / 32
            const int64_t worst_groups = (b.budget_B + (kQuantGroup - 1) * b.n_coded) / kQuantGroup;
            QVERIFY(b.stored_bytes(b.budget_B, worst_groups) <= static_cast<int64_t>(0.15 * 4000 * 256 * 2));
            QCOMPARE(b.coefficient_bytes(64, 2), packed_bytes(64, bits) + 2 * kGroupParamBytes);
        }
        CodecSettings s = settings(0.2, 5);
        EXPECT_ERROR(plan_codec_budget(s, 4000, 256, 2), "coefficient bits 5 is not supported");
    }

    // flat and bf16 caches take quantized coefficients the same way.
    void flat_and_bf16_quantize() {
        const Run f = run_codec(0.3, 4, RankAllocation::Uniform, at::kBFloat16);
        const LayerDiagnostics& d = f.allocation.diagnostics;
        QVERIFY(d.mean_quant_error > 0);
        QCOMPARE(d.max_rank - d.min_rank <= 1, true);  // uniform ranks
        QCOMPARE(f.kv.keys.scalar_type(), at::kBFloat16);
        QCOMPARE(run_codec(0.3, 16, RankAllocation::Uniform, at::kBFloat16).allocation.diagnostics.coef_bits,
                 int64_t(16));
    }
};

QTEST_GUILESS_MAIN(TestCodecQuantize)
#include "test_codec_quantize.moc"

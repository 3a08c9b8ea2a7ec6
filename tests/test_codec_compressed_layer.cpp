// The compressed VarRate / flat layer (codec/compressed_layer.h): attention over the store equals attention
// over its reconstruction, the reconstruction equals the codec's materialised cache, and the bytes it holds
// are the accounted footprint plus the metadata the accounting leaves out.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "codec/compressed_layer.h"
#include "codec/footprint.h"
#include "codec/quantize.h"
#include "codec/synthetic.h"
#include "codec/varrate_method.h"
#include "core/base/error.h"

using namespace varrate;

namespace {

struct Case {
    int64_t n_head, n_kv_head;
    at::ScalarType dtype;
    RankAllocation allocation;
    int64_t coef_bits = 16;
};

SyntheticShape shape_of(const Case& c, int64_t n_tokens = 700) {
    SyntheticShape s;
    s.n_head = c.n_head;
    s.n_kv_head = c.n_kv_head;
    s.head_dim = 16;
    s.n_tokens = n_tokens;
    return s;
}

CodecSettings settings(double kappa, int64_t coef_bits = 16) {
    CodecSettings s;
    s.budget = kappa;
    s.coef_bits = coef_bits;
    s.r_min = 2;
    s.rank = 1024;  // clamped to D
    s.precise_timing = false;
    return s;
}

struct Stored {
    LayerCapture capture;
    LayerAllocation allocation;
    LayerKV materialised;
    std::shared_ptr<const CompressedLayer> store;
};

Stored make_store(const Case& c, double kappa, uint64_t seed, int64_t n_tokens = 700) {
    const SyntheticShape shape = shape_of(c, n_tokens);
    const int64_t dim = 2 * shape.n_kv_head * shape.head_dim;
    const CodecSettings s = settings(kappa, c.coef_bits);
    VarRateMethod m(s, random_basis(1, dim, dim, s.stride, s.anchors, seed + 1), c.allocation);
    Stored out;
    out.capture = synthetic_capture(shape, seed, 0, c.dtype);
    const auto analysis = m.analyse(out.capture);
    out.allocation = m.allocate(*analysis, s);
    out.materialised = m.materialise(out.capture, *analysis, out.allocation);
    out.store =
        std::dynamic_pointer_cast<const CompressedLayer>(m.store(out.capture, *analysis, out.allocation));
    return out;
}

void add_cases() {
    QTest::addColumn<int>("n_head");
    QTest::addColumn<int>("n_kv_head");
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<bool>("flat");
    QTest::addColumn<int>("bits");
    for (bool bf16 : {false, true})
        for (int g : {1, 4}) {
            const char* dt = bf16 ? "bf16" : "fp32";
            QTest::newRow(qPrintable(QString("varrate %1 gqa %2:1").arg(dt).arg(g)))
                << 2 * g << 2 << bf16 << false << 16;
        }
    QTest::newRow("flat fp32 gqa 4:1") << 8 << 2 << false << true << 16;
    // Quantized coefficients: packed codes, dequantized block by block.
    QTest::newRow("varrate fp32 gqa 4:1 4-bit") << 8 << 2 << false << false << 4;
    QTest::newRow("varrate bf16 gqa 1:1 3-bit") << 2 << 2 << true << false << 3;
    QTest::newRow("flat fp32 gqa 1:1 2-bit") << 2 << 2 << false << true << 2;
    QTest::newRow("varrate bf16 gqa 4:1 8-bit") << 8 << 2 << true << false << 8;
}

Case fetch_case() {
    QFETCH(int, n_head);
    QFETCH(int, n_kv_head);
    QFETCH(bool, bf16);
    QFETCH(bool, flat);
    QFETCH(int, bits);
    return {n_head, n_kv_head, bf16 ? at::kBFloat16 : at::kFloat,
            flat ? RankAllocation::Uniform : RankAllocation::Salience, bits};
}

}  // namespace

class TestCodecCompressedLayer : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // The store's dense reconstruction is the codec's materialised cache: fp32 to rounding; bf16 within one
    // rounding step of bf16 (the store rebuilds in fp32 where materialise() multiplies in bf16).
    void reconstruction_equals_materialised_data() { add_cases(); }
    void reconstruction_equals_materialised() {
        const Case c = fetch_case();
        const Stored s = make_store(c, 0.3, 11);
        QCOMPARE(s.store->quantized(), c.coef_bits < 16);
        const LayerKV r = s.store->reconstruct();
        QCOMPARE(r.keys.sizes().vec(), s.materialised.keys.sizes().vec());
        QCOMPARE(r.keys.scalar_type(), c.dtype);
        const double tol = c.dtype == at::kFloat ? 1e-5 : 1.6e-2;
        const double dk = test::rel_max_diff(r.keys, s.materialised.keys),
                     dv = test::rel_max_diff(r.values, s.materialised.values);
        qInfo("keys %.3g, values %.3g (max |diff| / max |x|)", dk, dv);
        QVERIFY2(dk <= tol, qPrintable(QString("keys differ by %1").arg(dk)));
        QVERIFY2(dv <= tol, qPrintable(QString("values differ by %1").arg(dv)));
        // Exact tokens are copied untouched (the anchors and the window).
        const at::Tensor exact = CompressedLayer::exact_order(700, 16, 64);
        QVERIFY(at::equal(r.values.index_select(1, exact), s.capture.values.index_select(1, exact)));
    }

    // Attention of decoding queries (one, then five, with a tail of entries after the prefix) over the
    // compressed store equals dense attention over its reconstruction.
    void attention_equals_dense_data() { add_cases(); }
    void attention_equals_dense() {
        const Case c = fetch_case();
        const Stored s = make_store(c, 0.3, 12);
        const LayerKV r = s.store->reconstruct();
        at::Generator gen = at::detail::createCPUGenerator(99);
        for (int64_t n_q : {1, 5}) {
            const int64_t n_tail = n_q + 3, hd = 16;
            const auto f32 = at::TensorOptions().dtype(at::kFloat);
            const at::Tensor q = at::normal(0.0, 1.0, {c.n_head, n_q, hd}, gen, f32).to(c.dtype);
            const at::Tensor tk = at::normal(0.0, 1.0, {c.n_kv_head, n_tail, hd}, gen, f32).to(c.dtype);
            const at::Tensor tv = at::normal(0.0, 1.0, {c.n_kv_head, n_tail, hd}, gen, f32).to(c.dtype);
            const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
            const at::Tensor got = s.store->attend(q, tk, tv, scale);
            QCOMPARE(got.scalar_type(), c.dtype);
            QCOMPARE(got.sizes().vec(), (std::vector<int64_t>{c.n_head, n_q, hd}));
            const at::Tensor want =
                test::dense_causal_attention(q, at::cat({r.keys, tk}, 1), at::cat({r.values, tv}, 1), scale);
            const double d = test::rel_max_diff(got, want);
            qInfo("n_q %lld: attention differs by %.3g", static_cast<long long>(n_q), d);
            QVERIFY2(d <= (c.dtype == at::kFloat ? 1e-5 : 2e-2), qPrintable(QString("differs by %1").arg(d)));
        }
    }

    // Resident bytes, measured from the tensors, are the accounted stored bytes exactly: the accounting
    // charges each coded token's rank (int16) with its anchor indices, and positions are derived, not held.
    // Quantized: the packed codes and the groups' fp16 scales and minima are what the budget counted, and it
    // is met.
    void resident_bytes_are_the_accounted_footprint_data() {
        QTest::addColumn<int>("bits");
        for (int b : {16, 4, 3}) QTest::newRow(qPrintable(QString("%1-bit").arg(b))) << b;
    }
    void resident_bytes_are_the_accounted_footprint() {
        QFETCH(int, bits);
        for (double kappa : {0.25, 0.4}) {
            const Case c{8, 2, at::kBFloat16, RankAllocation::Salience, bits};
            const Stored s = make_store(c, kappa, 13, 2000);
            const LayerDiagnostics& d = s.allocation.diagnostics;
            QCOMPARE(d.basis_bytes, int64_t(0));  // a shared basis, not charged
            const int64_t extra = 0;  // ranks are charged with the anchor indices; positions are derived
            qInfo("kappa %.2f: resident %lld, accounted %lld (+ %lld), full %lld", kappa,
                  static_cast<long long>(s.store->resident_bytes()), static_cast<long long>(d.stored_bytes),
                  static_cast<long long>(extra), static_cast<long long>(d.full_bytes));
            QCOMPARE(s.store->resident_bytes(), d.stored_bytes + extra);
            QCOMPARE(s.store->sum_ranks(), d.sum_ranks);
            QCOMPARE(s.store->n_exact(), d.n_exact);
            QCOMPARE(s.store->basis_bytes(), int64_t(64 * 64 * 4));
            QVERIFY(d.stored_bytes <= static_cast<int64_t>(kappa * static_cast<double>(d.full_bytes)));
        }
    }

    // Every malformed store is refused with a message naming what is wrong.
    void malformed_parts_are_refused() {
        const Stored s = make_store({4, 2, at::kFloat, RankAllocation::Salience}, 0.3, 14);
        CompressedLayer::Parts p = s.store->parts();
        p.coefficients = p.coefficients.narrow(0, 0, p.coefficients.size(0) - 1);
        EXPECT_ERROR(CompressedLayer{p}, "coefficients for ranks summing to");
        p = s.store->parts();
        p.exact_values = p.exact_values.narrow(1, 0, 3);
        EXPECT_ERROR(CompressedLayer{p}, "exact values has shape");
        p = s.store->parts();
        at::Tensor r = s.store->ranks(0, s.store->n_coded()).clone();
        const int64_t too_high = p.basis.size(0) + 1;  // still fits the packed width of ranks in [0, R]
        QVERIFY(too_high < (int64_t(1) << p.rank_bits));
        r[0] = too_high;
        p.ranks = pack_bits(r, p.rank_bits);
        EXPECT_ERROR(CompressedLayer{p}, fmt::format("coded token 0 has rank {}", too_high));
        p = s.store->parts();
        p.ranks = p.ranks.narrow(0, 0, p.ranks.size(0) - 1);
        EXPECT_ERROR(CompressedLayer{p}, "packed ranks has shape");
        p = s.store->parts();
        at::Tensor near = s.store->nearest(0, s.store->n_coded()).clone();
        near[3][1] = s.store->n_anchors();  // one past the last anchor
        p.nearest = pack_bits(near, p.index_bits);
        EXPECT_ERROR(CompressedLayer{p}, fmt::format("an anchor index is {}", s.store->n_anchors()));
        p = s.store->parts();
        p.index_bits -= 1;
        EXPECT_ERROR(CompressedLayer{p}, "anchor indices cannot address");
        EXPECT_ERROR(
            s.store->attend(at::zeros({3, 1, 16}), at::zeros({2, 1, 16}), at::zeros({2, 1, 16}), 1.0),
            "queries must be");
    }
};

QTEST_GUILESS_MAIN(TestCodecCompressedLayer)
#include "test_codec_compressed_layer.moc"

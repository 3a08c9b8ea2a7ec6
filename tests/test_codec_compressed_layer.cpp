// The compressed VarRate / flat layer (codec/compressed_layer.h): attention over the store equals attention
// over its reconstruction, the reconstruction equals the codec's materialised cache, and the bytes it holds
// are the accounted footprint plus the metadata the accounting leaves out.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "codec/anchor_sets.h"
#include "codec/anchors.h"
#include "codec/compressed_layer.h"
#include "codec/footprint.h"
#include "codec/methods/varrate_method.h"
#include "codec/quantize.h"
#include "codec/synthetic.h"

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
    // charges each coded token's rank with its anchor set, and positions are derived, not held.
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

    // An anchor set's number is its rank among all c-subsets in colexicographic order: enumerated here by
    // brute force for small n (every set, in order), and round-tripped for random sets of the sizes a
    // long context has. Decoding returns the set ascending, whatever order it was encoded in.
    void anchor_sets_are_colex_ranks() {
        for (auto [n, c] : {std::pair<int64_t, int64_t>{7, 3}, {9, 4}, {6, 1}, {5, 5}}) {
            std::vector<std::vector<int64_t>> all;  // colex order: by largest element, then the rest
            for (int64_t mask = 0; mask < (int64_t(1) << n); ++mask) {
                if (__builtin_popcountll(static_cast<unsigned long long>(mask)) != c) continue;
                std::vector<int64_t> set;
                for (int64_t i = 0; i < n; ++i)
                    if (mask >> i & 1) set.push_back(i);
                all.push_back(set);
            }
            // A mask's bits read from the top are the set's elements from its largest: increasing masks are
            // the colex order.
            QCOMPARE(static_cast<int64_t>(all.size()), test::anchor_set_count(n, c));
            at::Tensor sets = at::empty({static_cast<int64_t>(all.size()), c}, at::kLong);
            for (size_t r = 0; r < all.size(); ++r)
                for (int64_t i = 0; i < c; ++i)
                    sets[static_cast<int64_t>(r)][i] = all[r][c - 1 - i];  // descending
            const at::Tensor ranks = encode_anchor_sets(sets, n);
            QVERIFY(at::equal(ranks, at::arange(static_cast<int64_t>(all.size()), at::kLong)));
            QVERIFY(at::equal(decode_anchor_sets(ranks, n, c), sets.flip({1})));
            QCOMPARE(anchor_set_bits(n, c), test::bits_for_values(test::anchor_set_count(n, c)));
        }
        at::Generator gen = at::detail::createCPUGenerator(3);
        for (auto [n, c] : {std::pair<int64_t, int64_t>{32, 4}, {64, 4}, {4096, 4}, {300, 8}}) {
            // c distinct ordinals per row: the first c of a random permutation's keys.
            const at::Tensor keys = at::rand({500, n}, gen, at::kFloat);
            const at::Tensor sets = std::get<1>(at::topk(keys, c, 1));
            const at::Tensor ranks = encode_anchor_sets(sets, n);
            QVERIFY(at::equal(decode_anchor_sets(ranks, n, c), std::get<0>(at::sort(sets, 1))));
            const int64_t bits = anchor_set_bits(n, c);
            QVERIFY(bits > 0 && ranks.max().item<int64_t>() < (int64_t(1) << bits));
            qInfo("%lld of %lld anchors: %lld bits a set, %lld as ordinals", static_cast<long long>(c),
                  static_cast<long long>(n), static_cast<long long>(bits),
                  static_cast<long long>(c * bit_width(n - 1)));
        }
        QCOMPARE(anchor_set_bits(32, 4), int64_t{16});               // C(32, 4) = 35960
        QCOMPARE(anchor_set_bits(64, 4), int64_t{20});               // 635376
        QCOMPARE(anchor_set_bits(int64_t(1) << 20, 8), int64_t{0});  // about 2^144 sets: stored as ordinals
        EXPECT_ERROR(encode_anchor_sets(at::zeros({2, 8}, at::kLong), int64_t(1) << 20), "do not fit");
    }

    // Flat's ranks are uniform, so the store keeps none: its rank stream is empty, the ranks it reads back
    // are B / n_coded (+1 for the first B mod n_coded tokens), exactly the allocation's, and the bytes it
    // holds are what flat's budget counted. Ranks that are not uniform are refused as uniform.
    void flat_stores_no_ranks() {
        for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
            const Stored s = make_store({8, 2, dtype, RankAllocation::Uniform}, 0.3, 15, 2000);
            const CompressedLayer::Parts& p = s.store->parts();
            QCOMPARE(p.rank_bits, int64_t{0});
            QCOMPARE(p.ranks.numel(), int64_t{0});
            const LayerDiagnostics& d = s.allocation.diagnostics;
            QCOMPARE(p.rank_total, d.sum_ranks);
            QCOMPARE(d.rank_bits, int64_t{0});
            const at::Tensor want = s.allocation.diagnostics.rank.index_select(
                0, make_anchor_layout(d.n_tokens, p.stride, p.window).coded_pos);
            QVERIFY(at::equal(s.store->ranks(0, s.store->n_coded()), want));
            QVERIFY(want.max().item<int64_t>() - want.min().item<int64_t>() <= 1);
            QCOMPARE(s.store->resident_bytes(), d.stored_bytes);
            CompressedLayer::Parts bad = p;
            at::Tensor r = want.clone();
            r[5] += 1;
            r[6] -= 1;
            EXPECT_ERROR(CompressedLayer::pack_metadata(bad, s.store->nearest(0, s.store->n_coded()), r,
                                                        s.store->n_anchors(), p.basis.size(0), true),
                         "are not the uniform split of their sum");
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
        // Anchor sets: a number past the last set, a width too narrow for them.
        p = s.store->parts();
        const int64_t n_coded = s.store->n_coded(), n_anchors = s.store->n_anchors();
        QCOMPARE(p.set_bits, test::bits_for_values(test::anchor_set_count(n_anchors, p.anchors)));
        at::Tensor sets = unpack_bits(p.nearest, p.set_bits, 0, n_coded).to(at::kLong);
        QVERIFY(test::anchor_set_count(n_anchors, p.anchors) < (int64_t(1) << p.set_bits));
        sets[2] = test::anchor_set_count(n_anchors, p.anchors);  // one past the last set's number
        p.nearest = pack_bits(sets, p.set_bits);
        EXPECT_ERROR(CompressedLayer{p}, "an anchor set's number is not a set of");
        p = s.store->parts();
        p.set_bits -= 1;
        EXPECT_ERROR(CompressedLayer{p}, "anchor sets cannot hold");
        // A repeated anchor is no set of c anchors.
        CompressedLayer::Parts repacked = s.store->parts();
        at::Tensor twice = s.store->nearest(0, n_coded).clone();
        twice[4][1] = twice[4][0];
        EXPECT_ERROR(CompressedLayer::pack_metadata(repacked, twice, s.store->ranks(0, n_coded), n_anchors,
                                                    repacked.basis.size(0)),
                     "anchors are not distinct");
        // Ordinals (format 2's layout): one past the last anchor, too few bits to address them.
        p = s.store->parts();
        at::Tensor near = s.store->nearest(0, n_coded).clone();
        p.set_bits = 0;
        p.nearest = pack_bits(near, p.index_bits);
        QVERIFY(at::equal(CompressedLayer{p}.nearest(0, n_coded), near));
        near[3][1] = n_anchors;  // one past the last anchor
        p.nearest = pack_bits(near, p.index_bits);
        EXPECT_ERROR(CompressedLayer{p}, "an anchor index is past the layer's");
        p.index_bits -= 1;
        EXPECT_ERROR(CompressedLayer{p}, "anchor indices cannot address");
        EXPECT_ERROR(
            s.store->attend(at::zeros({3, 1, 16}), at::zeros({2, 1, 16}), at::zeros({2, 1, 16}), 1.0),
            "queries must be");
    }
};

QTEST_GUILESS_MAIN(TestCodecCompressedLayer)
#include "test_codec_compressed_layer.moc"

// Selective attention through the compressed store (codec/compressed_layer.h, select_tokens > 0): with every
// chunk selected it is the exact path; with a top-k it is dense attention over exactly the selected tokens;
// the landmarks are charged (resident = accounted <= kappa); the chunk cache never changes a result; the
// gather that reads the packed streams equals the range read.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "codec/compressed_layer.h"
#include "codec/footprint.h"
#include "codec/methods/varrate_method.h"
#include "codec/prefix_io.h"
#include "codec/quantize.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

constexpr int64_t kHeadDim = 16;

struct Stored {
    LayerCapture capture;
    LayerAllocation allocation;
    std::shared_ptr<const CompressedLayer> store;
};

Stored make_store(int64_t n_head, int64_t n_kv_head, bool flat, int64_t coef_bits, int64_t select_tokens,
                  double kappa = 0.3, int64_t n_tokens = 900, at::ScalarType dtype = at::kFloat) {
    SyntheticShape shape;
    shape.n_head = n_head;
    shape.n_kv_head = n_kv_head;
    shape.head_dim = kHeadDim;
    shape.n_tokens = n_tokens;
    CodecSettings s;
    s.budget = kappa;
    s.coef_bits = coef_bits;
    s.r_min = 2;
    s.precise_timing = false;
    s.select_tokens = select_tokens;
    s.landmark_chunk = 16;
    const int64_t dim = 2 * n_kv_head * kHeadDim;
    VarRateMethod m(s, random_basis(1, dim, dim, s.stride, s.anchors, 5),
                    flat ? RankAllocation::Uniform : RankAllocation::Salience);
    Stored out;
    out.capture = synthetic_capture(shape, 21, 0, dtype);
    const auto analysis = m.analyse(out.capture);
    out.allocation = m.allocate(*analysis, s);
    out.store =
        std::dynamic_pointer_cast<const CompressedLayer>(m.store(out.capture, *analysis, out.allocation));
    return out;
}

struct Step {
    at::Tensor q, tail_keys, tail_values;
};

Step random_step(int64_t n_head, int64_t n_kv_head, int64_t n_q, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const int64_t n_tail = n_q + 2;
    // Queries scaled up so that attention is peaked and the chunks differ in mass.
    return {at::normal(0.0, 3.0, {n_head, n_q, kHeadDim}, gen, f32),
            at::normal(0.0, 1.0, {n_kv_head, n_tail, kHeadDim}, gen, f32),
            at::normal(0.0, 1.0, {n_kv_head, n_tail, kHeadDim}, gen, f32)};
}

double scale() {
    return 1.0 / std::sqrt(static_cast<double>(kHeadDim));
}

void add_cases() {
    QTest::addColumn<int>("n_head");
    QTest::addColumn<int>("n_kv_head");
    QTest::addColumn<bool>("flat");
    QTest::addColumn<int>("bits");
    QTest::newRow("varrate gqa 4:1") << 8 << 2 << false << 16;
    QTest::newRow("varrate mha") << 2 << 2 << false << 16;
    QTest::newRow("flat gqa 4:1") << 8 << 2 << true << 16;
    QTest::newRow("varrate gqa 4:1 4-bit") << 8 << 2 << false << 4;
    QTest::newRow("flat mha 3-bit") << 2 << 2 << true << 3;
}

}  // namespace

class TestCodecSelectiveAttention : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // Every chunk selected: the selective path (landmarks scored, keys and values rebuilt through the chunk
    // cache) is the exact path to fp32 rounding (max difference over max magnitude).
    void every_chunk_selected_is_the_exact_path_data() { add_cases(); }
    void every_chunk_selected_is_the_exact_path() {
        QFETCH(int, n_head);
        QFETCH(int, n_kv_head);
        QFETCH(bool, flat);
        QFETCH(int, bits);
        const Stored s = make_store(n_head, n_kv_head, flat, bits, int64_t{1} << 20);
        QVERIFY(s.store->selective());
        QCOMPARE(s.store->chunks_per_head(), s.store->n_chunks());
        const auto exact = s.store->with_selection(0);
        QVERIFY(!exact->selective());
        for (int64_t n_q : {1, 4}) {
            const Step st = random_step(n_head, n_kv_head, n_q, 40 + n_q);
            const at::Tensor got = s.store->attend(st.q, st.tail_keys, st.tail_values, scale());
            const at::Tensor want = exact->attend(st.q, st.tail_keys, st.tail_values, scale());
            // Relative to the output's norm: the two forms sum the same terms in another order (explicit
            // values against factorised ones), which quantized coefficients (scaled by 1 / sigma) make
            // larger.
            const double d = ((got - want).norm() / want.norm()).item<double>();
            qInfo("n_q %lld: ||selective - exact|| / ||exact|| = %.3g (max %.3g)",
                  static_cast<long long>(n_q), d, test::rel_max_diff(got, want));
            QVERIFY2(d <= 1e-6, qPrintable(QString("differs by %1").arg(d)));
        }
    }

    // A top-k of chunks: the result is dense attention over the store's reconstruction restricted to the
    // exact rows, the selected chunks' coded tokens (per KV head) and the tail; and the selection is the
    // landmarks' top-k by softmax mass.
    void top_k_is_dense_attention_over_the_selection_data() { add_cases(); }
    void top_k_is_dense_attention_over_the_selection() {
        QFETCH(int, n_head);
        QFETCH(int, n_kv_head);
        QFETCH(bool, flat);
        QFETCH(int, bits);
        const Stored s = make_store(n_head, n_kv_head, flat, bits, 80);  // 5 chunks of 16 of ~52
        const CompressedLayer& store = *s.store;
        QCOMPARE(store.chunks_per_head(), int64_t(5));
        QVERIFY(store.n_chunks() > 40);
        const LayerKV r = store.reconstruct();  // [G, L, hd]
        const int64_t g = n_head / n_kv_head;
        const at::Tensor exact_pos = store.exact_positions();
        for (int64_t n_q : {1, 3}) {
            const Step st = random_step(n_head, n_kv_head, n_q, 70 + n_q);
            const at::Tensor chunks = store.select_chunks(st.q, scale());  // [G, 5]
            QCOMPARE(chunks.sizes().vec(), (std::vector<int64_t>{n_kv_head, 5}));
            // The landmarks' softmax mass, recomputed here, ranks the chosen chunks first.
            const at::Tensor qg = st.q.reshape({n_kv_head, g * n_q, kHeadDim});
            // Quest's bound on the chunk's scores, from the keys' channel-wise minimum and maximum.
            const int64_t n_ch = store.n_chunks();
            at::Tensor bound = at::empty({n_kv_head, g * n_q, n_ch});
            for (int64_t c = 0; c < n_ch; ++c) {
                const at::Tensor chunk =
                    s.capture.keys.to(at::kFloat)
                        .index_select(1, store.coded_positions(
                                             c * 16, std::min<int64_t>(16, store.n_coded() - c * 16)));
                const at::Tensor lo = std::get<0>(chunk.min(1)), hi = std::get<0>(chunk.max(1));  // [G, hd]
                bound.select(2, c).copy_(at::maximum(qg * lo.unsqueeze(1), qg * hi.unsqueeze(1)).sum(2));
            }
            const at::Tensor mass = bound.mul(scale()).softmax(2).sum(1);
            const at::Tensor got = store.attend(st.q, st.tail_keys, st.tail_values, scale());
            for (int64_t h = 0; h < n_kv_head; ++h) {
                const at::Tensor chosen = chunks[h];
                const double least_chosen = mass[h].index_select(0, chosen).min().item<double>();
                at::Tensor others = mass[h].clone();
                others.index_fill_(0, chosen, -1.0);
                QVERIFY(others.max().item<double>() <= least_chosen);
                // The dense reference for this KV head's query heads.
                const at::Tensor ordinals =
                    (chosen.unsqueeze(1) * 16 + at::arange(16, chosen.options())).reshape({-1});
                const at::Tensor coded = ordinals.masked_select(ordinals < store.n_coded());
                const at::Tensor pos =
                    at::cat({exact_pos, store.coded_positions(0, store.n_coded()).index_select(0, coded)});
                const at::Tensor k = at::cat({r.keys[h].index_select(0, pos), st.tail_keys[h]}).unsqueeze(0);
                const at::Tensor v =
                    at::cat({r.values[h].index_select(0, pos), st.tail_values[h]}).unsqueeze(0);
                const at::Tensor want = test::dense_causal_attention(st.q.narrow(0, h * g, g), k, v, scale());
                const double d = test::rel_max_diff(got.narrow(0, h * g, g), want);
                QVERIFY2(d <= 1e-5,
                         qPrintable(QString("KV head %1, n_q %2: differs by %3").arg(h).arg(n_q).arg(d)));
            }
            // And it is not the exact path: the unselected chunks carried weight.
            const at::Tensor exact =
                store.with_selection(0)->attend(st.q, st.tail_keys, st.tail_values, scale());
            QVERIFY(test::rel_max_diff(got, exact) > 1e-4);
        }
    }

    // The landmarks are stored and charged: resident bytes = accounted bytes <= kappa x full, and the
    // coefficients' budget shrinks by exactly their scalars.
    void landmarks_are_charged_to_the_budget() {
        for (int bits : {16, 4}) {
            const Stored exact = make_store(8, 2, false, bits, 0, 0.3, 2000, at::kBFloat16);
            const Stored sel = make_store(8, 2, false, bits, 256, 0.3, 2000, at::kBFloat16);
            const LayerDiagnostics& d = sel.allocation.diagnostics;
            const int64_t landmark_bytes =
                sel.store->n_chunks() * 2 * 2 * kHeadDim * 2;  // G x (min, max) x bf16
            QCOMPARE(sel.store->parts().landmarks.numel() * 2, landmark_bytes);
            QCOMPARE(sel.store->resident_bytes(), d.stored_bytes);
            QVERIFY(d.stored_bytes <= static_cast<int64_t>(0.3 * static_cast<double>(d.full_bytes)));
            QVERIFY(d.sum_ranks < exact.allocation.diagnostics.sum_ranks);
            QCOMPARE(exact.store->resident_bytes(), exact.allocation.diagnostics.stored_bytes);
            QVERIFY(!exact.store->parts().landmarks.defined());
            // The same settings without selection plan B larger by the landmark scalars' worth.
            CodecSettings s;
            s.budget = 0.3;
            s.coef_bits = bits;
            s.r_min = 2;
            const CodecBudget without = plan_codec_budget(s, 2000, 4 * kHeadDim, 2);
            s.select_tokens = 256;
            const CodecBudget with = plan_codec_budget(s, 2000, 4 * kHeadDim, 2);
            QCOMPARE(with.landmark_scalars, (without.n_coded + 15) / 16 * 4 * kHeadDim);
            QVERIFY(with.budget_B < without.budget_B);
            if (bits == 16) QCOMPARE(without.budget_B - with.budget_B, with.landmark_scalars);
        }
    }

    // Steps whose selections overlap: a store whose cache holds earlier steps' chunks answers each step
    // bit for bit as a fresh store (every chunk rebuilt), and the cache reports its hits.
    void the_chunk_cache_never_changes_a_result() {
        const Stored s = make_store(8, 2, false, 16, 96);
        const CompressedLayer& warm = *s.store;
        const Step base = random_step(8, 2, 1, 90);
        for (int i = 0; i < 6; ++i) {
            Step st = random_step(8, 2, 1, 100 + i);
            st.q = base.q + 0.3 * st.q;  // nearby queries: mostly the same chunks
            const at::Tensor got = warm.attend(st.q, st.tail_keys, st.tail_values, scale());
            const at::Tensor cold =
                warm.with_selection(96)->attend(st.q, st.tail_keys, st.tail_values, scale());
            QVERIFY2(
                got.equal(cold),
                qPrintable(
                    QString("step %1: cached rows differ by %2").arg(i).arg(test::rel_max_diff(got, cold))));
        }
        // Without the cache a CPU step takes the CUDA path (every selected key rebuilt, values factorised):
        // the same attention to fp32 rounding.
        for (int i = 0; i < 2; ++i) {
            const Step st = random_step(8, 2, 1 + 2 * i, 200 + i);
            const at::Tensor cached = warm.attend(st.q, st.tail_keys, st.tail_values, scale());
            CompressedLayer::set_chunk_cache_enabled(false);
            const at::Tensor rebuilt = warm.attend(st.q, st.tail_keys, st.tail_values, scale());
            CompressedLayer::set_chunk_cache_enabled(true);
            const double d = ((cached - rebuilt).norm() / rebuilt.norm()).item<double>();
            QVERIFY2(d <= 1e-6, qPrintable(QString("the uncached path differs by %1").arg(d)));
        }
        const auto stats = warm.chunk_cache_stats();
        qInfo("chunk cache: %lld of %lld lookups hit, %lld bytes", static_cast<long long>(stats.hits),
              static_cast<long long>(stats.lookups), static_cast<long long>(stats.capacity_bytes));
        QCOMPARE(stats.lookups, int64_t(8 * 2 * 6));  // 6 steps, then 2 with the cache
        QVERIFY(stats.hits > stats.lookups / 2);
        QVERIFY(stats.hits < stats.lookups);
        QCOMPARE(stats.capacity_bytes, int64_t(2 * 2 * 6 * 2 * 16 * kHeadDim * 4));  // keys and values, fp32
    }

    // The gather read of a packed stream equals its range read, for every width a store uses.
    void gathered_codes_equal_the_range_read() {
        at::Generator gen = at::detail::createCPUGenerator(3);
        for (int64_t bits : {1, 2, 3, 4, 5, 7, 8, 11, 16, 23, 32, 41, 56}) {
            const int64_t n = 301;
            const at::Tensor codes = at::randint(0, int64_t{1} << std::min<int64_t>(bits, 62), {n}, gen,
                                                 at::TensorOptions().dtype(at::kLong));
            const at::Tensor packed = pack_bits(codes, bits);
            const at::Tensor idx =
                at::randperm(n, gen, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, 97);
            const at::Tensor got = unpack_bits_at(packed, bits, idx).to(at::kLong);
            QVERIFY2(got.equal(codes.index_select(0, idx)), qPrintable(QString("%1 bits").arg(bits)));
            QVERIFY(got.equal(unpack_bits(packed, bits, 0, n).to(at::kLong).index_select(0, idx)));
        }
    }

    // A cache file keeps the landmarks and the selection.
    void landmarks_survive_a_cache_file() {
        const Stored s = make_store(8, 2, false, 16, 64);
        const PrefixTensors t = to_tensors(*s.store, "l0.");
        std::map<std::string, at::Tensor> by_name;
        for (const auto& [name, tensor] : t.tensors) by_name[name] = tensor;
        PrefixExpectation expect;
        expect.n_tokens = 900;
        expect.n_kv_head = 2;
        expect.head_dim = kHeadDim;
        expect.dtype = at::kFloat;
        const auto back = std::dynamic_pointer_cast<const CompressedLayer>(prefix_from_tensors(
            t.meta, "l0.", [&](const std::string& name) { return by_name.at(name); }, expect, "test"));
        QVERIFY(back);
        QCOMPARE(back->parts().select_tokens, int64_t(64));
        QVERIFY(back->parts().landmarks.equal(s.store->parts().landmarks));
        const Step st = random_step(8, 2, 1, 5);
        QVERIFY(back->attend(st.q, st.tail_keys, st.tail_values, scale())
                    .equal(s.store->attend(st.q, st.tail_keys, st.tail_values, scale())));
    }
};

QTEST_GUILESS_MAIN(TestCodecSelectiveAttention)
#include "test_codec_selective_attention.moc"

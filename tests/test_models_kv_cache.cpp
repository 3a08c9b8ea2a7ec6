#include "tests/test_support.h"

// KVCache: appends with geometric growth, replacement (eviction), snapshot/restore and byte accounting.
#include <ATen/ATen.h>

#include "base/error.h"
#include "models/kv_cache.h"

using namespace varrate;

namespace {

constexpr int64_t kLayers = 3, kHeads = 2, kDim = 4;

at::Tensor entries(int64_t n, double offset) {
    return at::arange(kHeads * n * kDim, at::kFloat).reshape({kHeads, n, kDim}) + offset;  // [2, n, 4]
}

bool same(const at::Tensor& a, const at::Tensor& b) {
    return a.sizes() == b.sizes() && at::equal(a.contiguous(), b.contiguous());
}

}  // namespace

class TestKVCache : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void append_grows_and_keeps_contents() {
        KVCache cache(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kFloat));
        QCOMPARE(cache.n_layer(), kLayers);
        QCOMPARE(cache.length(0), int64_t(0));
        QCOMPARE(cache.keys(0).sizes(), (std::vector<int64_t>{kHeads, 0, kDim}));
        // Many appends, well past the initial capacity, one layer at a time.
        std::vector<at::Tensor> ks, vs;
        for (int i = 0; i < 300; ++i) {
            const int64_t n = 1 + i % 7;
            ks.push_back(entries(n, 1000.0 * i));
            vs.push_back(entries(n, -1000.0 * i));
            cache.append(1, ks.back(), vs.back());
        }
        const at::Tensor all_k = at::cat(ks, 1), all_v = at::cat(vs, 1);
        QCOMPARE(cache.length(1), all_k.size(1));
        QVERIFY(same(cache.keys(1), all_k));
        QVERIFY(same(cache.values(1), all_v));
        QCOMPARE(cache.length(0), int64_t(0));
        QCOMPARE(cache.length(2), int64_t(0));
        // The dtype of the cache wins: bf16 input is stored as fp32 here.
        cache.append(0, entries(2, 0).to(at::kBFloat16), entries(2, 1).to(at::kBFloat16));
        QCOMPARE(cache.keys(0).scalar_type(), at::kFloat);
        QVERIFY(same(cache.keys(0), entries(2, 0)));
    }

    void append_rejects_wrong_shapes() {
        KVCache cache(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kFloat));
        QVERIFY_THROWS_EXCEPTION(
            Error, cache.append(0, at::zeros({kHeads + 1, 2, kDim}), at::zeros({kHeads + 1, 2, kDim})));
        QVERIFY_THROWS_EXCEPTION(Error,
                                 cache.append(0, at::zeros({kHeads, 2, kDim}), at::zeros({kHeads, 3, kDim})));
        QVERIFY_THROWS_EXCEPTION(Error, cache.append(kLayers, entries(1, 0), entries(1, 0)));
        QVERIFY_THROWS_EXCEPTION(Error, KVCache(0, kHeads, kDim, at::TensorOptions()));
    }

    void replace_with_shorter_then_append() {
        KVCache cache(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kFloat));
        for (int64_t l = 0; l < kLayers; ++l) cache.append(l, entries(10, l), entries(10, -l));
        cache.set_next_position(10);
        // Keep entries 0, 3 and 9 of layer 1 (an eviction), given as views of the cache itself.
        const at::Tensor keep = at::tensor(std::vector<int64_t>{0, 3, 9});
        const at::Tensor k = cache.keys(1).index_select(1, keep), v = cache.values(1).index_select(1, keep);
        cache.replace(1, LayerKV{k, v});
        QCOMPARE(cache.length(1), int64_t(3));
        QCOMPARE(cache.length(0), int64_t(10));
        QCOMPARE(cache.next_position(), int64_t(10));  // positions do not follow the entry count
        QVERIFY(same(cache.keys(1), k));
        QVERIFY(same(cache.values(1), v));
        cache.append(1, entries(2, 77), entries(2, -77));
        QVERIFY(same(cache.keys(1), at::cat({k, entries(2, 77)}, 1)));
        // Replacing a layer with a view of its own contents keeps them.
        const at::Tensor before = cache.keys(2).clone();
        cache.replace(2, LayerKV{cache.keys(2), cache.values(2)});
        QVERIFY(same(cache.keys(2), before));
        QVERIFY_THROWS_EXCEPTION(Error, cache.replace(0, LayerKV{at::zeros({kHeads, 2, kDim + 1}),
                                                                 at::zeros({kHeads, 2, kDim + 1})}));
    }

    void snapshot_restore() {
        KVCache cache(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kFloat));
        for (int64_t l = 0; l < kLayers; ++l) cache.append(l, entries(5 + l, l), entries(5 + l, -l));
        cache.set_next_position(20);  // e.g. after an eviction from a 20-token context
        const KVCache::Snapshot s = cache.snapshot();
        const at::Tensor k0 = cache.keys(0).clone(), v2 = cache.values(2).clone();
        for (int round = 0; round < 3; ++round) {
            for (int64_t l = 0; l < kLayers; ++l)
                cache.append(l, entries(300, 5000 + round), entries(300, 1));
            cache.set_next_position(320);
            cache.restore(s);
            QCOMPARE(cache.next_position(), int64_t(20));
            for (int64_t l = 0; l < kLayers; ++l) QCOMPARE(cache.length(l), 5 + l);
            QVERIFY(same(cache.keys(0), k0));
            QVERIFY(same(cache.values(2), v2));
        }
        // A layer shortened after the snapshot cannot be restored.
        cache.replace(0, LayerKV{entries(1, 0), entries(1, 0)});
        QVERIFY_THROWS_EXCEPTION(Error, cache.restore(s));
        cache.clear();
        QCOMPARE(cache.length(1), int64_t(0));
        QCOMPARE(cache.next_position(), int64_t(0));
    }

    void used_bytes_counts_valid_entries() {
        KVCache f32(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kFloat));
        QCOMPARE(f32.used_bytes(), int64_t(0));
        f32.append(0, entries(3, 0), entries(3, 0));
        f32.append(2, entries(5, 0), entries(5, 0));
        QCOMPARE(f32.used_bytes(), int64_t(2 * kHeads * kDim * 4 * (3 + 5)));  // capacity does not count
        KVCache bf16(kLayers, kHeads, kDim, at::TensorOptions().dtype(at::kBFloat16));
        bf16.append(1, entries(7, 0), entries(7, 0));
        QCOMPARE(bf16.used_bytes(), int64_t(2 * kHeads * kDim * 2 * 7));
        bf16.replace(1, LayerKV{entries(2, 0), entries(2, 0)});
        QCOMPARE(bf16.used_bytes(), int64_t(2 * kHeads * kDim * 2 * 2));
    }
};

QTEST_GUILESS_MAIN(TestKVCache)
#include "test_models_kv_cache.moc"

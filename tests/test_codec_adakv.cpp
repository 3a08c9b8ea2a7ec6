// Ada-KV over SnapKV (codec/adakv_method.h) and the head-wise eviction it rests on
// (codec/headwise_eviction.h): the kept sets against a literal loop of kvpress's AdaKVPress (safeguard per
// head, then one top-k over the layer), ties included; the footprint; the per-token error; the ragged store's
// attention against dense attention over each head's kept entries computed independently; its bytes,
// reconstruction and file round trip; the distortion measure over a ragged keep mask; and the in-prefill
// path's refusal.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <set>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/headwise_eviction.h"
#include "codec/methods/adakv_method.h"
#include "codec/methods/snapkv_method.h"
#include "codec/prefix_io.h"
#include "codec/registry.h"
#include "codec/salience.h"
#include "codec/synthetic.h"
#include "core/capture.h"

using namespace varrate;

namespace {

CodecSettings settings(double kappa, int64_t window) {
    CodecSettings s;
    s.budget = kappa;
    s.obs_window = window;
    s.pool_kernel = 5;
    s.precise_timing = false;
    return s;
}

using Mask = std::vector<std::vector<bool>>;  // [G][L]

// kvpress's AdaKVPress, literally: scores [G, L - w] padded with +inf over the window; each head secures its
// n_safe = max(1, int(0.2 * n_kept)) best (a higher score, or an equal one at an earlier position); then of
// the rest, the G * n_kept - secured best of the whole layer (a higher score, or an equal one earlier in head
// order, then position) are kept.
Mask loop_adakv(const at::Tensor& scores_in, int64_t n_tok, int64_t w, int64_t n_kept) {
    const at::Tensor sc = scores_in.to(at::kDouble).contiguous();
    const int64_t G = sc.size(0), n_other = n_tok - w;
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> s(static_cast<size_t>(G),
                                       std::vector<double>(static_cast<size_t>(n_tok), inf));
    for (int64_t g = 0; g < G; ++g)
        for (int64_t t = 0; t < n_other; ++t) s[g][t] = sc[g][t].item<double>();
    const int64_t n_safe = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n_kept) * 0.2));
    Mask keep(static_cast<size_t>(G), std::vector<bool>(static_cast<size_t>(n_tok), false));
    for (int64_t g = 0; g < G; ++g)
        for (int64_t t = 0; t < n_tok; ++t) {
            int64_t better = 0;
            for (int64_t u = 0; u < n_tok; ++u)
                if (s[g][u] > s[g][t] || (s[g][u] == s[g][t] && u < t)) ++better;
            if (better < n_safe) keep[g][t] = true;
        }
    const Mask safe = keep;
    int64_t secured = 0;
    for (const auto& row : safe)
        for (bool k : row) secured += k;
    const int64_t rest = G * n_kept - secured;
    for (int64_t g = 0; g < G; ++g)
        for (int64_t t = 0; t < n_tok; ++t) {
            if (safe[g][t]) continue;
            int64_t better = 0;  // unsecured entries of the layer ahead of (g, t)
            for (int64_t h = 0; h < G; ++h)
                for (int64_t u = 0; u < n_tok; ++u)
                    if (!safe[h][u] &&
                        (s[h][u] > s[g][t] || (s[h][u] == s[g][t] && (h < g || (h == g && u < t)))))
                        ++better;
            if (better < rest) keep[g][t] = true;
        }
    return keep;
}

Mask to_mask(const at::Tensor& m) {
    const at::Tensor c = m.to(at::kCPU).contiguous();
    Mask out(static_cast<size_t>(c.size(0)), std::vector<bool>(static_cast<size_t>(c.size(1))));
    for (int64_t g = 0; g < c.size(0); ++g)
        for (int64_t t = 0; t < c.size(1); ++t) out[g][t] = c[g][t].item<bool>();
    return out;
}

at::Tensor mask_tensor(const Mask& m) {
    at::Tensor out =
        at::zeros({static_cast<int64_t>(m.size()), static_cast<int64_t>(m[0].size())}, at::kBool);
    for (size_t g = 0; g < m.size(); ++g)
        for (size_t t = 0; t < m[g].size(); ++t) out[g][t] = static_cast<bool>(m[g][t]);
    return out;
}

SyntheticShape shape(int64_t n_kv, int64_t n_head, int64_t n_tok, int64_t w) {
    SyntheticShape s;
    s.n_kv_head = n_kv;
    s.n_head = n_head;
    s.n_tokens = n_tok;
    s.head_dim = 8;
    s.obs_window = w;
    return s;
}

// Softmax attention of one query over keys/values [n, hd] (rows), in double: the independent reference.
at::Tensor dense_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
    const at::Tensor logits = k.to(at::kDouble).matmul(q.to(at::kDouble)) * scale;  // [n]
    return at::softmax(logits, 0).matmul(v.to(at::kDouble));                        // [hd]
}

}  // namespace

class TestCodecAdaKV : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // Kept sets equal to the literal loop, on several shapes, kappas and windows: a window of 4 makes the
    // safeguard reach beyond the window; at window 64 it is all window (kvpress pads the window's scores
    // above every other).
    void keptSetsMatchLoopReference() {
        int64_t ragged = 0, cases = 0;
        for (auto [n_kv, n_head, n_tok, w] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
                 {2, 4, 160, 4}, {4, 8, 120, 4}, {2, 2, 200, 64}, {3, 6, 90, 8}}) {
            for (double kappa : {0.3, 0.5, 0.8}) {
                const CodecSettings s = settings(kappa, w);
                const LayerCapture cap = synthetic_capture(shape(n_kv, n_head, n_tok, w), 17 + n_tok, 0);
                int64_t n_kept = 0;
                try {
                    n_kept = snapkv_kept_tokens(s, n_tok);
                } catch (const InfeasibleBudget&) {
                    continue;
                }
                const LayerResult r = make_method("adakv", s)->compress(cap);
                const Mask want = loop_adakv(snapkv_scores(cap, w, 5), n_tok, w, n_kept);
                QVERIFY2(
                    to_mask(r.diagnostics.kept) == want,
                    qPrintable(QString("G %1 L %2 w %3 kappa %4").arg(n_kv).arg(n_tok).arg(w).arg(kappa)));
                // G * n_kept in all, the window in every head, at least the safeguard per head.
                const at::Tensor counts = r.diagnostics.kept.sum(1);
                QCOMPARE(counts.sum().item<int64_t>(), n_kv * n_kept);
                QVERIFY(r.diagnostics.kept.narrow(1, n_tok - w, w).all().item<bool>());
                QVERIFY(counts.min().item<int64_t>() >= AdaKVMethod::safeguard_tokens(n_kept));
                QCOMPARE(r.diagnostics.stored_bytes, n_kv * n_kept * 2 * 8 * 4);
                QCOMPARE(r.diagnostics.footprint, static_cast<double>(n_kept) / static_cast<double>(n_tok));
                QCOMPARE(r.diagnostics.method, std::string("adakv"));
                ragged += counts.min().item<int64_t>() != counts.max().item<int64_t>();
                ++cases;
            }
        }
        QVERIFY(cases >= 10);
        QVERIFY2(ragged >= cases / 2, "the heads keep the same counts: nothing head-wise was tested");
    }

    // Equal scores: within a head the earlier position, across heads the earlier head (then position).
    void tiesGoToTheEarlierEntry() {
        const int64_t G = 3, L = 40, w = 4, n_kept = 20;
        at::manual_seed(1);
        // Scores on a coarse grid: many ties at every cut.
        const at::Tensor scores =
            at::floor(at::rand({G, L - w}, at::TensorOptions().dtype(at::kFloat)) * 4) / 4;
        const at::Tensor order = snapkv_order(scores);
        const at::Tensor global =
            std::get<1>(at::sort(scores.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
        const at::Tensor mask = AdaKVMethod::keep_mask(order, global, L, w, n_kept);
        QVERIFY(to_mask(mask) == loop_adakv(scores, L, w, n_kept));
        QCOMPARE(mask.sum().item<int64_t>(), G * n_kept);
    }

    // Per token: 1 when every head evicted it, 0 when every head kept it, else sqrt of the evicted heads'
    // share of ||k||^2 + ||v||^2 (pre-RoPE keys), by a loop.
    void perTokenErrorIsTheEvictedShare() {
        const int64_t n_tok = 160, w = 4;
        const LayerCapture cap = synthetic_capture(shape(2, 4, n_tok, w), 5, 0);
        const LayerResult r = make_method("adakv", settings(0.4, w))->compress(cap);
        const Mask kept = to_mask(r.diagnostics.kept);
        int64_t partial = 0;
        double mean = 0;
        for (int64_t t = 0; t < n_tok; ++t) {
            double lost = 0, total = 0;
            for (int64_t g = 0; g < 2; ++g) {
                const double e = cap.keys_pre_rope[g][t].pow(2).sum().item<double>() +
                                 cap.values[g][t].pow(2).sum().item<double>();
                total += e;
                if (!kept[g][t]) lost += e;
            }
            const double want = std::sqrt(lost / total);
            QVERIFY(std::abs(r.diagnostics.rel_error[t].item<double>() - want) < 1e-6);
            partial += want > 0 && want < 1;
            mean += want / n_tok;
            QCOMPARE(r.diagnostics.exact[t].item<bool>(), kept[0][t] && kept[1][t]);
            QCOMPARE(r.diagnostics.rank[t].item<int64_t>(), (int64_t(kept[0][t]) + int64_t(kept[1][t])) * 16);
        }
        QVERIFY(partial > 0);
        QVERIFY(std::abs(r.diagnostics.mean_rel_error - mean) < 1e-6);
    }

    // The ragged store: attention of queries over it and a dense tail equals, query by query, softmax
    // attention over the head's kept entries followed by the tail entries the query may see (1e-5).
    void storeAttentionEqualsDenseAttentionOverKeptEntries() {
        const int64_t n_tok = 160, w = 4, G = 2, H = 6, hd = 8, n_q = 3, n_tail = 5;
        const LayerCapture cap = synthetic_capture(shape(G, H, n_tok, w), 23, 0);
        auto method = make_method("adakv", settings(0.35, w));
        const auto analysis = method->analyse(cap);
        const LayerAllocation alloc = method->allocate(*analysis, settings(0.35, w));
        QVERIFY(alloc.kept_valid.defined());
        const auto store = method->store(cap, *analysis, alloc);
        QVERIFY(store);
        const Mask kept = to_mask(alloc.diagnostics.kept);
        const at::Tensor q = at::randn({H, n_q, hd}), tk = at::randn({G, n_tail, hd}),
                         tv = at::randn({G, n_tail, hd});
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
        const at::Tensor out = store->attend(q, tk, tv, scale);
        QCOMPARE(out.sizes().vec(), (std::vector<int64_t>{H, n_q, hd}));
        double worst = 0;
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / G);
            std::vector<int64_t> pos;
            for (int64_t t = 0; t < n_tok; ++t)
                if (kept[g][t]) pos.push_back(t);
            const at::Tensor idx = at::tensor(pos, at::kLong);
            for (int64_t i = 0; i < n_q; ++i) {
                const int64_t seen = n_tail - n_q + i + 1;  // the tail up to the query's own entry
                const at::Tensor k = at::cat({cap.keys[g].index_select(0, idx), tk[g].narrow(0, 0, seen)});
                const at::Tensor v = at::cat({cap.values[g].index_select(0, idx), tv[g].narrow(0, 0, seen)});
                const at::Tensor ref = dense_attention(q[h][i], k, v, scale);
                worst = std::max(worst, (out[h][i].to(at::kDouble) - ref).abs().max().item<double>());
            }
        }
        QVERIFY2(worst < 1e-5, qPrintable(QString("store attention differs by %1").arg(worst)));

        // Bytes: the padded layout and the mask; the accounted footprint counts the kept entries only.
        const auto& h = dynamic_cast<const HeadwiseEvictedLayer&>(*store);
        const int64_t n_max = h.length(), entries = alloc.diagnostics.kept.sum().item<int64_t>();
        QCOMPARE(n_max, alloc.diagnostics.kept.sum(1).max().item<int64_t>());
        QCOMPARE(store->resident_bytes(), 2 * G * n_max * hd * 4 + G * n_max);
        QCOMPARE(alloc.diagnostics.stored_bytes, entries * 2 * hd * 4);
        QVERIFY(store->resident_bytes() > alloc.diagnostics.stored_bytes);
        QCOMPARE(h.counts().sum().item<int64_t>(), entries);
        // No dense equivalent when the heads keep different numbers.
        EXPECT_ERROR(store->reconstruct(), "no dense cache", "decode through the store");

        // The file form (prefix_io) reads back into a store that attends identically.
        const PrefixTensors saved = to_tensors(*store, "l0.");
        QCOMPARE(saved.meta["kind"].get<std::string>(), std::string("headwise_eviction"));
        std::map<std::string, at::Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
        PrefixExpectation expect{n_max, G, hd, at::kFloat};
        const auto back = prefix_from_tensors(
            saved.meta, "l0.", [&](const std::string& n) { return by_name.at(n); }, expect, "test");
        QVERIFY(at::equal(back->attend(q, tk, tv, scale), out));
        expect.n_tokens = n_max + 1;
        EXPECT_ERROR(
            prefix_from_tensors(
                saved.meta, "l0.", [&](const std::string& n) { return by_name.at(n); }, expect, "test"),
            "n_tokens");
    }

    // A head-wise store whose heads keep the same number reconstructs to exactly those entries.
    void uniformStoreReconstructs() {
        const LayerCapture cap = synthetic_capture(shape(2, 4, 50, 4), 3, 0);
        Mask m(2, std::vector<bool>(50, false));
        for (int64_t t : {0, 7, 20, 49}) m[0][t] = true;
        for (int64_t t : {3, 4, 30, 48}) m[1][t] = true;
        const at::Tensor kv_sq = eviction_kv_sq(cap);
        const LayerAllocation a = headwise_allocation("test", 0, mask_tensor(m), kv_sq, 8, 4);
        const LayerKV r = headwise_store(cap, a)->reconstruct();
        QVERIFY(at::equal(r.keys[0], cap.keys[0].index_select(0, at::tensor({0, 7, 20, 49}, at::kLong))));
        QVERIFY(at::equal(r.values[1], cap.values[1].index_select(0, at::tensor({3, 4, 30, 48}, at::kLong))));
        EXPECT_ERROR(headwise_allocation("test", 0, at::zeros({2, 50}, at::kBool), kv_sq, 8, 4),
                     "keeps no position");
    }

    // add_distortion over a ragged keep mask: the attention-output error of the window queries equals a loop
    // where each query head attends to its KV head's kept positions up to its own position.
    void attentionOutputErrorOverRaggedKeepMask() {
        const int64_t n_tok = 120, w = 4, G = 2, H = 4;
        const LayerCapture cap = synthetic_capture(shape(G, H, n_tok, w), 31, 0);
        auto method = make_method("adakv", settings(0.3, w));
        const auto analysis = method->analyse(cap);
        LayerAllocation alloc = method->allocate(*analysis, settings(0.3, w));
        const LayerKV kv = method->materialise(cap, *analysis, alloc);
        const DistortionReference ref = distortion_reference(cap, w, 5);
        add_distortion(alloc.diagnostics, cap, kv, alloc.kept, ref, alloc.kept_valid);
        const Mask kept = to_mask(alloc.diagnostics.kept);
        const double scale = 1.0 / std::sqrt(8.0);
        double sum = 0;
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / G);
            for (int64_t i = 0; i < w; ++i) {
                const int64_t at_pos = n_tok - w + i;
                std::vector<int64_t> all, own;
                for (int64_t t = 0; t <= at_pos; ++t) {
                    all.push_back(t);
                    if (kept[g][t]) own.push_back(t);
                }
                const at::Tensor q = cap.window_queries[h][cap.window_queries.size(1) - w + i];
                auto attend = [&](const std::vector<int64_t>& p) {
                    const at::Tensor idx = at::tensor(p, at::kLong);
                    return dense_attention(q, cap.keys[g].index_select(0, idx),
                                           cap.values[g].index_select(0, idx), scale);
                };
                const at::Tensor o = attend(all), o_hat = attend(own);
                sum += ((o - o_hat).norm() / o.norm()).item<double>();
            }
        }
        const double want = sum / static_cast<double>(H * w);
        QVERIFY2(std::abs(alloc.diagnostics.attn_output_error - want) < 1e-5,
                 qPrintable(QString("%1 vs %2").arg(alloc.diagnostics.attn_output_error).arg(want)));
        QVERIFY(want > 1e-4);
    }

    // The in-prefill path replaces a layer's dense cache: it refuses a head-wise eviction, naming the way.
    void inPrefillPathRefuses() {
        const LayerCapture cap = synthetic_capture(shape(2, 4, 160, 4), 9, 0);
        auto method = make_method("adakv", settings(0.4, 4));
        EXPECT_ERROR(compress_layer_in_prefill(*method, cap), "adakv", "head-wise eviction", "in-prefill",
                     "shared capture");
        const LayerCapture wide = synthetic_capture(shape(2, 4, 300, 64), 9, 0);
        EXPECT_ERROR(make_method("adakv", settings(0.1, 64))->compress(wide), "adakv", "always-kept window",
                     "smallest feasible kappa");
    }
};

QTEST_GUILESS_MAIN(TestCodecAdaKV)
#include "test_codec_adakv.moc"

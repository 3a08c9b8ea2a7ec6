// VarRate's allocation signals (codec/allocation_signal.h), its binary top-K allocation and Expected
// Attention's scores, each against a literal-loop reference written from the definitions.
#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <QtTest/QtTest>

#include "base/error.h"
#include "codec/allocation_signal.h"
#include "codec/methods/cur_method.h"
#include "codec/methods/expected_attention_method.h"
#include "codec/methods/kvzip_method.h"
#include "codec/methods/lagkv_method.h"
#include "codec/methods/varrate_method.h"
#include "codec/registry.h"
#include "codec/salience.h"
#include "codec/scorer_eviction.h"
#include "codec/synthetic.h"
#include "tests/test_support.h"

using namespace varrate;

namespace {

SyntheticShape shape(int64_t n_tokens = 96) {
    SyntheticShape s;
    s.n_kv_head = 2;
    s.n_head = 4;
    s.n_tokens = n_tokens;
    s.head_dim = 8;
    s.obs_window = 16;
    return s;
}

// Codec settings for a 256-token synthetic layer (D = 32): anchors every 32, a window of 16, ranks 2..32.
CodecSettings codec_on_256_tokens(double budget) {
    CodecSettings s = test::small_codec_settings(budget);
    s.obs_window = 16;
    s.window = 16;
    s.stride = 32;
    s.rank = 32;
    s.r_min = 2;
    return s;
}

// A capture with query statistics from seeded pre-RoPE queries (mean 0.3, so the mean term matters).
LayerCapture capture_with_stats(uint64_t seed, int64_t n_tokens = 96) {
    LayerCapture c = synthetic_capture(shape(n_tokens), seed);
    at::Generator gen = at::detail::createCPUGenerator(seed + 1);
    const at::Tensor q = at::normal(0.3, 1.0, {4, 50, 8}, gen, at::TensorOptions().dtype(at::kFloat));
    c.query_mean = q.mean(1);
    const at::Tensor centred = q - c.query_mean.unsqueeze(1);
    c.query_cov = at::bmm(centred.transpose(1, 2), centred) / 50.0;
    return c;
}

// Expected Attention by the definition, one scalar at a time (fp64).
std::vector<std::vector<double>> expected_attention_loops(const LayerCapture& c, int64_t n_future,
                                                          double eps) {
    const int64_t G = c.keys.size(0), L = c.keys.size(1), hd = c.keys.size(2), half = hd / 2;
    const int64_t H = c.query_mean.size(0), g = H / G, sinks = 4;
    const auto K = c.keys.to(at::kDouble).contiguous(), V = c.values.to(at::kDouble).contiguous();
    const auto M = c.query_mean.to(at::kDouble).contiguous(), S = c.query_cov.to(at::kDouble).contiguous();
    const auto F = c.rope_inv_freq.to(at::kDouble).contiguous();
    // R[i][j]: the mean over future positions of the rotate-half rotation's matrix.
    std::vector<std::vector<double>> R(hd, std::vector<double>(hd, 0.0));
    for (int64_t p = L; p < L + n_future; ++p)
        for (int64_t j = 0; j < half; ++j) {
            const double a = static_cast<double>(p) * F[j].item<double>();
            R[j][j] += std::cos(a) / n_future;
            R[j + half][j + half] += std::cos(a) / n_future;
            R[j][j + half] -= std::sin(a) / n_future;
            R[j + half][j] += std::sin(a) / n_future;
        }
    std::vector<std::vector<double>> out(G, std::vector<double>(L, 0.0));
    double top = -1e300;
    for (int64_t kv = 0; kv < G; ++kv) {
        std::vector<double> acc(L, 0.0);
        for (int64_t h = kv * g; h < (kv + 1) * g; ++h) {
            std::vector<double> mu(hd, 0.0);
            std::vector<std::vector<double>> cov(hd, std::vector<double>(hd, 0.0));
            for (int64_t i = 0; i < hd; ++i)
                for (int64_t j = 0; j < hd; ++j) mu[i] += R[i][j] * M[h][j].item<double>();
            for (int64_t i = 0; i < hd; ++i)
                for (int64_t j = 0; j < hd; ++j)
                    for (int64_t a = 0; a < hd; ++a)
                        for (int64_t b = 0; b < hd; ++b)
                            cov[i][j] += R[i][a] * S[h][a][b].item<double>() * R[j][b];
            std::vector<double> logit(L, 0.0);
            double mx = -1e300;
            for (int64_t t = sinks; t < L; ++t) {
                double x = 0;
                for (int64_t i = 0; i < hd; ++i)
                    x += K[kv][t][i].item<double>() * mu[i] / std::sqrt(double(hd));
                for (int64_t i = 0; i < hd; ++i)
                    for (int64_t j = 0; j < hd; ++j)
                        x += K[kv][t][i].item<double>() * cov[i][j] * K[kv][t][j].item<double>() / (2.0 * hd);
                logit[t] = x;
                mx = std::max(mx, x);
            }
            double z = 0;
            for (int64_t t = sinks; t < L; ++t) z += std::exp(logit[t] - mx);
            for (int64_t t = sinks; t < L; ++t) acc[t] += std::exp(logit[t] - mx) / z / g;
        }
        for (int64_t t = sinks; t < L; ++t) {
            double vn = 0;
            for (int64_t i = 0; i < hd; ++i) vn += V[kv][t][i].item<double>() * V[kv][t][i].item<double>();
            out[kv][t] = (acc[t] + eps) * std::sqrt(vn);
            top = std::max(top, out[kv][t]);
        }
    }
    for (auto& row : out)
        for (int64_t t = 0; t < sinks; ++t) row[t] = top + 1.0;
    return out;
}

}  // namespace

class TestCodecSignals : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void expected_attention_matches_the_definition() {
        const LayerCapture c = capture_with_stats(5);
        for (double eps : {0.0, 1e-2}) {
            ExpectedAttentionOptions o;
            o.epsilon = eps;
            o.n_future = 40;
            const at::Tensor ours = expected_attention_scores(c, o);
            const auto ref = expected_attention_loops(c, 40, eps);
            QCOMPARE(ours.sizes(), (at::IntArrayRef{2, 96}));
            double worst = 0, scale = 0;
            for (int64_t g = 0; g < 2; ++g)
                for (int64_t t = 0; t < 96; ++t) {
                    worst = std::max(worst, std::abs(ours[g][t].item<double>() - ref[g][t]));
                    scale = std::max(scale, std::abs(ref[g][t]));
                }
            QVERIFY2(worst <= 1e-5 * scale,
                     qPrintable(QString("eps %1: max diff %2 of %3").arg(eps).arg(worst).arg(scale)));
        }
    }

    void expected_attention_method_shares_the_budget_as_ada_kv() {
        const LayerCapture c = capture_with_stats(6);
        CodecSettings s;
        s.budget = 0.25;
        ExpectedAttentionMethod m(s);
        const auto analysis = m.analyse(c);
        const LayerAllocation al = m.allocate(*analysis, s);
        const int64_t kept = static_cast<int64_t>(96 * 0.25),
                      safe = std::max<int64_t>(1, int64_t(kept * 0.2));
        const at::Tensor scores = expected_attention_scores(c);  // [2, 96]
        const at::Tensor mask = al.diagnostics.kept;             // [2, 96] bool
        QCOMPARE(mask.sum().item<int64_t>(), 2 * kept);
        // Literal Ada-KV: each head's top `safe`, then the best of the rest over both heads.
        std::vector<std::vector<bool>> ref(2, std::vector<bool>(96, false));
        std::vector<std::tuple<double, int64_t, int64_t>> rest;
        for (int64_t g = 0; g < 2; ++g) {
            std::vector<int64_t> idx(96);
            for (int64_t t = 0; t < 96; ++t) idx[t] = t;
            std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) {
                return scores[g][x].item<float>() > scores[g][y].item<float>();
            });
            for (int64_t i = 0; i < safe; ++i) ref[g][idx[i]] = true;
        }
        for (int64_t g = 0; g < 2; ++g)
            for (int64_t t = 0; t < 96; ++t)
                if (!ref[g][t]) rest.emplace_back(-scores[g][t].item<float>(), g, t);
        std::stable_sort(rest.begin(), rest.end(),
                         [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
        for (int64_t i = 0; i < 2 * (kept - safe); ++i)
            ref[std::get<1>(rest[i])][std::get<2>(rest[i])] = true;
        for (int64_t g = 0; g < 2; ++g)
            for (int64_t t = 0; t < 96; ++t)
                QVERIFY2(mask[g][t].item<bool>() == ref[g][t],
                         qPrintable(QString("head %1 position %2").arg(g).arg(t)));
        for (int64_t t = 0; t < 4; ++t) QVERIFY(mask[0][t].item<bool>() && mask[1][t].item<bool>());  // sinks
        QVERIFY(std::abs(al.diagnostics.footprint - 0.25) < 0.005 + 1.0 / 96);
        // Decoding reads the head-wise store.
        QVERIFY(m.store(c, *analysis, al) != nullptr);
    }

    void expected_attention_refuses_a_capture_without_statistics() {
        const LayerCapture c = synthetic_capture(shape(), 3);
        const std::string msg = test::error_message([&] { expected_attention_scores(c); });
        QVERIFY2(msg.find("query statistics") != std::string::npos, msg.c_str());
    }

    void kvzip_drops_the_lowest_scores_across_layers_and_heads() {
        CodecSettings s;
        s.obs_window = 8;
        KVzipMethod m(s);
        std::vector<LayerCapture> caps;
        std::vector<std::shared_ptr<const LayerAnalysis>> analyses;
        at::Generator gen = at::detail::createCPUGenerator(17);
        for (int64_t l = 0; l < 3; ++l) {
            LayerCapture c = synthetic_capture(shape(), 30 + l, l);
            // Layers differ in scale, so a global selection keeps different numbers per layer.
            c.repeat_scores = at::rand({2, 96}, gen, at::TensorOptions().dtype(at::kFloat)) * (1.0 + l);
            caps.push_back(c);
            analyses.push_back(m.analyse(c));
        }
        for (double kappa : {0.3, 0.5}) {
            s.budget = kappa;
            const std::vector<double> per_layer = m.layer_budgets(analyses, s);
            QCOMPARE(per_layer.size(), size_t{3});
            // Literal: every (layer, head, position), sinks and window first, then by score (ties earlier).
            std::vector<std::tuple<double, int64_t, int64_t, int64_t>> all;
            for (int64_t l = 0; l < 3; ++l)
                for (int64_t g = 0; g < 2; ++g)
                    for (int64_t t = 0; t < 96; ++t) {
                        const bool pinned = t < 4 || t >= 96 - 8;
                        all.emplace_back(pinned ? -1e30 : -caps[l].repeat_scores[g][t].item<float>(), l, g,
                                         t);
                    }
            std::stable_sort(all.begin(), all.end(),
                             [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
            const int64_t total = 3 * 2 * 96, keep = total - static_cast<int64_t>(total * (1.0 - kappa));
            std::vector<at::Tensor> ref(3);
            for (auto& r : ref) r = at::zeros({2, 96}, at::kBool);
            for (int64_t i = 0; i < keep; ++i)
                ref[std::get<1>(all[i])][std::get<2>(all[i])][std::get<3>(all[i])] = true;
            int64_t kept = 0;
            std::set<int64_t> counts;
            for (int64_t l = 0; l < 3; ++l) {
                CodecSettings b = s;
                b.budget = per_layer[l];
                const LayerAllocation al = m.allocate(*analyses[l], b);
                QVERIFY2(at::equal(al.diagnostics.kept, ref[l]),
                         qPrintable(QString("kappa %1 layer %2").arg(kappa).arg(l)));
                kept += al.diagnostics.kept.sum().item<int64_t>();
                counts.insert(al.diagnostics.kept.sum().item<int64_t>());
            }
            QCOMPARE(kept, keep);
            QVERIFY(counts.size() > 1);  // the layers keep different numbers
        }
        // Below the pinned entries: infeasible, naming the smallest feasible kappa.
        s.budget = 0.05;
        const std::string msg = test::error_message([&] { m.layer_budgets(analyses, s); });
        QVERIFY2(msg.find("smallest feasible kappa") != std::string::npos, msg.c_str());
        // Without the reconstruction pass: says what it needs.
        const std::string missing = test::error_message([&] { m.analyse(synthetic_capture(shape(), 3)); });
        QVERIFY2(missing.find("context-reconstruction") != std::string::npos, missing.c_str());
    }

    void budgets_across_layers_follow_one_water_filling() {
        SyntheticShape sh = shape(256);
        CodecSettings s = test::small_codec_settings(0.4);
        s.obs_window = 16;
        s.window = 16;
        s.stride = 32;
        s.rank = 32;
        s.r_min = 2;
        auto basis = random_basis(3, 32, 32, s.stride, s.anchors, 3);
        VarRateMethod m(s, basis, RankAllocation::Salience, SalienceSignal::Window, "varrate-layers", true);
        std::vector<LayerCapture> caps;
        std::vector<std::shared_ptr<const LayerAnalysis>> analyses;
        for (int64_t l = 0; l < 3; ++l) {
            LayerCapture c = synthetic_capture(sh, 40 + l, l);
            c.window_queries = c.window_queries * (1.0 + 1.5 * l);  // peakier attention in deeper layers
            caps.push_back(c);
            analyses.push_back(m.analyse(c));
        }
        const std::vector<double> kappas = m.layer_budgets(analyses, s);
        QCOMPARE(kappas.size(), size_t{3});
        // Literal reference: lambda by bisection so that sum over all layers' coded tokens of
        // clip(r_min + lambda * s_t / max s, r_min, R) is the layers' summed budget.
        std::vector<std::vector<double>> sal;
        double top = 0;
        int64_t total = 0;
        for (int64_t l = 0; l < 3; ++l) {
            const LayerAllocation even = m.allocate(*analyses[l], s);
            total += even.diagnostics.budget_B;
            std::vector<double> v;
            for (int64_t t = 0; t < 256; ++t)
                if (!even.diagnostics.exact[t].item<bool>()) {
                    v.push_back(std::max(0.0, even.diagnostics.salience[t].item<double>()));
                    top = std::max(top, v.back());
                }
            sal.push_back(v);
        }
        auto level_sum = [&](double lambda, int64_t l) {
            double sum = 0;
            for (double x : sal[l]) sum += std::clamp(2.0 + lambda * x / top, 2.0, 32.0);
            return sum;
        };
        double lo = 0, hi = 1e9;
        for (int it = 0; it < 200; ++it) {
            const double mid = 0.5 * (lo + hi);
            (level_sum(mid, 0) + level_sum(mid, 1) + level_sum(mid, 2) < static_cast<double>(total) ? lo
                                                                                                    : hi) =
                mid;
        }
        int64_t spent = 0;
        std::set<int64_t> budgets;
        for (int64_t l = 0; l < 3; ++l) {
            CodecSettings b = s;
            b.budget = kappas[l];
            const LayerAllocation al = m.allocate(*analyses[l], b);
            const double expected = std::floor(level_sum(lo, l));
            QVERIFY2(std::abs(static_cast<double>(al.diagnostics.budget_B) - expected) <= 1.0,
                     qPrintable(QString("layer %1: B %2, reference %3")
                                    .arg(l)
                                    .arg(al.diagnostics.budget_B)
                                    .arg(expected)));
            spent += al.diagnostics.stored_bytes;
            budgets.insert(al.diagnostics.budget_B);
            QVERIFY(al.diagnostics.footprint <= 1.0);
        }
        QVERIFY(budgets.size() == 3);  // the layers get different budgets
        // The total stays within kappa's.
        const int64_t full = 3 * 256 * 32 * 4;
        QVERIFY2(static_cast<double>(spent) <= 0.4 * full + 1e-9 &&
                     static_cast<double>(spent) >= (0.4 - 0.005) * full,
                 qPrintable(QString("spent %1 of %2").arg(spent).arg(full)));
        // Quantized coefficients are refused, flat cannot be made so.
        s.coef_bits = 4;
        QVERIFY(test::error_message([&] { m.layer_budgets(analyses, s); }).find("unquantized") !=
                std::string::npos);
        QVERIFY(!test::error_message([&] {
                     VarRateMethod f(s, basis, RankAllocation::Uniform, SalienceSignal::Constant, "flat",
                                     true);
                 }).empty());
    }

    void top_k_ranks_are_binary_and_spend_the_budget() {
        at::Generator gen = at::detail::createCPUGenerator(9);
        const at::Tensor s = at::rand({200}, gen, at::TensorOptions().dtype(at::kFloat));
        for (int64_t B : {200 * 4, 200 * 4 + 1, 200 * 4 + 37 * 60 + 5, 200 * 64}) {
            const at::Tensor r = top_k_ranks(s, B, 4, 64);
            QCOMPARE(r.sum().item<int64_t>(), B);
            // Literal: sort by salience (ties to the earlier token), R to the first k, the rest to one.
            std::vector<int64_t> idx(200);
            for (int64_t i = 0; i < 200; ++i) idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(),
                             [&](int64_t a, int64_t b) { return s[a].item<float>() > s[b].item<float>(); });
            int64_t spare = B - 200 * 4;
            for (int64_t i : idx) {
                const int64_t give = std::min<int64_t>(spare, 60);
                QCOMPARE(r[i].item<int64_t>(), 4 + give);
                spare -= give;
            }
        }
    }

    void ablation_signals_are_what_they_say() {
        const LayerCapture c = synthetic_capture(shape(), 12, /*layer=*/3);
        CodecSettings s;
        s.obs_window = 16;
        s.pool_kernel = 5;
        const at::Tensor window = varrate_salience(c, 16, 5);
        QVERIFY(at::equal(allocation_salience(SalienceSignal::Window, c, s), window));
        // Shuffle: the same values at other positions, the same permutation every time.
        const at::Tensor sh = allocation_salience(SalienceSignal::Shuffle, c, s);
        QVERIFY(at::equal(std::get<0>(at::sort(sh)), std::get<0>(at::sort(window))));
        QVERIFY(!at::equal(sh, window));
        QVERIFY(at::equal(sh, allocation_salience(SalienceSignal::Shuffle, c, s)));
        // Random: in [0, 1), reproducible per layer, different across layers.
        const at::Tensor r = allocation_salience(SalienceSignal::Random, c, s);
        QVERIFY(r.min().item<float>() >= 0 && r.max().item<float>() < 1);
        QVERIFY(at::equal(r, allocation_salience(SalienceSignal::Random, c, s)));
        LayerCapture other = c;
        other.layer = 4;
        QVERIFY(!at::equal(r, allocation_salience(SalienceSignal::Random, other, s)));
        // Position: t / L.
        const at::Tensor p = allocation_salience(SalienceSignal::Position, c, s);
        for (int64_t t : {0, 17, 95}) QCOMPARE(p[t].item<float>(), float(t) / 96.0f);
        // The probe signals name what is missing.
        for (SalienceSignal sig : {SalienceSignal::Question, SalienceSignal::Repeat}) {
            const std::string msg = test::error_message([&] { allocation_salience(sig, c, s); });
            QVERIFY2(msg.find(signal_requirement(sig)) != std::string::npos, msg.c_str());
        }
        // With them: the question's attention averaged over heads and pooled; KVzip's max over heads.
        LayerCapture probed = c;
        at::Generator gen = at::detail::createCPUGenerator(4);
        probed.question_attention = at::rand({4, 96}, gen, at::TensorOptions().dtype(at::kFloat));
        probed.repeat_scores = at::rand({2, 96}, gen, at::TensorOptions().dtype(at::kFloat));
        const at::Tensor qa = allocation_salience(SalienceSignal::Question, probed, s);
        for (int64_t t : {0, 1, 50, 95}) {
            double sum = 0;
            for (int64_t u = t - 2; u <= t + 2; ++u)
                if (u >= 0 && u < 96) sum += probed.question_attention.select(1, u).mean().item<double>();
            QVERIFY(std::abs(qa[t].item<double>() - sum / 5.0) < 1e-6);
        }
        const at::Tensor rs = allocation_salience(SalienceSignal::Repeat, probed, s);
        for (int64_t t : {0, 50, 95})
            QCOMPARE(rs[t].item<float>(), std::max(probed.repeat_scores[0][t].item<float>(),
                                                   probed.repeat_scores[1][t].item<float>()));
    }

    void rare_floor_raises_only_rare_ids_to_the_quantile() {
        // Literal reference: count every id, raise a once-only id's window salience to the 90th percentile
        // (linear interpolation between order statistics, as numpy's default), leave the others.
        const LayerCapture c = synthetic_capture(shape(), 12, /*layer=*/1);
        CodecSettings s;
        s.obs_window = 16;
        s.pool_kernel = 5;
        QVERIFY(!c.token_ids.defined());
        const std::string msg =
            test::error_message([&] { allocation_salience(SalienceSignal::RareFloor, c, s); });
        QVERIFY2(msg.find(signal_requirement(SalienceSignal::RareFloor)) != std::string::npos, msg.c_str());
        LayerCapture withIds = c;
        std::vector<int64_t> ids(96);
        for (int64_t t = 0; t < 96; ++t) ids[t] = t % 7;     // frequent ids 0..6
        for (int64_t t : {3, 40, 41, 77}) ids[t] = 100 + t;  // four ids that occur once
        ids[60] = ids[90] = 500;                             // twice: not rare
        withIds.token_ids = at::tensor(ids, at::kLong);
        const at::Tensor rare = rare_token_mask(withIds.token_ids, kRareMaxCount);
        const at::Tensor window = varrate_salience(c, 16, 5);
        std::vector<double> sorted(96);
        for (int64_t t = 0; t < 96; ++t) sorted[t] = window[t].item<double>();
        std::sort(sorted.begin(), sorted.end());
        const double pos = kRareQuantile * 95.0;
        const auto lo = static_cast<size_t>(std::floor(pos));
        const double floor =
            sorted[lo] + (pos - double(lo)) * (sorted[std::min<size_t>(lo + 1, 95)] - sorted[lo]);
        const at::Tensor got = allocation_salience(SalienceSignal::RareFloor, withIds, s);
        int64_t raised = 0;
        for (int64_t t = 0; t < 96; ++t) {
            const bool once = t == 3 || t == 40 || t == 41 || t == 77;
            QCOMPARE(rare[t].item<bool>(), once);
            const double w = window[t].item<double>();
            const double want = once ? std::max(w, floor) : w;
            QVERIFY2(
                std::abs(got[t].item<double>() - want) < 1e-6 * std::max(1.0, std::abs(want)),
                qPrintable(QString("position %1: %2, want %3").arg(t).arg(got[t].item<double>()).arg(want)));
            raised += got[t].item<double>() > w;
        }
        QVERIFY(raised > 0);  // the synthetic window salience leaves some of them below the floor
        // Twice-occurring ids count as rare with max_count 2.
        QVERIFY(rare_token_mask(withIds.token_ids, 2)[60].item<bool>());
    }

    void varrate_with_another_signal_follows_it() {
        // Ranks water-filled by recency: later coded tokens never get less than earlier ones.
        SyntheticShape sh = shape(256);
        const LayerCapture c = synthetic_capture(sh, 21);
        const CodecSettings s = codec_on_256_tokens(0.4);
        auto basis = random_basis(1, 32, 32, s.stride, s.anchors, 3);
        VarRateMethod m(s, basis, RankAllocation::Salience, SalienceSignal::Position, "varrate:position");
        QCOMPARE(m.name(), std::string("varrate:position"));
        const LayerResult r = m.compress(c);
        int64_t last = -1;
        for (int64_t t = 0; t < 256; ++t) {
            if (r.diagnostics.exact[t].item<bool>()) continue;
            const int64_t rank = r.diagnostics.rank[t].item<int64_t>();
            QVERIFY2(rank >= last,
                     qPrintable(QString("position %1: rank %2 after %3").arg(t).arg(rank).arg(last)));
            last = rank;
        }
        QVERIFY(std::abs(r.diagnostics.footprint - 0.4) < 0.005);
    }

    // varrate@<scorer> water-fills by the scorer's own scores (mean over KV heads) and nothing else: its
    // ranks are those of VarRate given that salience explicitly, and differ from the window's. Every scorer
    // press has its twin; an old name is an alias that keeps its name.
    void varrate_at_a_scorer_follows_its_scores() {
        SyntheticShape sh = shape(256);
        const LayerCapture c = synthetic_capture(sh, 23);
        const CodecSettings s = codec_on_256_tokens(0.3);
        auto basis = random_basis(1, 32, 32, s.stride, s.anchors, 3);
        auto ranks_of = [&](CompressionMethod& m, const std::shared_ptr<const LayerAnalysis>& a) {
            return m.allocate(*a, s).coded_ranks.to(at::kCPU);
        };
        for (const std::string scorer : {"knorm", "keydiff", "tova", "lagkv", "cur", "random"}) {
            auto twin = make_method("varrate@" + scorer, s, basis);
            QCOMPARE(twin->name(), "varrate@" + scorer);
            const auto press = make_method(scorer, s);
            const at::Tensor want =
                dynamic_cast<const ScorerEviction&>(*press).token_scores(c).to(at::kFloat).mean(0);  // [L]
            VarRateMethod reference(s, basis, RankAllocation::Salience);
            const at::Tensor got = ranks_of(*twin, twin->analyse(c));
            QVERIFY2(at::equal(got, ranks_of(reference, reference.analyse_with_salience(c, want))),
                     scorer.c_str());
            QVERIFY2(!at::equal(got, ranks_of(reference, reference.analyse(c))), scorer.c_str());
        }
        // Every scorer press has a twin.
        for (const std::string& name : method_names())
            if (dynamic_cast<const ScorerEviction*>(make_method(name, s, basis).get()))
                QVERIFY2(find_method_traits("varrate@" + name), name.c_str());
        auto old = make_method("varrate-ea", s, basis);
        QCOMPARE(old->name(), std::string("varrate-ea"));
        auto twin = make_method("varrate@expected-attention", s, basis);
        const LayerCapture with_stats = capture_with_stats(5, 256);
        QVERIFY(
            at::equal(ranks_of(*old, old->analyse(with_stats)), ranks_of(*twin, twin->analyse(with_stats))));
        // varrate@snapkv is VarRate itself (its signal is SnapKV's window salience).
        QCOMPARE(registered_method_name("varrate@snapkv"), std::string("varrate"));
    }

    // The new presses' scores, from their definitions (kvpress's LagKVPress and CURPress, loop by loop).
    void lagkv_and_cur_scores_follow_their_definitions() {
        CodecSettings s;
        const LayerCapture c = synthetic_capture(shape(300), 31);  // 4 sinks + partitions of 128 + 40
        const at::Tensor got = LagKVMethod(s).token_scores(c).to(at::kCPU);  // [G, L]
        const auto K = c.keys.to(at::kDouble), V = c.values.to(at::kDouble);
        const int64_t G = 2, hd = 8, lag = 128;
        for (int64_t g = 0; g < G; ++g) {
            // Partition 0 (positions 4..131) against partition 1 (132..259); the rest score 1.
            std::vector<double> score(lag, 0.0);
            for (const at::Tensor& X : {K, V}) {
                std::vector<double> sd(lag);
                for (int64_t t = 0; t < lag; ++t) {
                    std::vector<double> z(hd);
                    double mean = 0;
                    for (int64_t d = 0; d < hd; ++d) {
                        double lo = 1e300, hi = -1e300;
                        for (int64_t u = 0; u < lag; ++u) {
                            lo = std::min(lo, X[g][4 + lag + u][d].item<double>());
                            hi = std::max(hi, X[g][4 + lag + u][d].item<double>());
                        }
                        z[d] = (X[g][4 + t][d].item<double>() - lo) / (hi - lo);
                        mean += z[d] / hd;
                    }
                    double var = 0;
                    for (double v : z) var += (v - mean) * (v - mean) / (hd - 1);
                    sd[t] = std::sqrt(var);
                }
                double mx = *std::max_element(sd.begin(), sd.end()), sum = 0;
                for (double& v : sd) sum += (v = std::exp(v - mx));
                for (int64_t t = 0; t < lag; ++t) score[t] += sd[t] / sum / 2;
            }
            for (int64_t t = 0; t < lag; ++t) {
                const double rank = static_cast<double>(
                    std::count_if(score.begin(), score.end(), [&](double v) { return v < score[t]; }));
                QCOMPARE(got[g][4 + t].item<double>(), rank / lag);
            }
            for (int64_t t : {0, 3, 132, 299}) QCOMPARE(got[g][t].item<double>(), 1.0);
        }
        // CurDKV: window-normalised squared norms, their product normalised over L, 4 sinks at 1.
        const at::Tensor cur = CURMethod(s).token_scores(c).to(at::kCPU);
        for (int64_t g = 0; g < G; ++g) {
            std::vector<double> k2(300), v2(300), p(300);
            for (int64_t t = 0; t < 300; ++t)
                for (int64_t d = 0; d < hd; ++d) {
                    k2[t] += std::pow(K[g][t][d].item<double>(), 2);
                    v2[t] += std::pow(V[g][t][d].item<double>(), 2);
                }
            double total = 0;
            for (int64_t t = 0; t < 300; ++t) {
                double ks = 0, vs = 0;
                for (int64_t u = t / 16 * 16; u < std::min<int64_t>(t / 16 * 16 + 16, 300); ++u) {
                    ks += k2[u];
                    vs += v2[u];
                }
                total += p[t] = k2[t] / ks * v2[t] / vs;
            }
            for (int64_t t = 0; t < 300; ++t) {
                const double want = t < 4 ? 1.0 : p[t] / total;
                QVERIFY2(std::abs(cur[g][t].item<double>() - want) < 1e-5 * std::max(want, 1e-3),
                         qPrintable(QString("cur, KV head %1 position %2").arg(g).arg(t)));
            }
        }
    }
};

QTEST_APPLESS_MAIN(TestCodecSignals)
#include "test_codec_signals.moc"

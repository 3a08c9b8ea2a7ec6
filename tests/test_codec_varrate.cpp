#include "tests/test_support.h"

#include <algorithm>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/anchors.h"
#include "codec/codec_json.h"
#include "codec/footprint.h"
#include "codec/methods/varrate_method.h"
#include "codec/registry.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

SyntheticShape small_shape(int64_t n_tokens = 512) {
    SyntheticShape s;
    s.n_kv_head = 2;
    s.n_head = 4;
    s.head_dim = 16;  // D = 64
    s.n_tokens = n_tokens;
    return s;
}

// Codec settings for the synthetic D = 64 captures: the defaults' stride 16 and window 64 (512 tokens leave
// room for them), R = D and a floor of 4.
CodecSettings synthetic_settings(double kappa = 0.3) {
    CodecSettings s;
    s.budget = kappa;
    s.r_min = 4;
    s.rank = 64;
    s.precise_timing = false;
    return s;
}

// Bits of the smallest unsigned field that holds `n` distinct values 0 .. n - 1 (at least 1).
using test::bits_for_values;
using test::expected_metadata_bytes;

// The smallest feasible kappa, computed independently of the codec: exact tokens at D scalars, coded
// tokens at r_min, plus the packed anchor sets and ranks (charged), over L*D scalars, rounded up to 1e-4.
double expected_min_kappa(int64_t L, int64_t D, int64_t stride, int64_t window, int64_t c, int64_t r_min,
                          int64_t elem, int64_t R) {
    int64_t n_exact = 0;
    for (int64_t t = 0; t < L; ++t) n_exact += (t % stride == 0 || t >= L - window) ? 1 : 0;
    const int64_t n_coded = L - n_exact, n_anchors = (L + stride - 1) / stride;
    const int64_t index_scalars =
        (expected_metadata_bytes(n_coded, n_anchors, c, R, false) + elem - 1) / elem;
    const int64_t need = n_exact * D + r_min * n_coded + index_scalars;
    return std::ceil(static_cast<double>(need) / static_cast<double>(L * D) * 1e4) / 1e4;
}

}  // namespace

class TestCodecVarRate : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void ranksSumToBudgetWithinBounds() {
        auto basis = random_basis(3, 64, 64, 16, 4, 1);
        for (double kappa : {0.3, 0.4, 0.6, 0.8}) {
            auto m = make_method("varrate", synthetic_settings(kappa), basis);
            for (int64_t layer = 0; layer < 3; ++layer) {
                LayerResult r = m->compress(synthetic_capture(small_shape(), 100 + layer, layer));
                const LayerDiagnostics& d = r.diagnostics;
                QCOMPARE(d.sum_ranks, d.budget_B);
                const at::Tensor coded_ranks = d.rank.masked_select(d.exact.logical_not());
                QCOMPARE(coded_ranks.numel(), d.n_coded);
                QCOMPARE(coded_ranks.sum().item<int64_t>(), d.budget_B);
                QVERIFY(d.min_rank >= 4 && coded_ranks.min().item<int64_t>() >= 4);
                QVERIFY(d.max_rank <= 64);
                QVERIFY(at::equal(d.rank.masked_select(d.exact),
                                  at::full({d.n_exact}, int64_t{64}, d.rank.options())));
                QCOMPARE(d.n_exact + d.n_coded, int64_t{512});
                QVERIFY(r.kv.keys.sizes().vec() == std::vector<int64_t>({2, 512, 16}));
            }
        }
    }

    // An analysis allocated more than once keeps every coded token's error at every rank (the live controls'
    // fast path): the second allocation reads its errors from that table instead of projecting, and must give
    // the projection's ranks and errors (to fp32 rounding) and, materialised, the same cache bit for bit —
    // in fp32 and bf16, with a complete basis (R = D) and a truncated one (R < D).
    void repeatedAllocationsReadTheErrorTable() {
        for (auto dtype : {at::kFloat, at::kBFloat16}) {
            for (int64_t rank : {int64_t{64}, int64_t{24}}) {
                const QString where = QString("%1 R=%2").arg(dtype == at::kFloat ? "fp32" : "bf16").arg(rank);
                auto basis = random_basis(1, 64, rank, 16, 4, 21);
                CodecSettings settings = synthetic_settings(0.3);
                settings.rank = rank;
                const LayerCapture cap = synthetic_capture(small_shape(), 23, 0, dtype);
                VarRateMethod varrate(settings, basis, RankAllocation::Salience);
                const auto analysis = varrate.analyse(cap);
                // A fresh analysis per budget never keeps a table: the reference.
                for (double kappa : {0.3, 0.3, 0.45, 0.35}) {
                    CodecSettings b = settings;
                    b.budget = kappa;
                    const LayerAllocation a = varrate.allocate(*analysis, b);
                    const LayerKV kv = varrate.materialise(cap, *analysis, a);
                    VarRateMethod m(settings, basis, RankAllocation::Salience);
                    const auto fresh = m.analyse(cap);
                    const LayerAllocation ref = m.allocate(*fresh, b);
                    QVERIFY2(ref.rank_groups.front().coefficients.defined(), qPrintable(where));
                    const LayerKV ref_kv = m.materialise(cap, *fresh, ref);
                    const LayerDiagnostics &x = a.diagnostics, &y = ref.diagnostics;
                    QVERIFY2(at::equal(x.rank, y.rank), qPrintable(where));
                    const double err = (x.rel_error - y.rel_error).abs().max().item<double>();
                    QVERIFY2(err <= 2e-6,
                             qPrintable(
                                 QString("%1 kappa %2: errors differ by %3").arg(where).arg(kappa).arg(err)));
                    QVERIFY2(std::abs(x.mean_rel_error - y.mean_rel_error) <= 1e-6, qPrintable(where));
                    QVERIFY2(at::equal(kv.keys, ref_kv.keys) && at::equal(kv.values, ref_kv.values),
                             qPrintable(where + " cache"));
                }
                // The table was used: the repeated allocations came without coefficients.
                CodecSettings b = settings;
                b.budget = 0.35;
                QVERIFY2(!varrate.allocate(*analysis, b).rank_groups.front().coefficients.defined(),
                         qPrintable(where));
            }
        }
    }

    // Min-max normalisation over the coded tokens makes the allocation depend on how the salience ranks and
    // spaces the tokens, not on its scale or offset: a positive scale and a shift of the same signal give the
    // same ranks and the same reconstruction, bit for bit.
    void affineSalienceGivesTheSameCode() {
        auto basis = random_basis(1, 64, 64, 16, 4, 2);
        for (auto dtype : {at::kFloat, at::kBFloat16}) {
            const LayerCapture cap = synthetic_capture(small_shape(), 5, 0, dtype);
            // Integers below 2^24, so 3 s + 7 and every step of the normalisation are exact in fp32.
            at::Generator gen = at::detail::createCPUGenerator(17);
            const at::Tensor s = at::randint(0, 1000, {512}, gen, at::TensorOptions().dtype(at::kFloat));
            VarRateMethod varrate(synthetic_settings(0.35), basis, RankAllocation::Salience);
            auto compress_with = [&](const at::Tensor& salience) {
                const auto analysis = varrate.analyse_with_salience(cap, salience);
                LayerAllocation allocation = varrate.allocate(*analysis, varrate.settings());
                LayerResult r;
                r.kv = varrate.materialise(cap, *analysis, allocation);
                r.diagnostics = std::move(allocation.diagnostics);
                return r;
            };
            const LayerResult a = compress_with(s);
            const LayerResult b = compress_with(s * 3 + 7);
            QVERIFY(at::equal(a.diagnostics.salience_norm, b.diagnostics.salience_norm));
            QVERIFY(at::equal(a.diagnostics.rank, b.diagnostics.rank));
            QVERIFY(at::equal(a.kv.keys, b.kv.keys));
            QVERIFY(at::equal(a.kv.values, b.kv.values));
            // Not a constant signal in disguise: the ranks spread, unlike flat's, at the same total less the
            // ranks' bits (flat stores none: its ranks follow from B).
            const LayerResult flat = make_method("flat", synthetic_settings(0.35), basis)->compress(cap);
            QVERIFY(flat.diagnostics.max_rank - flat.diagnostics.min_rank <= 1);
            QVERIFY2(
                a.diagnostics.max_rank - a.diagnostics.min_rank >= 2,
                qPrintable(QString("ranks %1..%2").arg(a.diagnostics.min_rank).arg(a.diagnostics.max_rank)));
            const LayerDiagnostics& da = a.diagnostics;
            const int64_t es = dtype == at::kFloat ? 4 : 2, n_anchors = (da.n_tokens + 15) / 16;
            auto meta_scalars = [&](bool uniform) {
                return (expected_metadata_bytes(da.n_coded, n_anchors, 4, 64, uniform) + es - 1) / es;
            };
            QCOMPARE(da.sum_ranks, da.budget_B);
            QCOMPARE(flat.diagnostics.sum_ranks, da.sum_ranks + meta_scalars(false) - meta_scalars(true));
            // A negative scale reverses the order: a different allocation.
            const LayerResult c = compress_with(1000 - s);
            QVERIFY(!at::equal(c.diagnostics.rank, a.diagnostics.rank));
        }
    }

    // A token that every window query attends to is salient: VarRate gives it more rank than flat's even
    // share, and so a smaller reconstruction error; it is among the layer's highest ranks.
    void plantedHighAttentionTokenGetsMoreRankAndLessError() {
        auto basis = random_basis(1, 64, 64, 16, 4, 10);
        LayerCapture cap = synthetic_capture(small_shape(), 81);
        const int64_t planted = 201;  // coded: not a multiple of the stride 16, before the window of 64
        // Every window query of head h is the planted token's (post-RoPE) key in h's KV group, scaled up.
        const int64_t n_head = cap.window_queries.size(0), n_rep = n_head / cap.keys.size(0);
        for (int64_t h = 0; h < n_head; ++h)
            cap.window_queries[h].copy_(
                (4.0 * cap.keys[h / n_rep][planted]).expand_as(cap.window_queries[h]));
        const LayerDiagnostics v =
            make_method("varrate", synthetic_settings(0.3), basis)->compress(cap).diagnostics;
        const LayerDiagnostics f =
            make_method("flat", synthetic_settings(0.3), basis)->compress(cap).diagnostics;
        QVERIFY(!v.exact[planted].item<bool>());
        const int64_t rv = v.rank[planted].item<int64_t>(), rf = f.rank[planted].item<int64_t>();
        const float ev = v.rel_error[planted].item<float>(), ef = f.rel_error[planted].item<float>();
        QVERIFY2(rv > rf, qPrintable(QString("rank varrate %1, flat %2").arg(rv).arg(rf)));
        QVERIFY2(ev < ef, qPrintable(QString("error varrate %1, flat %2").arg(ev).arg(ef)));
        QVERIFY2(rv >= v.max_rank - 1, qPrintable(QString("rank %1, layer max %2").arg(rv).arg(v.max_rank)));
        QVERIFY(v.salience[planted].item<float>() >=
                v.salience.narrow(0, 0, 512 - 64).max().item<float>() * 0.9f);
    }

    void exactTokensAreBitIdentical() {
        auto basis = random_basis(1, 64, 64, 16, 4, 3);
        for (auto dtype : {at::kFloat, at::kBFloat16}) {
            const LayerCapture cap = synthetic_capture(small_shape(300), 9, 0, dtype);
            LayerResult r = make_method("varrate", synthetic_settings(0.45), basis)->compress(cap);
            QCOMPARE(r.kv.keys.scalar_type(), dtype);
            const at::Tensor exact = make_anchor_layout(300, 16, 64).exact_pos;
            QVERIFY(at::equal(r.kv.keys.index_select(1, exact), cap.keys.index_select(1, exact)));
            QVERIFY(at::equal(r.kv.values.index_select(1, exact), cap.values.index_select(1, exact)));
            QVERIFY(at::equal(r.diagnostics.exact, make_anchor_layout(300, 16, 64).exact_mask));
            // Coded tokens did change.
            const at::Tensor coded = make_anchor_layout(300, 16, 64).coded_pos;
            QVERIFY(!at::equal(r.kv.values.index_select(1, coded), cap.values.index_select(1, coded)));
        }
    }

    void largerBudgetNeverIncreasesError() {
        auto basis = random_basis(1, 64, 64, 16, 4, 4);
        const LayerCapture cap = synthetic_capture(small_shape(), 21);
        for (const char* name : {"varrate", "flat"}) {
            double previous = 1e9;
            for (double kappa : {0.3, 0.4, 0.5, 0.6, 0.8, 0.95}) {
                const double err = make_method(name, synthetic_settings(kappa), basis)
                                       ->compress(cap)
                                       .diagnostics.mean_rel_error;
                QVERIFY2(
                    err <= previous + 1e-7,
                    qPrintable(QString("%1 kappa %2: %3 > %4").arg(name).arg(kappa).arg(err).arg(previous)));
                previous = err;
            }
        }
    }

    void fullRankReconstructsAndReRotates() {
        // kappa = 1 with indices outside B and R = D: every coded token at full rank.
        auto basis = random_basis(1, 64, 64, 16, 4, 5);
        CodecSettings s = synthetic_settings(1.0);
        s.paper_accounting = true;
        const LayerCapture cap = synthetic_capture(small_shape(), 31);
        LayerResult r = make_method("varrate", s, basis)->compress(cap);
        QCOMPARE(r.diagnostics.min_rank, int64_t{64});
        QVERIFY(r.diagnostics.mean_rel_error < 1e-5);
        QVERIFY(at::allclose(r.kv.values, cap.values, 1e-5, 1e-5));
        // Reconstructed pre-RoPE keys, re-rotated with the capture's tables, match the input post-RoPE keys.
        QVERIFY(at::allclose(r.kv.keys, cap.keys, 1e-5, 1e-5));
        QVERIFY(at::equal(r.kv.keys.index_select(1, make_anchor_layout(512, 16, 64).exact_pos),
                          cap.keys.index_select(1, make_anchor_layout(512, 16, 64).exact_pos)));
        // Re-rotation is not a no-op: the pre-RoPE keys differ from the post-RoPE ones away from position 0.
        QVERIFY(!at::allclose(cap.keys_pre_rope, cap.keys, 1e-3, 1e-3));
    }

    void anchorSearchMatchesBruteForce() {
        const LayerCapture cap = synthetic_capture(small_shape(200), 41);
        const at::Tensor z = joint_vectors(cap.keys_pre_rope, cap.values);
        const AnchorLayout layout = make_anchor_layout(200, 16, 64);
        const AnchorResiduals res = anchor_residuals(z, layout, 4, /*chunk=*/7);
        const at::Tensor zd = z.to(at::kDouble), anchors = zd.index_select(0, layout.anchor_pos);
        for (int64_t i = 0; i < layout.n_coded(); ++i) {
            const at::Tensor zt = zd[layout.coded_pos[i].item<int64_t>()];
            const at::Tensor dist = (anchors - zt).pow(2).sum(1);
            const at::Tensor best = std::get<1>(at::sort(dist, true, 0, false)).narrow(0, 0, 4);
            QVERIFY(at::equal(res.nearest[i], best));
            const at::Tensor mean = anchors.index_select(0, best).mean(0);
            QVERIFY(at::allclose(res.mean[i].to(at::kDouble), mean, 1e-5, 1e-5));
            QVERIFY(at::allclose(res.residual[i].to(at::kDouble), zt - mean, 1e-5, 1e-5));
        }
    }

    void infeasibleSettingsNameTheSmallestKappa() {
        auto basis = random_basis(1, 64, 64, 16, 4, 6);
        const LayerCapture cap = synthetic_capture(small_shape(512), 51);
        const std::string want = fmt::format("{:.4f}", expected_min_kappa(512, 64, 16, 64, 4, 4, 4, 64));
        for (double kappa : {0.05, 0.0, 1.5}) {
            const std::string msg = test::error_message(
                [&] { make_method("varrate", synthetic_settings(kappa), basis)->compress(cap); });
            QVERIFY2(msg.find("smallest feasible kappa") != std::string::npos, msg.c_str());
            QVERIFY2(msg.find(want) != std::string::npos, (msg + " / expected " + want).c_str());
        }
        // The smallest feasible kappa itself works, and its budget sits at the floor or just above.
        CodecSettings ok = synthetic_settings(std::stod(want));
        QVERIFY(make_method("flat", ok, basis)->compress(cap).diagnostics.min_rank >= 4);
        // Too short for anchors + window.
        const std::string shortmsg = test::error_message([&] {
            make_method("varrate", synthetic_settings(0.5), basis)
                ->compress(synthetic_capture(small_shape(60), 1));
        });
        QVERIFY2(shortmsg.find("too short") != std::string::npos, shortmsg.c_str());
        // A basis with fewer rows than R.
        auto thin = random_basis(1, 64, 32, 16, 4, 7);
        const std::string thinmsg = test::error_message(
            [&] { make_method("varrate", synthetic_settings(0.3), thin)->compress(cap); });
        QVERIFY2(thinmsg.find("32 rows") != std::string::npos, thinmsg.c_str());
        // R above D is clamped, not an error.
        CodecSettings wide = synthetic_settings(0.3);
        wide.rank = 4096;
        QCOMPARE(make_method("varrate", wide, basis)->compress(cap).diagnostics.max_rank <= 64, true);
    }

    void footprintMatchesKappa() {
        struct Case {
            int64_t n_kv, hd, L;
        };
        for (const Case& c : {Case{2, 16, 1200}, Case{4, 128, 1024}}) {  // D = 64 and D = 1024
            SyntheticShape shape;
            shape.n_kv_head = c.n_kv;
            shape.n_head = 2 * c.n_kv;
            shape.head_dim = c.hd;
            shape.n_tokens = c.L;
            const int64_t D = 2 * c.n_kv * c.hd;
            auto basis = random_basis(1, D, std::min<int64_t>(D, 512), 16, 4, 8);
            for (auto dtype : {at::kFloat, at::kBFloat16}) {
                const LayerCapture cap = synthetic_capture(shape, 61, 0, dtype);
                for (double kappa : {D == 64 ? 0.3 : 0.25, 0.4}) {
                    for (const char* name : {"varrate", "flat"}) {
                        CodecSettings s = synthetic_settings(kappa);
                        s.rank = 512;
                        s.r_min = 4;
                        const LayerDiagnostics d = make_method(name, s, basis)->compress(cap).diagnostics;
                        QVERIFY2(std::abs(d.footprint - kappa) < 1e-3 && d.footprint <= kappa + 1e-12,
                                 qPrintable(QString("%1 D=%2 kappa %3: %4")
                                                .arg(name)
                                                .arg(D)
                                                .arg(kappa)
                                                .arg(d.footprint)));
                        QCOMPARE(d.full_bytes, c.L * D * (dtype == at::kFloat ? 4 : 2));
                        const int64_t n_anchors = (c.L + s.stride - 1) / s.stride;
                        const int64_t meta = expected_metadata_bytes(
                            d.n_coded, n_anchors, 4, std::min<int64_t>(512, D), std::string(name) == "flat");
                        QCOMPARE(d.index_bits, bits_for_values(n_anchors));
                        QCOMPARE(d.set_bits, bits_for_values(test::anchor_set_count(n_anchors, 4)));
                        QCOMPARE(d.rank_bits, std::string(name) == "flat"
                                                  ? int64_t{0}
                                                  : int64_t{bits_for_values(std::min<int64_t>(512, D) + 1)});
                        QCOMPARE(d.stored_bytes,
                                 (d.n_exact * D + d.sum_ranks) * (dtype == at::kFloat ? 4 : 2) + meta);
                        s.paper_accounting = true;  // indices outside B: slightly above kappa
                        const LayerDiagnostics p = make_method(name, s, basis)->compress(cap).diagnostics;
                        const double index_share = static_cast<double>(meta) / p.full_bytes;
                        QVERIFY(p.footprint > kappa);
                        QVERIFY(std::abs(p.footprint - (kappa + index_share)) < 1e-3);
                    }
                }
            }
        }
        CodecSettings s;
        s.stride = 2;
        s.budget = 0.8;
        s.window = 0;
        // 35000 anchors need 16-bit indices, 70000 need 17; the widths follow the anchor count, not a type.
        QCOMPARE(plan_codec_budget(s, 70000, 64, 2).index_bits, int64_t{16});
        QCOMPARE(plan_codec_budget(s, 140000, 64, 2).index_bits, int64_t{17});
        QCOMPARE(plan_codec_budget(s, 140000, 64, 2).rank_bits,
                 bits_for_values(std::min<int64_t>(s.rank, 64) + 1));
    }

    void registryAndJson() {
        const std::vector<std::string> names = method_names();
        for (const std::string& name : std::vector<std::string>{"full",
                                                                "varrate",
                                                                "flat",
                                                                "varrate:random",
                                                                "varrate:shuffle",
                                                                "varrate:position",
                                                                "varrate:oracle",
                                                                "varrate:topk",
                                                                "varrate@kvzip",
                                                                "varrate-layers",
                                                                "varrate-layers@kvzip",
                                                                "varrate@expected-attention",
                                                                "varrate@tova",
                                                                "varrate@knorm",
                                                                "varrate-rare",
                                                                "snapkv",
                                                                "pyramidkv",
                                                                "adakv",
                                                                "streamingllm",
                                                                "expected-attention",
                                                                "kvzip",
                                                                "kivi2",
                                                                "kivi4"})
            QVERIFY2(std::count(names.begin(), names.end(), name) == 1,
                     name.c_str());  // no pinned list: each once
        QVERIFY(method_probe("varrate:oracle") == MethodProbe::Question);
        QVERIFY(method_probe("varrate@kvzip") == MethodProbe::Repeat &&
                method_probe("kvzip") == MethodProbe::Repeat);
        // Old names kept as aliases: they make the method they stand for, under the name asked for.
        QCOMPARE(registered_method_name("varrate-kvzip"), std::string("varrate@kvzip"));
        QCOMPARE(registered_method_name("varrate-kvzip-layers"), std::string("varrate-layers@kvzip"));
        QCOMPARE(registered_method_name("varrate-ea"), std::string("varrate@expected-attention"));
        QCOMPARE(std::count(names.begin(), names.end(), "varrate-kvzip"), 0L);
        QVERIFY(method_probe("varrate-kvzip") == MethodProbe::Repeat);
        QVERIFY(method_probe("varrate") == MethodProbe::None &&
                method_probe("varrate-ea") == MethodProbe::None &&
                method_probe("varrate-rare") == MethodProbe::None);
        QVERIFY(default_method_names() == (std::vector<std::string>{"full", "varrate", "flat", "snapkv"}));
        QVERIFY(method_needs_basis("varrate") && method_needs_basis("flat"));
        QVERIFY(!method_needs_basis("full") && !method_needs_basis("snapkv"));
        QVERIFY(test::error_message([] {
                    make_method("nope", CodecSettings{});
                }).find("full, varrate, flat, varrate:random") != std::string::npos);
        QVERIFY(test::error_message([] { make_method("varrate", CodecSettings{}); }).find("basis") !=
                std::string::npos);

        const LayerCapture cap = synthetic_capture(small_shape(), 71);
        LayerResult full = make_method("full", CodecSettings{})->compress(cap);
        QVERIFY(at::equal(full.kv.keys, cap.keys) && at::equal(full.kv.values, cap.values));
        QCOMPARE(full.diagnostics.footprint, 1.0);

        auto basis = random_basis(1, 64, 64, 16, 4, 9);
        LayerResult r = make_method("varrate", synthetic_settings(0.3), basis)->compress(cap);
        const nlohmann::json j = to_json(r.diagnostics, true);
        for (const char* k :
             {"layer", "budget_B", "sum_ranks", "n_exact", "n_coded", "min_rank", "max_rank", "mean_rank",
              "floor_share", "mean_rel_error", "stored_bytes", "full_bytes", "timing_ms"})
            QVERIFY2(j.contains(k), k);
        QCOMPARE(j["sum_ranks"].get<int64_t>(), r.diagnostics.budget_B);
        for (const char* k : {"anchor_search", "salience", "water_filling", "projection", "reconstruction"})
            QVERIFY2(j["timing_ms"].contains(k), k);
        QCOMPARE(j["rank"].size(), size_t{512});
        QVERIFY(r.diagnostics.salience.defined() && r.diagnostics.salience.size(0) == 512);
        const double mean_err = r.diagnostics.rel_error.mean().item<double>();
        QVERIFY(std::abs(mean_err - r.diagnostics.mean_rel_error) < 1e-6);
    }
};

QTEST_APPLESS_MAIN(TestCodecVarRate)
#include "test_codec_varrate.moc"

// Honest accounting: a basis fitted on the very context being compressed is charged to the budget (and
// the error when it cannot be, naming `varrate calibrate`), paper accounting leaves it uncharged,
// coefficients are reconstructed at cache precision, and contexts past the model's positions are warned
// about (ppl refuses them).
#include "tests/test_support.h"

#include <QProcess>

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/anchors.h"
#include "codec/codec_json.h"
#include "codec/footprint.h"
#include "codec/gemm.h"
#include "codec/methods/varrate_method.h"
#include "codec/synthetic.h"
#include "core/compare.h"
#include "core/session.h"
#include "models/device.h"

using namespace varrate;

using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

constexpr int64_t kL = 512, kD = 64;  // 2 KV heads x head_dim 16 x 2

LayerCapture capture(at::ScalarType dtype, uint64_t seed = 11) {
    SyntheticShape shape;
    shape.n_tokens = kL;
    shape.obs_window = 16;
    return synthetic_capture(shape, seed, 0, dtype);
}

// The same rows as `b`, marked as fitted on the context they compress (or not).
std::shared_ptr<const Basis> with_flag(const std::shared_ptr<const Basis>& b, bool self_calibrated) {
    BasisInfo info = b->info();
    info.self_calibrated = self_calibrated;
    std::vector<at::Tensor> layers;
    for (int64_t i = 0; i < b->n_layer(); ++i) layers.push_back(b->layer(i));
    return std::make_shared<const Basis>(info, layers);
}

std::shared_ptr<const Basis> file_basis() {
    return random_basis(1, kD, kD, 32, 4, /*seed=*/3);
}

LayerDiagnostics run(const CodecSettings& s, std::shared_ptr<const Basis> basis, const LayerCapture& cap,
                     RankAllocation alloc = RankAllocation::Uniform) {
    VarRateMethod m(s, std::move(basis), alloc);
    return m.compress(cap).diagnostics;
}

std::string infeasible_message(const CodecSettings& s, std::shared_ptr<const Basis> basis,
                               const LayerCapture& cap) {
    try {
        run(s, std::move(basis), cap);
    } catch (const InfeasibleBudget& e) {
        return e.what();
    }
    return "";
}

// The stories260k texts committed for calibration and evaluation, joined: longer than its 512 positions.
std::string long_text() {
    const auto dir = test::source_dir() / "resources" / "eval" / "stories260k";
    return read_text_file(dir / "calib_a.txt") + "\n" + read_text_file(dir / "calib_b.txt") + "\n" +
           read_text_file(dir / "eval.txt");
}

}  // namespace

class TestCodecAccounting : public QObject {
    Q_OBJECT
    std::unique_ptr<Session> session_;

    Session* session() {
        if (!session_) {
            const auto dir = test::fixture("stories260k");
            if (dir.empty()) return nullptr;
            RuntimeOptions o;
            o.threads = configure_threads(2);
            session_ = Session::open(dir, o);
        }
        return session_.get();
    }

  private Q_SLOTS:
    // A self-calibrated basis costs R x D scalars per layer at cache precision: B shrinks by exactly that,
    // the stored bytes include it and the footprint stays <= kappa (within one scalar of it).
    void selfCalibratedBasisIsCharged_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<int>("alloc");
        QTest::newRow("fp32 flat") << int(at::kFloat) << int(RankAllocation::Uniform);
        QTest::newRow("bf16 flat") << int(at::kBFloat16) << int(RankAllocation::Uniform);
        QTest::newRow("fp32 varrate") << int(at::kFloat) << int(RankAllocation::Salience);
    }
    void selfCalibratedBasisIsCharged() {
        QFETCH(int, dtype);
        QFETCH(int, alloc);
        const auto t = static_cast<at::ScalarType>(dtype);
        const auto a = static_cast<RankAllocation>(alloc);
        const LayerCapture cap = capture(t);
        const CodecSettings s = test::small_codec_settings(0.4);
        const int64_t es = element_size(t);
        const LayerDiagnostics file = run(s, with_flag(file_basis(), false), cap, a);
        const LayerDiagnostics self = run(s, with_flag(file_basis(), true), cap, a);

        QCOMPARE(file.basis_bytes, int64_t{0});
        QCOMPARE(self.basis_bytes, kD * kD * es);
        QVERIFY(file.budget_B < kD * file.n_coded);  // neither plan is capped at R per token
        QCOMPARE(self.budget_B, file.budget_B - kD * kD);
        QCOMPARE(self.sum_ranks, self.budget_B);
        QVERIFY(self.mean_rank < file.mean_rank);
        // Each coded token's anchor set as one packed number and, unless flat, its rank in [0, R].
        const int64_t n_anchors = (kL + s.stride - 1) / s.stride;
        const int64_t index = test::expected_metadata_bytes(
            self.n_coded, n_anchors, s.anchors, std::min<int64_t>(s.rank, kD), a == RankAllocation::Uniform);
        QCOMPARE(self.stored_bytes, (self.n_exact * kD + self.sum_ranks) * es + index + self.basis_bytes);
        const int64_t total = static_cast<int64_t>(std::floor(s.budget * kL * kD + 1e-6));
        QVERIFY2(
            self.stored_bytes <= total * es && self.stored_bytes > (total - 1) * es,
            qPrintable(
                QString("stored %1 bytes for a budget of %2 scalars").arg(self.stored_bytes).arg(total)));
        QVERIFY(self.footprint <= s.budget);
        QCOMPARE(to_json(self)["basis_bytes"].get<int64_t>(), self.basis_bytes);
    }

    // Where the charged basis leaves no room, the error says so, names the smallest feasible kappa (which
    // is feasible, and one step below it is not) and gives the `varrate calibrate` command.
    // The per-token metadata (an anchor set and a rank) costs the same bytes in every cache dtype, so it
    // takes twice the scalars of a bf16 cache that it takes of an fp32 one. The demo model's layer (L 1024,
    // D 128, stride 32, c 4, window 16, r_min 2, R 128) at kappa 0.1:
    //  - charged as int16 (two bytes per index and rank, the store's first format), bf16 had 2.1 coefficients
    //    per coded token, everything at the floor r_min = 2: VarRate became flat and lost the needle;
    //  - with the anchor set as one number (16 bits for C(32, 4) = 35960 sets, not 4 x 5) and flat's uniform
    //    ranks not stored, flat keeps 6 coefficients per token in bf16 as in fp32 (with c ordinals and every
    //    rank stored it had 5.4 against 6.3, and lost the needle between rank 5 and 6).
    void bf16MetadataLeavesRoomAboveTheFloor() {
        CodecSettings s;
        s.budget = 0.1;
        s.r_min = 2;
        s.rank = 128;
        s.stride = 32;
        s.anchors = 4;
        s.window = 16;
        const CodecBudget fp32 = plan_codec_budget(s, 1024, 128, 4),
                          bf16 = plan_codec_budget(s, 1024, 128, 2);
        QCOMPARE(fp32.n_coded, int64_t{976});  // 1024 - 32 anchors - 16 window tokens
        QCOMPARE(fp32.n_anchors, int64_t{32});
        QCOMPARE(test::anchor_set_count(32, 4), int64_t{35960});
        // A 16-bit anchor set and an 8-bit rank (0..128) per coded token: 24 bits, 2928 bytes.
        QCOMPARE(fp32.set_bits, int64_t{16});
        QCOMPARE(fp32.index_total_bytes(), int64_t{976 * 16 / 8 + 976});
        QCOMPARE(bf16.index_total_bytes(), fp32.index_total_bytes());
        const double per_fp32 = static_cast<double>(fp32.budget_B) / 976,
                     per_bf16 = static_cast<double>(bf16.budget_B) / 976;
        qInfo("VarRate's coefficients per coded token at kappa 0.1: fp32 %.2f, bf16 %.2f", per_fp32,
              per_bf16);
        QVERIFY2(per_bf16 > 0.8 * per_fp32, qPrintable(QString::number(per_bf16)));
        QVERIFY2(per_bf16 > s.r_min + 3.0, qPrintable(QString::number(per_bf16)));

        // Flat: the anchor sets alone (1952 bytes); its ranks follow from B.
        const CodecBudget flat32 = plan_codec_budget(s, 1024, 128, 4, "flat", false, true),
                          flat16 = plan_codec_budget(s, 1024, 128, 2, "flat", false, true);
        QCOMPARE(flat32.rank_bits, int64_t{0});
        QCOMPARE(flat16.index_total_bytes(), int64_t{976 * 16 / 8});
        const int64_t total = 13107;  // floor(0.1 * 1024 * 128)
        QCOMPARE(flat32.budget_B, total - (1024 - 976) * 128 - 1952 / 4);
        QCOMPARE(flat16.budget_B, total - (1024 - 976) * 128 - 1952 / 2);
        qInfo("flat's coefficients per coded token at kappa 0.1: fp32 %.2f, bf16 %.2f",
              static_cast<double>(flat32.budget_B) / 976, static_cast<double>(flat16.budget_B) / 976);
        QCOMPARE(flat16.budget_B / 976, int64_t{6});  // every coded token at rank 6 or 7 in both dtypes
        QCOMPARE(flat32.budget_B / 976, int64_t{6});
    }

    void infeasibleBasisNamesCalibrate() {
        const LayerCapture cap = capture(at::kFloat);
        CodecSettings s = test::small_codec_settings(0.2);
        QVERIFY(run(s, with_flag(file_basis(), false), cap).footprint <= 0.2);  // only the basis is too much
        const std::string m = infeasible_message(s, with_flag(file_basis(), true), cap);
        QVERIFY2(!m.empty(), "kappa 0.2 with a self-calibrated 64 x 64 basis at L=512 was accepted");
        const CodecBudget plan = plan_codec_budget(test::small_codec_settings(1.0), kL, kD, 4, "flat", true,
                                                   /*uniform_ranks=*/true);
        for (const std::string& needle :
             {std::string("varrate calibrate --model MODEL_DIR --text-file"), std::string("--rank 64"),
              std::string("--stride 32"), std::string("--anchors 4"), std::string("--window 16"),
              std::string("--out MODEL_DIR/varrate-basis.safetensors"),
              std::string("basis fitted on this very context"),
              fmt::format("{:.4f}", plan.min_feasible_budget),
              fmt::format("{:.4f}", plan.min_feasible_uncharged)})
            QVERIFY2(m.find(needle) != std::string::npos,
                     qPrintable(QString::fromStdString("'" + needle + "' not in: " + m)));
        QVERIFY(plan.min_feasible_budget > 0.2 && plan.min_feasible_uncharged < 0.2);

        s.budget = plan.min_feasible_budget;
        const LayerDiagnostics at_min = run(s, with_flag(file_basis(), true), cap);
        QVERIFY(at_min.footprint <= s.budget);
        // The floor alone is left to the coded tokens (up to the 1e-4 rounding of kappa: < 4 scalars here).
        QVERIFY(at_min.budget_B >= s.r_min * at_min.n_coded &&
                at_min.budget_B < s.r_min * at_min.n_coded + 4);
        s.budget = plan.min_feasible_budget - 1e-4;
        QVERIFY(!infeasible_message(s, with_flag(file_basis(), true), cap).empty());
    }

    // --paper-accounting charges neither indices nor the basis: the plan is the calibrated file's, and
    // runs are labelled "basis not charged".
    void paperAccountingLeavesBasisUncharged() {
        const LayerCapture cap = capture(at::kFloat);
        CodecSettings s = test::small_codec_settings(0.2);
        s.paper_accounting = true;
        const LayerDiagnostics self = run(s, with_flag(file_basis(), true), cap);
        const LayerDiagnostics file = run(s, with_flag(file_basis(), false), cap);
        QCOMPARE(self.basis_bytes, int64_t{0});
        QCOMPARE(self.budget_B, file.budget_B);
        QCOMPARE(self.stored_bytes, file.stored_bytes);
        QVERIFY(self.footprint > s.budget);  // the indices are outside the budget, as in the paper
        QCOMPARE(basis_accounting("varrate", true, s), std::string("basis not charged"));
        QCOMPARE(basis_accounting("flat", true, test::small_codec_settings(0.2)),
                 std::string("basis charged"));
        QCOMPARE(basis_accounting("varrate", false, test::small_codec_settings(0.2)),
                 std::string("basis file"));
        QCOMPARE(basis_accounting("snapkv", false, s), std::string("no basis"));
    }

    // Coefficients are stored at cache precision: a bf16 cache is reconstructed from bf16-rounded
    // coefficients, bit for bit what decoding the stored coefficients gives, and not what fp32 ones give.
    void coefficientsRoundedToCacheDtype() {
        const LayerCapture cap = capture(at::kBFloat16);
        const CodecSettings s = test::small_codec_settings(0.4);
        const auto basis = with_flag(file_basis(), false);
        VarRateMethod m(s, basis, RankAllocation::Salience);
        const LayerResult r = m.compress(cap);

        const AnchorLayout layout = make_anchor_layout(kL, s.stride, s.window);
        const at::Tensor coded = layout.coded_pos;
        const at::Tensor z = joint_vectors(cap.keys_pre_rope, cap.values);
        const AnchorResiduals res =
            anchor_residuals(z, layout, s.anchors, 2048, /*with_mean=*/true, /*onednn_gemm=*/true);
        const at::Tensor V = basis->layer(0).contiguous();                   // [R, D] fp32
        const at::Tensor ranks = r.diagnostics.rank.index_select(0, coded);  // [n_coded]
        const at::Tensor mask = at::arange(kD, ranks.options()).unsqueeze(0) < ranks.unsqueeze(1);
        // A bf16 runtime projects with its fp32 GEMM on oneDNN and reconstructs with a bf16 GEMM (the basis
        // held in bf16, the product rounded to bf16 before z-bar is added).
        at::Tensor coeff = at::empty({coded.size(0), V.size(0)});  // [n_coded, R] fp32
        gemm_out(coeff, res.residual, V.t(), 0.0, 1.0, /*onednn=*/true);
        const at::Tensor stored = coeff.to(at::kBFloat16);  // what a store holds
        const at::Tensor cos = cap.rope_cos.index_select(0, coded).to(at::kFloat);
        const at::Tensor sin = cap.rope_sin.index_select(0, coded).to(at::kFloat);
        // Where the CPU has no bf16 matmul, the codec multiplies the same bf16 operands in fp32 and rounds
        // the product once (LibTorch's fallback bf16 matmul loses precision): summed in another order than
        // here, so equal up to a rare last-bit difference instead of bit for bit.
        const bool native_bf16 = cpu_has_bf16_matmul();
        auto decode = [&](const at::Tensor& c, bool bf16_gemm) {  // -> keys, values [G, n_coded, hd] bf16
            const at::Tensor masked = c.to(at::kFloat) * mask;
            const at::Tensor cb = masked.to(at::kBFloat16), vb = V.to(at::kBFloat16);
            const at::Tensor product =
                native_bf16 ? cb.mm(vb) : cb.to(at::kFloat).mm(vb.to(at::kFloat)).to(at::kBFloat16);
            const at::Tensor z_hat = bf16_gemm ? res.mean + product : at::addmm(res.mean, masked, V);
            const at::Tensor parts = z_hat.view({coded.size(0), 2, 2, 16}).permute({1, 2, 0, 3});
            return std::make_pair(apply_rope(parts[0], cos, sin).to(at::kBFloat16),
                                  parts[1].to(at::kBFloat16));
        };
        const auto [keys, values] = decode(stored, true);
        const at::Tensor got_k = r.kv.keys.index_select(1, coded), got_v = r.kv.values.index_select(1, coded);
        const auto [k32, v32] = decode(coeff, false);
        auto max_diff = [](const at::Tensor& a, const at::Tensor& b) {
            return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
        };
        if (native_bf16) {
            QVERIFY(at::equal(got_k, keys));
            QVERIFY(at::equal(got_v, values));
        } else {
            // Within one bf16 step of the largest entry, and closer to the bf16-coefficient decode than to
            // the fp32-coefficient one.
            QVERIFY(max_diff(got_k, keys) <= std::ldexp(keys.abs().max().item<double>(), -7));
            QVERIFY(max_diff(got_v, values) <= std::ldexp(values.abs().max().item<double>(), -7));
            QVERIFY2(
                max_diff(got_k, keys) + max_diff(got_v, values) < max_diff(got_k, k32) + max_diff(got_v, v32),
                "the bf16 reconstruction is no closer to the bf16-coefficient decode than to the fp32 one");
        }
        QVERIFY2(!at::equal(got_v, v32) || !at::equal(got_k, k32),
                 "bf16 reconstruction equals the one from fp32 coefficients: rounding had no effect");
    }

    void positionsWarningNamesBothNumbers() {
        ModelConfig c;
        c.max_position_embeddings = 512;
        QVERIFY(positions_warning(c, 512, "the context").empty());
        const std::string w = positions_warning(c, 600, "the context (600 tokens)");
        for (const char* needle :
             {"the context (600 tokens)", "600 positions", "max_position_embeddings of 512"})
            QVERIFY2(w.find(needle) != std::string::npos, w.c_str());

        Session* s = session();
        if (!s) QSKIP("reference fixture stories260k not found (set VARRATE_SHARED_DIR)");
        CompareRequest req;
        req.context = long_text();
        req.methods = {"full"};
        req.questions = {"Who was there?"};
        req.max_new_tokens = 2;
        const CompareResult r = run_compare(*s, req);
        QCOMPARE(r.warnings.size(), size_t{1});
        QVERIFY2(r.warnings[0].find("max_position_embeddings of 512") != std::string::npos,
                 r.warnings[0].c_str());
        req.context = read_text_file(test::source_dir() / "resources/eval/stories260k/calib_b.txt");  // 454
        const CompareResult fits = run_compare(*s, req);
        QVERIFY2(fits.warnings.empty(), fits.warnings.empty() ? "" : fits.warnings[0].c_str());
    }

    // `varrate ppl` (and run_perplexity) refuse a text past the model's positions unless allowed.
    void pplRefusesBeyondPositions() {
        Session* s = session();
        if (!s) QSKIP("reference fixture stories260k not found (set VARRATE_SHARED_DIR)");
        PplRequest req;
        req.ids = s->tokenizer().encode(long_text(), true);
        QVERIFY(static_cast<int64_t>(req.ids.size()) > s->model().config().max_position_embeddings);
        req.prefix_tokens = 100;
        req.methods = {"full"};
        try {
            run_perplexity(*s, req);
            QFAIL("a text past max_position_embeddings was scored");
        } catch (const Error& e) {
            const std::string m = e.what();
            QVERIFY2(m.find("--allow-beyond-positions") != std::string::npos, m.c_str());
            QVERIFY2(m.find(fmt::format("{} positions", req.ids.size())) != std::string::npos, m.c_str());
        }
        req.allow_beyond_positions = true;
        const auto runs = run_perplexity(*s, req);
        QCOMPARE(runs.size(), size_t{1});
        QVERIFY(std::isfinite(runs[0].ppl));

        const auto tmp = test::temp_dir("accounting-ppl");
        write_file_atomic(tmp / "long.txt", long_text());
        const QStringList args{"ppl",
                               "--model",
                               QString::fromStdString(test::fixture("stories260k").string()),
                               "--text-file",
                               QString::fromStdString((tmp / "long.txt").string()),
                               "--prefix-tokens",
                               "100",
                               "--methods",
                               "full",
                               "--threads",
                               "2"};
        const CliResult refused = run_varrate(args);
        QVERIFY(refused.exit_code > 0);
        QVERIFY2(refused.err.contains("--allow-beyond-positions"), qPrintable(refused.err));
        const CliResult allowed = run_varrate(QStringList(args) << "--allow-beyond-positions");
        QVERIFY2(allowed.exit_code == 0, qPrintable(allowed.err));
        QVERIFY2(allowed.err.contains("max_position_embeddings of 512"), qPrintable(allowed.err));
    }

    // On the fixture without a basis file: kappa 0.5 charges the self-calibrated basis inside a footprint
    // <= 0.5; kappa 0.2 cannot hold it and says to calibrate.
    void fixtureSelfCalibratedCompare() {
        Session* s = session();
        if (!s) QSKIP("reference fixture stories260k not found (set VARRATE_SHARED_DIR)");
        QVERIFY(s->basis() == nullptr);
        CompareRequest req;
        req.context = read_text_file(test::source_dir() / "resources/eval/stories260k/eval.txt");
        req.methods = {"varrate", "flat", "snapkv"};
        req.settings = test::small_codec_settings(0.5);
        const CompareResult r = run_compare(*s, req);
        const int64_t layers = s->model().config().n_layer;
        for (const MethodRun& m : r.runs) {
            QVERIFY2(m.footprint_fraction <= 0.5, qPrintable(QString::fromStdString(m.method)));
            if (m.method == "snapkv") {
                QCOMPARE(m.basis_bytes, int64_t{0});
                continue;
            }
            QCOMPARE(m.basis_bytes, layers * kD * kD * 4);
            QCOMPARE(m.basis_accounting, std::string("basis charged"));
        }
        const nlohmann::json j = to_json(r, req);
        QCOMPARE(j["methods"][0]["basis_bytes"].get<int64_t>(), layers * kD * kD * 4);
        QCOMPARE(j["methods"][0]["layers"][0]["basis_bytes"].get<int64_t>(), kD * kD * 4);

        req.settings.budget = 0.2;
        try {
            run_compare(*s, req);
            QFAIL("kappa 0.2 with a self-calibrated basis was accepted on the fixture");
        } catch (const InfeasibleBudget& e) {
            QVERIFY2(std::string(e.what()).find("`varrate calibrate") != std::string::npos, e.what());
        }
        req.settings.paper_accounting = true;
        const CompareResult paper = run_compare(*s, req);
        QCOMPARE(paper.runs[0].basis_bytes, int64_t{0});
        QCOMPARE(paper.runs[0].basis_accounting, std::string("basis not charged"));
        QCOMPARE(to_json(paper, req)["methods"][0]["basis_accounting"].get<std::string>(),
                 std::string("basis not charged"));
    }
};

QTEST_GUILESS_MAIN(TestCodecAccounting)
#include "test_codec_accounting.moc"

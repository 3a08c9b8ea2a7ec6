#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "codec/anchors.h"
#include "codec/basis.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "models/safetensors.h"

using namespace varrate;

namespace {

// A capture whose joint vectors z_t = U a_t + mu lie in a k-dimensional affine subspace spanned by U.
LayerCapture low_rank_capture(const at::Tensor& U, int64_t n_tokens, uint64_t seed, int64_t layer) {
    SyntheticShape shape;
    shape.n_kv_head = 2;
    shape.n_head = 4;
    shape.head_dim = 16;
    shape.n_tokens = n_tokens;
    LayerCapture cap = synthetic_capture(shape, seed, layer);
    at::Generator gen = at::detail::createCPUGenerator(seed + 1000);
    const at::Tensor a =
        at::normal(0.0, 1.0, {n_tokens, U.size(1)}, gen, at::TensorOptions().dtype(at::kDouble));
    const at::Tensor mu = at::normal(0.0, 3.0, {1, U.size(0)}, gen, at::TensorOptions().dtype(at::kDouble));
    const at::Tensor z = (a.mm(U.t()) + mu).to(at::kFloat);  // [L, 64]
    auto [k, v] = split_joint(z, 2, 16);
    cap.keys_pre_rope = k;
    cap.values = v;
    cap.keys = apply_rope(k, cap.rope_cos, cap.rope_sin);
    return cap;
}

}  // namespace

class TestCodecBasis : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void fileRoundTrip() {
        auto basis = random_basis(3, 64, 48, 16, 4, 1);
        BasisInfo info = basis->info();
        info.model_fingerprint = "llama-test:abc123";
        info.window = 64;
        info.calibration_tokens = 12345;
        info.self_calibrated = true;
        std::vector<at::Tensor> layers, spectra;
        for (int64_t i = 0; i < 3; ++i) {
            layers.push_back(basis->layer(i));
            spectra.push_back(at::linspace(10.0, 1.0, 64).to(at::kFloat));
        }
        const Basis b(info, layers, spectra);
        const auto path = test::temp_dir("basis") / "basis.safetensors";
        b.save(path);
        const Basis back = Basis::load(path, {"llama-test:abc123", 64, 16, 4});
        QCOMPARE(back.n_layer(), int64_t{3});
        QCOMPARE(back.info().model_fingerprint, std::string("llama-test:abc123"));
        QCOMPARE(back.info().dim, int64_t{64});
        QCOMPARE(back.info().rank, int64_t{48});
        QCOMPARE(back.info().stride, int64_t{16});
        QCOMPARE(back.info().anchors, int64_t{4});
        QCOMPARE(back.info().window, int64_t{64});
        QCOMPARE(back.info().calibration_tokens, int64_t{12345});
        QVERIFY(back.info().self_calibrated);
        for (int64_t i = 0; i < 3; ++i) {
            QVERIFY(at::equal(back.layer(i), b.layer(i)));
            QVERIFY(at::equal(back.spectrum(i), b.spectrum(i)));
        }
        QVERIFY(back.directions_for_energy(0, 0.5) > 0 && back.directions_for_energy(0, 0.99) <= 64);
    }

    void mismatchesAreClearErrors() {
        auto basis = random_basis(2, 64, 32, 16, 4, 2);
        BasisInfo info = basis->info();
        info.model_fingerprint = "model-A";
        const Basis b(info, {basis->layer(0), basis->layer(1)});
        const auto path = test::temp_dir("basis-mismatch") / "a.safetensors";
        b.save(path);
        const std::string file = path.string();
        EXPECT_ERROR(Basis::load(path, {"model-B", 0, 0, 0}), file, "model-A", "model-B");
        EXPECT_ERROR(Basis::load(path, {"model-A", 128, 0, 0}), file, "dim");
        EXPECT_ERROR(Basis::load(path, {"", 0, 32, 0}), file, "stride=16");
        EXPECT_ERROR(Basis::load(path, {"", 0, 0, 8}), file, "anchors");
        QCOMPARE(Basis::load(path, {"model-A", 64, 16, 4}).info().model_fingerprint, std::string("model-A"));
        // A codec configured with another stride refuses the basis.
        CodecSettings s;
        s.stride = 8;
        EXPECT_ERROR(make_method("varrate", s, std::make_shared<const Basis>(b)), "stride 16");
        // A safetensors file that is not a basis.
        const auto other = test::temp_dir("basis-other") / "x.safetensors";
        write_safetensors(other, {{"w", at::ones({2, 2})}}, {{"format", "pt"}});
        EXPECT_ERROR(Basis::load(other), "not a VarRate basis");
    }

    // A basis's description as JSON (the Python package's form) reads back field for field; a field of the
    // wrong type is an error naming it.
    void infoJsonRoundTrip() {
        BasisInfo info;
        info.model_fingerprint = "llama-4x256-00ff";
        info.dim = 128;
        info.rank = 64;
        info.stride = 32;
        info.anchors = 4;
        info.window = 16;
        info.calibration_tokens = 9000;
        info.self_calibrated = true;
        const BasisInfo back = basis_info_from_json(to_json(info), "test");
        QCOMPARE(back.model_fingerprint, info.model_fingerprint);
        QCOMPARE(back.dim, info.dim);
        QCOMPARE(back.rank, info.rank);
        QCOMPARE(back.stride, info.stride);
        QCOMPARE(back.anchors, info.anchors);
        QCOMPARE(back.window, info.window);
        QCOMPARE(back.calibration_tokens, info.calibration_tokens);
        QCOMPARE(back.self_calibrated, info.self_calibrated);
        nlohmann::json bad = to_json(info);
        bad["rank"] = "sixty-four";
        EXPECT_ERROR(basis_info_from_json(bad, "basis info"), "basis info", "rank");
    }

    void calibratorRecoversLowRankSubspace() {
        const int64_t k = 6;
        at::Generator gen = at::detail::createCPUGenerator(5);
        const at::Tensor U = std::get<0>(at::linalg_qr(
            at::normal(0.0, 1.0, {64, k}, gen, at::TensorOptions().dtype(at::kDouble)), "reduced"));
        CodecSettings s;
        BasisCalibrator cal(s, 2);
        for (uint64_t seed : {1, 2, 3})
            for (int64_t layer = 0; layer < 2; ++layer)
                cal.add(low_rank_capture(U, 400, seed * 10 + layer, layer));
        const int64_t coded = make_anchor_layout(400, 16, 64).n_coded();
        QCOMPARE(cal.tokens(0), 3 * coded);
        const Basis b = cal.finish(16, "synthetic-low-rank", false);
        QCOMPARE(b.info().rank, int64_t{16});
        QCOMPARE(b.info().calibration_tokens, 3 * coded);
        for (int64_t layer = 0; layer < 2; ++layer) {
            const at::Tensor V = b.layer(layer).to(at::kDouble);  // [16, 64]
            // Rows are orthonormal, and the leading k span U: ||V_k U||_F^2 = k.
            QVERIFY(at::allclose(V.mm(V.t()), at::eye(16, V.options()), 1e-5, 1e-5));
            const double captured = V.narrow(0, 0, k).mm(U).pow(2).sum().item<double>();
            QVERIFY2(std::abs(captured - k) < 1e-4, qPrintable(QString::number(captured)));
            // The spectrum: all energy in k directions.
            QCOMPARE(b.directions_for_energy(layer, 0.99), k);
            QVERIFY(b.spectrum(layer)[k].item<float>() < 1e-6f * b.spectrum(layer)[0].item<float>());
        }
        // And the codec with this basis reconstructs such data (rank >= k) almost exactly.
        CodecSettings cs;
        cs.rank = 16;
        cs.r_min = 8;
        cs.budget = 0.4;
        auto m = make_method("varrate", cs, std::make_shared<const Basis>(b));
        const LayerCapture cap = low_rank_capture(U, 400, 99, 1);
        const LayerResult r = m->compress(cap);
        QVERIFY2(r.diagnostics.mean_rel_error < 1e-4,
                 qPrintable(QString::number(r.diagnostics.mean_rel_error)));
        QVERIFY(at::allclose(r.kv.keys, cap.keys, 1e-3, 1e-3));
    }

    void calibratorRejectsBadInput() {
        CodecSettings s;
        BasisCalibrator cal(s, 1);
        QVERIFY_THROWS_EXCEPTION(Error, cal.finish(8, "x", false));
        SyntheticShape shape;
        shape.n_tokens = 50;
        QVERIFY_THROWS_EXCEPTION(Error, cal.add(synthetic_capture(shape, 1, 0)));
        shape.n_tokens = 300;
        QVERIFY_THROWS_EXCEPTION(Error, cal.add(synthetic_capture(shape, 1, 3)));  // layer out of range
    }

  private:
    static void write_safetensors_for_test(const std::filesystem::path& p);
};

#include "models/safetensors.h"

void TestCodecBasis::write_safetensors_for_test(const std::filesystem::path& p) {
    write_safetensors(p, {{"w", at::ones({2, 2})}}, {{"format", "pt"}});
}

QTEST_APPLESS_MAIN(TestCodecBasis)
#include "test_codec_basis.moc"

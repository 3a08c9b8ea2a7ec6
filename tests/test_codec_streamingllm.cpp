// StreamingLLM (codec/streamingllm_method.h), as kvpress's StreamingLLMPress: the first 4 tokens and the most
// recent int(L * kappa) - 4, the same for every KV head, checked against a literal loop; the cache physically
// shrinks to its footprint.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "codec/methods/streamingllm_method.h"
#include "codec/registry.h"
#include "codec/synthetic.h"

using namespace varrate;

class TestCodecStreamingLLM : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void keeps_sinks_and_recent_tokens() {
        SyntheticShape shape;
        shape.n_head = 8;
        shape.n_kv_head = 2;
        shape.head_dim = 16;
        shape.n_tokens = 997;
        const LayerCapture cap = synthetic_capture(shape, 41);
        for (double kappa : {0.1, 0.2, 0.5}) {
            CodecSettings s;
            s.budget = kappa;
            s.precise_timing = false;
            const LayerResult r = make_method("streamingllm", s)->compress(cap);
            // The literal rule: position t is kept when t < 4 or t >= L - (int(L kappa) - 4).
            const int64_t L = shape.n_tokens, kept = static_cast<int64_t>(static_cast<double>(L) * kappa);
            std::vector<int64_t> want;
            for (int64_t t = 0; t < L; ++t)
                if (t < 4 || t >= L - (kept - 4)) want.push_back(t);
            QCOMPARE(r.kv.keys.sizes().vec(), (std::vector<int64_t>{2, kept, 16}));
            const at::Tensor idx = at::tensor(want, at::kLong);
            QVERIFY(at::equal(r.kv.keys, cap.keys.index_select(1, idx)));
            QVERIFY(at::equal(r.kv.values, cap.values.index_select(1, idx)));
            const LayerDiagnostics& d = r.diagnostics;
            QVERIFY(std::abs(d.footprint - kappa) < 0.005);
            QCOMPARE(d.stored_bytes, kept * 64 * 4);
            QCOMPARE(d.exact.sum().item<int64_t>(), kept);
            QCOMPARE(d.rel_error[500].item<float>(), 1.0f);  // evicted: all of it lost
            QCOMPARE(d.rel_error[2].item<float>(), 0.0f);
        }
        CodecSettings tiny;
        tiny.budget = 0.004;
        EXPECT_ERROR(make_method("streamingllm", tiny)->compress(cap), "not more than the 4 sinks",
                     "smallest feasible kappa");
    }
};

QTEST_GUILESS_MAIN(TestCodecStreamingLLM)
#include "test_codec_streamingllm.moc"

#include "tests/test_support.h"

// Runtime vs the stories260k references produced by llama2.c run.c (real weights): logits at positions 0..15
// and 200 greedy tokens for each of the 3 prompts.
#include <ATen/ATen.h>

#include <fstream>

#include "base/error.h"
#include "models/device.h"
#include "models/generate.h"
#include "models/llama_model.h"

using namespace varrate;

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}

at::Tensor logits_row(const nlohmann::json& row) {
    const std::vector<float> v = row.get<std::vector<float>>();
    return at::tensor(v, at::kFloat);  // [vocab]
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

std::unique_ptr<LlamaModel> load_model(const std::filesystem::path& dir, c10::ScalarType dtype) {
    RuntimeOptions o;
    o.dtype = dtype;
    return LlamaModel::load(dir, o);
}

}  // namespace

class TestRuntimeReference : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() { configure_threads(0); }

    // The 15 prompt ids of sara_key in one batched prefill reproduce rows 0..14; the next step row 15.
    void batched_prefill_logits() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const nlohmann::json ref = read_json(dir / "expected_logits.json");
        auto model = load_model(dir, at::kFloat);
        for (const auto& c : ref["cases"]) {
            if (c["name"] != "sara_key") continue;
            const auto prompt = c["prompt_ids"].get<std::vector<int64_t>>();
            const auto inputs = c["input_ids"].get<std::vector<int64_t>>();
            QCOMPARE(prompt.size(), size_t(15));
            KVCache cache = model->new_cache();
            ForwardOptions fo;
            fo.all_logits = true;
            const at::Tensor logits = model->forward(prompt, cache, fo);  // [15, 512]
            QCOMPARE(logits.size(0), int64_t(15));
            QCOMPARE(logits.size(1), int64_t(512));
            double worst = 0;
            for (int64_t i = 0; i < 15; ++i)
                worst = std::max(worst, max_abs_diff(logits[i], logits_row(c["logits"][i])));
            qInfo("sara_key batched prefill: max |logit diff| rows 0..14 = %.3g", worst);
            QVERIFY2(worst < 1e-4, qPrintable(QString("max diff %1").arg(worst)));
            // Without all_logits only the last row comes back, and it is the same row.
            KVCache cache2 = model->new_cache();
            const at::Tensor last = model->forward(prompt, cache2);
            QCOMPARE(last.size(0), int64_t(1));
            QVERIFY(max_abs_diff(last[0], logits[14]) < 1e-5);
            const at::Tensor step = model->forward({inputs[15]}, cache);
            QVERIFY(max_abs_diff(step[0], logits_row(c["logits"][15])) < 1e-4);
            QCOMPARE(cache.next_position(), int64_t(16));
            QCOMPARE(cache.length(0), int64_t(16));
            return;
        }
        QFAIL("sara_key case missing from expected_logits.json");
    }

    // Feeding one token at a time through the cache reproduces every row of both cases.
    void incremental_logits() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const nlohmann::json ref = read_json(dir / "expected_logits.json");
        auto model = load_model(dir, at::kFloat);
        QCOMPARE(ref["cases"].size(), size_t(2));
        for (const auto& c : ref["cases"]) {
            const auto inputs = c["input_ids"].get<std::vector<int64_t>>();
            KVCache cache = model->new_cache();
            double worst = 0;
            for (size_t i = 0; i < inputs.size(); ++i) {
                const at::Tensor logits = model->forward({inputs[i]}, cache);  // [1, 512]
                const at::Tensor expected = logits_row(c["logits"][i]);
                worst = std::max(worst, max_abs_diff(logits[0], expected));
                QCOMPARE(logits[0].argmax().item<int64_t>(), c["argmax"][i].get<int64_t>());
            }
            qInfo("%s one token at a time: max |logit diff| = %.3g", c["name"].get<std::string>().c_str(),
                  worst);
            QVERIFY2(worst < 1e-4, qPrintable(QString("max diff %1").arg(worst)));
        }
    }

    void greedy_fp32_exact() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const nlohmann::json ref = read_json(dir / "expected_greedy.json");
        auto model = load_model(dir, at::kFloat);
        QCOMPARE(ref["cases"].size(), size_t(3));
        for (const auto& c : ref["cases"]) {
            const auto prompt = c["prompt_ids"].get<std::vector<int64_t>>();
            const auto expected = c["generated_ids"].get<std::vector<int64_t>>();
            QCOMPARE(expected.size(), size_t(200));
            for (int64_t chunk : {512, 4}) {  // batched prefill, and one split into chunks
                KVCache cache = model->new_cache();
                GenerateOptions go;
                go.max_new_tokens = 200;
                go.stop_ids = {2};
                go.prefill.chunk_size = chunk;
                std::vector<int64_t> streamed;
                go.on_token = [&](int64_t t) { streamed.push_back(t); };
                const GenerateResult r = generate_greedy(*model, cache, prompt, go);
                QCOMPARE(r.generated, expected);
                QCOMPARE(streamed, expected);
                QVERIFY(!r.stopped);
                // The cache holds the prompt and every generated token but the last.
                QCOMPARE(cache.next_position(), int64_t(prompt.size() + 199));
                QCOMPARE(cache.length(4), int64_t(prompt.size() + 199));
            }
        }
    }

    void greedy_stops_on_stop_id() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const nlohmann::json ref = read_json(dir / "expected_greedy.json");
        auto model = load_model(dir, at::kFloat);
        const auto& c = ref["cases"][0];
        const auto expected = c["generated_ids"].get<std::vector<int64_t>>();
        KVCache cache = model->new_cache();
        GenerateOptions go;
        go.max_new_tokens = 200;
        go.stop_ids = {expected[5]};  // pretend the 6th token ends the answer
        const GenerateResult r =
            generate_greedy(*model, cache, c["prompt_ids"].get<std::vector<int64_t>>(), go);
        QVERIFY(r.stopped);
        QCOMPARE(r.generated, std::vector<int64_t>(expected.begin(), expected.begin() + 6));
    }

    // bf16 weights and activations follow the fp32 path for a while and stay close in logits.
    void bf16_prefix_and_logits() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const nlohmann::json greedy = read_json(dir / "expected_greedy.json");
        const nlohmann::json ref = read_json(dir / "expected_logits.json");
        auto model = load_model(dir, at::kBFloat16);
        for (const auto& c : ref["cases"]) {
            KVCache cache = model->new_cache();
            const at::Tensor logits = model->forward({c["input_ids"][0].get<int64_t>()}, cache);
            QCOMPARE(logits.scalar_type(), at::kFloat);
            const at::Tensor expected = logits_row(c["logits"][0]);
            const double diff = max_abs_diff(logits[0], expected);
            const double cos = at::cosine_similarity(logits[0], expected, 0).item<double>();
            qInfo("bf16 %s position 0: max |logit diff| = %.3g, cosine %.6f",
                  c["name"].get<std::string>().c_str(), diff, cos);
            QVERIFY2(diff < 0.25, qPrintable(QString("bf16 max diff %1").arg(diff)));
            QVERIFY(cos > 0.999);
        }
        // bf16 logits are rounded to bf16 by the lm_head (as in HF), so near-ties (an fp32 gap of 0.13 at
        // logit 16 is one bf16 step) become exact ties that go to the lowest id: free-running paths drift
        // apart after a while (here after 200, 200 and 101 tokens, on LibTorch 1.13 and 2.6 alike), while
        // teacher-forced argmaxes stay almost all equal and teacher-forced logits within 1 % (relative L2) of
        // the fp32 runtime's (0.61-0.74 %). Where a free-running path parts is decided by which near-tie the
        // rounding tips, so it moves with the attention kernel: with 2.6's unfused math attention the three
        // parted after 20, 16 and 101 tokens at the same logit error.
        auto fp32_model = load_model(dir, at::kFloat);
        size_t total_prefix = 0;
        for (const auto& c : greedy["cases"]) {
            const auto prompt = c["prompt_ids"].get<std::vector<int64_t>>();
            const auto expected = c["generated_ids"].get<std::vector<int64_t>>();
            KVCache cache = model->new_cache();
            GenerateOptions go;
            go.max_new_tokens = 200;
            const GenerateResult r = generate_greedy(*model, cache, prompt, go);
            size_t same = 0;
            while (same < r.generated.size() && r.generated[same] == expected[same]) ++same;
            total_prefix += same;

            std::vector<int64_t> all = prompt;
            all.insert(all.end(), expected.begin(), expected.end());
            KVCache forced = model->new_cache();
            ForwardOptions fo;
            fo.all_logits = true;
            const at::Tensor forced_logits = model->forward(all, forced, fo);  // [n, vocab] fp32
            const at::Tensor argmax = forced_logits.argmax(1);                 // [n]
            int64_t agree = 0;
            for (size_t i = 0; i < expected.size(); ++i)
                agree += argmax[int64_t(prompt.size() + i - 1)].item<int64_t>() == expected[i];
            KVCache forced32 = fp32_model->new_cache();
            const at::Tensor logits32 = fp32_model->forward(all, forced32, fo);  // [n, vocab]
            const double rel = ((forced_logits - logits32).norm() / logits32.norm()).item<double>();
            qInfo(
                "bf16 %s: %zu of 200 greedy ids match the fp32 reference before diverging; teacher-forced "
                "argmax agrees on %ld of 200, logits within %.3f %% of fp32's",
                c["name"].get<std::string>().c_str(), same, static_cast<long>(agree), 100 * rel);
            QVERIFY2(same >= 10, qPrintable(QString("only %1 leading ids match").arg(same)));
            QVERIFY2(agree >= 190, qPrintable(QString("teacher-forced agreement %1 of 200").arg(agree)));
            QVERIFY2(rel < 0.01,
                     qPrintable(QString("teacher-forced bf16 logits %1 % off fp32's").arg(100 * rel)));
        }
        QVERIFY2(total_prefix >= 200,
                 qPrintable(QString("%1 leading ids match over 3 cases").arg(total_prefix)));
    }

    void load_errors_name_the_problem() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        RuntimeOptions o;
        o.dtype = at::kHalf;  // no fp16 matmul on the CPU
        EXPECT_ERROR(LlamaModel::load(dir, o), "fp16");
    }
};

QTEST_GUILESS_MAIN(TestRuntimeReference)
#include "test_models_runtime_reference.moc"

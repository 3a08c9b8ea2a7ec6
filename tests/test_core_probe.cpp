// The extra passes over a captured prefix (core/probe.h) and the prefill's query statistics, each against
// an independent path on the stories260k fixture: a plain prefill of prefix + probe ids whose last queries
// are captured, and attention weights computed by literal loops from its keys.
#include "tests/test_support.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "core/capture.h"
#include "core/compare.h"
#include "core/probe.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/rope.h"
#include "models/tokenizer/tokenizer.h"

using namespace varrate;

namespace {

// Softmax attention weights of query row i (post-RoPE, [hd]) over the keys `cols` of k [m, hd], by loops.
std::vector<double> weights(const at::Tensor& q, const at::Tensor& k, const std::vector<int64_t>& cols) {
    const int64_t hd = q.size(0);
    std::vector<double> logit(cols.size());
    double mx = -1e300;
    for (size_t c = 0; c < cols.size(); ++c) {
        double x = 0;
        for (int64_t i = 0; i < hd; ++i) x += q[i].item<double>() * k[cols[c]][i].item<double>();
        logit[c] = x / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, logit[c]);
    }
    double z = 0;
    for (double& x : logit) z += (x = std::exp(x - mx));
    for (double& x : logit) x /= z;
    return logit;
}

}  // namespace

class TestCoreProbe : public QObject {
    Q_OBJECT
    Session* fixture_ = nullptr;
    std::vector<int64_t> context_;

    bool need_fixture() {
        if (!fixture_) {
            fixture_ = test::shared_fixture_session();
            if (!fixture_) return false;
            const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
            context_ =
                build_prompt(fixture_->tokenizer(), greedy["cases"][0]["text"].get<std::string>(), "", false)
                    .context_ids;
            context_.resize(std::min<size_t>(context_.size(), 60));
        }
        return true;
    }

    // A prefill of ids keeping the last n queries: keys [G, m, hd] and queries [H, n, hd] (fp64, CPU).
    std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> independent(const std::vector<int64_t>& ids,
                                                                            int64_t n) {
        CodecSettings s;
        s.obs_window = n;
        const PrefillCapture cap = capture_prefill(fixture_->model(), ids, s, {}, 512, false);
        std::vector<at::Tensor> keys, queries;
        for (const LayerCapture& c : cap.layers) {
            keys.push_back(c.keys.to(at::kDouble));
            queries.push_back(c.window_queries.to(at::kDouble));
        }
        return {keys, queries};
    }

  private Q_SLOTS:
    void query_statistics_are_the_pre_rope_queries_moments() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const int64_t L = static_cast<int64_t>(context_.size());
        CodecSettings s;
        s.obs_window = L;  // every query, to recompute the statistics from
        for (int64_t chunk : {int64_t{512}, int64_t{16}}) {
            const PrefillCapture cap = capture_prefill(fixture_->model(), context_, s, {}, chunk, false);
            for (const LayerCapture& c : cap.layers) {
                const at::Tensor q =
                    unapply_rope(c.window_queries.to(at::kDouble), c.rope_cos.to(at::kDouble),
                                 c.rope_sin.to(at::kDouble));  // [H, L, hd] pre-RoPE
                const int64_t H = q.size(0), hd = q.size(2), n = L - kQueryStatsSkip;
                for (int64_t h = 0; h < H; h += H - 1)
                    for (int64_t i = 0; i < hd; i += 3) {
                        double mean_i = 0;
                        for (int64_t t = kQueryStatsSkip; t < L; ++t) mean_i += q[h][t][i].item<double>() / n;
                        QVERIFY(std::abs(c.query_mean[h][i].item<double>() - mean_i) < 1e-4);
                        double all_i = 0;  // query_mean_all: the first positions too
                        for (int64_t t = 0; t < L; ++t) all_i += q[h][t][i].item<double>() / L;
                        QVERIFY(std::abs(c.query_mean_all[h][i].item<double>() - all_i) < 1e-4);
                        for (int64_t j = 0; j < hd; j += 5) {
                            double mean_j = 0, cov = 0;
                            for (int64_t t = kQueryStatsSkip; t < L; ++t)
                                mean_j += q[h][t][j].item<double>() / n;
                            for (int64_t t = kQueryStatsSkip; t < L; ++t)
                                cov += (q[h][t][i].item<double>() - mean_i) *
                                       (q[h][t][j].item<double>() - mean_j) / n;
                            QVERIFY2(std::abs(c.query_cov[h][i][j].item<double>() - cov) <
                                         1e-4 * (1 + std::abs(cov)),
                                     qPrintable(QString("chunk %1 layer %2 head %3 (%4, %5)")
                                                    .arg(chunk)
                                                    .arg(c.layer)
                                                    .arg(h)
                                                    .arg(i)
                                                    .arg(j)));
                        }
                    }
            }
        }
    }

    void question_attention_is_the_questions_attention_over_the_prefix() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const int64_t L = static_cast<int64_t>(context_.size());
        const std::vector<int64_t> question = fixture_->tokenizer().encode(" Who was there?", false);
        const int64_t n = static_cast<int64_t>(question.size());
        CodecSettings s;
        s.obs_window = 16;
        PrefillCapture cap = capture_prefill(fixture_->model(), context_, s, {}, 512, false);
        add_question_attention(fixture_->model(), cap, question);
        std::vector<int64_t> all = context_;
        all.insert(all.end(), question.begin(), question.end());
        const auto [keys, queries] = independent(all, n);
        for (size_t l = 0; l < cap.layers.size(); ++l) {
            const at::Tensor& qa = cap.layers[l].question_attention;  // [H, L]
            const int64_t H = qa.size(0), G = keys[l].size(0);
            QCOMPARE(qa.size(1), L);
            for (int64_t h = 0; h < H; ++h) {
                std::vector<double> mean(L, 0.0);
                for (int64_t i = 0; i < n; ++i) {
                    std::vector<int64_t> cols;
                    for (int64_t t = 0; t <= L + i; ++t) cols.push_back(t);
                    const auto w = weights(queries[l][h][i], keys[l][h / (H / G)], cols);
                    for (int64_t t = 0; t < L; ++t) mean[t] += w[t] / n;
                }
                for (int64_t t = 0; t < L; ++t)
                    QVERIFY2(std::abs(qa[h][t].item<double>() - mean[t]) < 1e-5,
                             qPrintable(QString("layer %1 head %2 position %3").arg(l).arg(h).arg(t)));
            }
        }
    }

    // Compactor's non-causal attention: every query of [8, L - 4) against every key of that span (one chunk
    // here), logits unscaled, the chunk padded to 256 with zero queries and keys, by loops.
    void noncausal_attention_is_every_querys_unscaled_softmax_within_the_chunk() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const int64_t L = static_cast<int64_t>(context_.size());
        const int64_t begin = kNonCausalBegin, end = L - kNonCausalEnd, n = end - begin;
        const int64_t pad = kNonCausalChunk - n;
        QVERIFY(n > 0 && pad > 0);
        CodecSettings s;
        s.obs_window = 16;
        PrefillCapture cap = capture_prefill(fixture_->model(), context_, s, {}, 512, false);
        add_all_query_attention(fixture_->model(), cap, /*observed=*/false, /*noncausal=*/true);
        const auto [keys, queries] = independent(context_, L);
        for (size_t l = 0; l < cap.layers.size(); ++l) {
            QVERIFY(!cap.layers[l].observed_attention.defined());
            const at::Tensor& a = cap.layers[l].noncausal_attention;  // [H, L]
            const int64_t H = a.size(0), G = keys[l].size(0);
            QCOMPARE(a.size(1), L);
            for (int64_t h = 0; h < H; ++h) {
                const at::Tensor k = keys[l][h / (H / G)];
                // Each zero query spreads 1/256 over the chunk's keys.
                std::vector<double> sum(static_cast<size_t>(n), static_cast<double>(pad) / kNonCausalChunk);
                for (int64_t i = begin; i < end; ++i) {
                    std::vector<double> logit(static_cast<size_t>(n));
                    double mx = 0;  // the zero keys' logit
                    for (int64_t t = 0; t < n; ++t) {
                        double x = 0;
                        for (int64_t c = 0; c < k.size(1); ++c)
                            x += queries[l][h][i][c].item<double>() * k[begin + t][c].item<double>();
                        mx = std::max(mx, logit[static_cast<size_t>(t)] = x);
                    }
                    double z = static_cast<double>(pad) * std::exp(-mx);
                    for (double x : logit) z += std::exp(x - mx);
                    for (int64_t t = 0; t < n; ++t)
                        sum[static_cast<size_t>(t)] += std::exp(logit[static_cast<size_t>(t)] - mx) / z;
                }
                for (int64_t t = 0; t < L; ++t) {
                    const double want = t < begin || t >= end ? 0.0 : sum[static_cast<size_t>(t - begin)];
                    QVERIFY2(std::abs(a[h][t].item<double>() - want) < 1e-4 * (1 + want),
                             qPrintable(QString("layer %1 head %2 position %3: %4, expected %5")
                                            .arg(l)
                                            .arg(h)
                                            .arg(t)
                                            .arg(a[h][t].item<double>())
                                            .arg(want)));
                }
            }
        }
    }

    // kvpress finds the chat header and the turn's end by rendering a dummy content; the chat prompt's parts
    // start and end with them, and KVzip does not reconstruct that header.
    void chat_frame_is_the_header_and_the_turn_end() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        const Tokenizer tok = Tokenizer::load(llama3);
        const ChatFrame frame = chat_frame(tok);
        QCOMPARE(QString::fromStdString(tok.decode(frame.prefix_ids, false)),
                 QString("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"));
        QCOMPARE(QString::fromStdString(tok.decode(frame.suffix_ids, false)),
                 QString("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
        const PromptParts parts = build_prompt(tok, "Some context here.", "Which?", true);
        QVERIFY(std::equal(frame.prefix_ids.begin(), frame.prefix_ids.end(), parts.context_ids.begin()));
        QVERIFY(parts.question_ids.size() > frame.suffix_ids.size());
        QVERIFY(std::equal(frame.suffix_ids.rbegin(), frame.suffix_ids.rend(), parts.question_ids.rbegin()));
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        const Tokenizer qtok = Tokenizer::load(qwen3);
        QCOMPARE(QString::fromStdString(qtok.decode(chat_frame(qtok).prefix_ids, false)),
                 QString("<|im_start|>user\n"));
    }

    void repeat_scores_leave_the_chat_prefix_unscored() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const int64_t L = static_cast<int64_t>(context_.size());
        RepeatPrompt prompt = repeat_prompt(*fixture_, false);
        CodecSettings s;
        PrefillCapture cap = capture_prefill(fixture_->model(), context_, s, {}, 512, false);
        prompt.prefix_length = 7;
        add_repeat_scores(fixture_->model(), cap, prompt, {}, 25);
        for (const LayerCapture& c : cap.layers) {
            QCOMPARE(c.repeat_scores.narrow(1, 0, 7).abs().max().item<double>(), 0.0);
            QVERIFY(c.repeat_scores.narrow(1, 7, L - 7).min().item<double>() > 0.0);
        }
        prompt.prefix_length = L;
        QVERIFY_THROWS_EXCEPTION(Error, add_repeat_scores(fixture_->model(), cap, prompt, {}, 25));
    }

    void repeat_scores_follow_kvzip_chunk_by_chunk() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const int64_t L = static_cast<int64_t>(context_.size()), chunk = 25;  // chunks of 25, 25, 10
        const RepeatPrompt prompt = repeat_prompt(*fixture_, false);
        QVERIFY(!prompt.first.empty() && !prompt.later.empty() && !prompt.suffix.empty());
        CodecSettings s;
        s.obs_window = 16;
        PrefillCapture cap = capture_prefill(fixture_->model(), context_, s, {}, 512, false);
        add_repeat_scores(fixture_->model(), cap, prompt, {}, chunk);
        for (int64_t begin = 0; begin < L; begin += chunk) {
            const int64_t end = std::min(L, begin + chunk), sinks = std::min<int64_t>(4, begin);
            // The repeat ids as KVzip builds them, read after the whole context.
            std::vector<int64_t> repeat = begin == 0 ? prompt.first : prompt.later;
            if (begin > 0)
                repeat.insert(repeat.end(), context_.begin() + begin - 8, context_.begin() + begin);
            repeat.insert(repeat.end(), prompt.suffix.begin(), prompt.suffix.end());
            repeat.insert(repeat.end(), context_.begin() + begin, context_.begin() + end);
            const int64_t n = static_cast<int64_t>(repeat.size());
            std::vector<int64_t> all = context_;
            all.insert(all.end(), repeat.begin(), repeat.end());
            const auto [keys, queries] = independent(all, n);
            for (size_t l = 0; l < cap.layers.size(); ++l) {
                const int64_t H = queries[l].size(0), G = keys[l].size(0);
                for (int64_t g = 0; g < G; ++g) {
                    std::vector<double> best(end - begin, 0.0);
                    for (int64_t h = g * (H / G); h < (g + 1) * (H / G); ++h)
                        for (int64_t i = 0; i < n; ++i) {
                            std::vector<int64_t> cols;
                            for (int64_t t = 0; t < sinks; ++t) cols.push_back(t);
                            for (int64_t t = begin; t < end; ++t) cols.push_back(t);
                            for (int64_t t = 0; t <= i; ++t) cols.push_back(L + t);
                            const auto w = weights(queries[l][h][i], keys[l][g], cols);
                            for (int64_t t = 0; t < end - begin; ++t)
                                best[t] = std::max(best[t], w[sinks + t]);
                        }
                    for (int64_t t = 0; t < end - begin; ++t)
                        QVERIFY2(
                            std::abs(cap.layers[l].repeat_scores[g][begin + t].item<double>() - best[t]) <
                                1e-5,
                            qPrintable(QString("layer %1 head %2 position %3").arg(l).arg(g).arg(begin + t)));
                }
            }
        }
    }

    void compare_runs_the_probed_signals_in_both_modes() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        QVERIFY(probe_needs({"varrate:oracle"}).question && !probe_needs({"varrate:oracle"}).repeat);
        QVERIFY(probe_needs({"varrate-kvzip"}).repeat && !probe_needs({"varrate", "snapkv"}).any());
        QVERIFY(probe_needs({"varrate@observed-attention"}).observed && !probe_needs({"varrate@tova"}).any());
        QVERIFY(probe_needs({"compactor"}).noncausal && !probe_needs({"compactor"}).observed);
        const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
        CompareRequest req;
        req.context = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                      greedy["cases"][2]["text"].get<std::string>();
        req.questions = {"Who was in the story?"};
        req.methods = {"varrate",    "varrate:oracle",     "varrate-kvzip",
                       "varrate-ea", "expected-attention", "kvzip"};
        req.settings = test::small_codec_settings(0.35);
        req.max_new_tokens = 4;
        for (CompressionMode mode : {CompressionMode::QueryAgnostic, CompressionMode::QueryAware}) {
            req.mode = mode;
            const CompareResult r = run_compare(*fixture_, req);
            QCOMPARE(r.runs.size(), size_t{6});
            for (const MethodRun& run : r.runs) {
                QVERIFY2(run.infeasible.empty(), run.infeasible.c_str());
                QVERIFY2(std::abs(run.footprint_fraction - 0.35) < 0.005,
                         qPrintable(QString("%1: %2").arg(run.method.c_str()).arg(run.footprint_fraction)));
            }
            // The oracle and KVzip signals change the ranks (they read other attention than the window's).
            auto ranks = [&](const std::string& m) {
                for (const MethodRun& run : r.runs)
                    if (run.method == m) return run.layers.back().rank;
                return at::Tensor();
            };
            QVERIFY(!at::equal(ranks("varrate"), ranks("varrate:oracle")));
            QVERIFY(!at::equal(ranks("varrate"), ranks("varrate-kvzip")));
        }
        // Finch's window is the question when compare compresses it with the context: compare's kept sets
        // are those of a capture of the same ids marked with the question's length, not those of the window
        // that stands in without one.
        req.methods = {"finch"};
        req.mode = CompressionMode::QueryAware;
        // The question is longer than the observation window: the capture keeps its queries too.
        const CompareResult finch = run_compare(*fixture_, req);
        QCOMPARE(finch.runs.size(), size_t{1});
        const PromptParts parts = build_prompt(fixture_->tokenizer(), req.context, req.questions[0], false);
        std::vector<int64_t> ids = parts.context_ids;
        ids.insert(ids.end(), parts.question_ids.begin(), parts.question_ids.end());
        const int64_t q = static_cast<int64_t>(parts.question_ids.size());
        QVERIFY(q > req.settings.obs_window);
        // Without the question's queries Finch says what it lacks.
        PrefillCapture short_cap = capture_prefill(fixture_->model(), ids, req.settings);
        for (LayerCapture& c : short_cap.layers) c.question_tokens = q;
        const std::string refused =
            test::error_message([&] { MethodAnalysis(*make_method("finch", req.settings), short_cap); });
        QVERIFY2(refused.find("the capture kept") != std::string::npos, refused.c_str());
        PrefillCapture cap =
            capture_prefill(fixture_->model(), ids, req.settings, {}, ForwardOptions().chunk_size, true, q);
        auto kept_masks = [&](int64_t question_tokens) {
            for (LayerCapture& c : cap.layers) c.question_tokens = question_tokens;
            const auto method = make_method("finch", req.settings);
            const MethodAnalysis analysis(*method, cap);
            std::vector<at::Tensor> masks;
            for (const LayerAllocation& a : analysis.allocate(req.settings))
                masks.push_back(a.diagnostics.kept);
            return masks;
        };
        const std::vector<at::Tensor> marked = kept_masks(q), unmarked = kept_masks(0);
        bool differs = false;
        for (size_t l = 0; l < marked.size(); ++l) {
            QVERIFY2(at::equal(finch.runs[0].layers[l].kept.to(at::kCPU), marked[l].to(at::kCPU)),
                     qPrintable(QString("layer %1: compare's finch kept another set").arg(l)));
            QVERIFY(marked[l].narrow(1, marked[l].size(1) - q, q).all().item<bool>());  // the question kept
            differs |= !at::equal(marked[l], unmarked[l]);
        }
        QVERIFY(differs);

        // Without a question the oracle says what it needs.
        req.questions.clear();
        req.mode = CompressionMode::QueryAgnostic;
        req.methods = {"varrate:oracle"};
        const std::string msg = test::error_message([&] { run_compare(*fixture_, req); });
        QVERIFY2(msg.find("question") != std::string::npos, msg.c_str());
    }
};

QTEST_APPLESS_MAIN(TestCoreProbe)
#include "test_core_probe.moc"

// The runtime's causal attention against a literal fp64 reference: the blocked online-softmax kernel (the
// CPU path of Debian's LibTorch 1.13) and the batched formulation (CUDA, LibTorch 2.x), fp32 and bf16, MHA
// and GQA, with and without a sliding window, a whole prompt (unchunked) and a chunk that continues a cache,
// tilings from one block to many tiny ones.
#include <QtTest/QtTest>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "models/attention.h"
#include "models/attention_fused.h"
#include "models/device.h"
#include "models/online_softmax.h"

using namespace varrate;

namespace {

// Query row (g, i) of kv head h, new token i at cache index T - n_new + i, attends to the keys j with
// index - window < j <= index, one query at a time in fp64.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                               int64_t window) {
    const at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
    const int64_t n_kv = q.size(0), group = q.size(1) / n_new, hd = q.size(2), T = k.size(1);
    at::Tensor out = at::zeros({n_kv, group * n_new, hd}, at::kDouble);
    for (int64_t h = 0; h < n_kv; ++h)
        for (int64_t g = 0; g < group; ++g)
            for (int64_t i = 0; i < n_new; ++i) {
                const int64_t index = T - n_new + i;
                const int64_t first = window > 0 ? std::max<int64_t>(0, index - window + 1) : 0;
                const at::Tensor keys = kd[h].narrow(0, first, index - first + 1);
                const at::Tensor scores = at::mv(keys, qd[h][g * n_new + i]) / std::sqrt(double(hd));
                out[h][g * n_new + i] =
                    at::mv(vd[h].narrow(0, first, index - first + 1).t(), at::softmax(scores, 0));
            }
    return out;
}

// max |a - b| / max |b|
double rel_max(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor bd = b.to(at::kDouble);
    return (a.to(at::kDouble) - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

struct Shape {
    const char* name;
    int64_t n_kv, group, head_dim, keys, n_new;
};

const Shape kShapes[] = {
    {"MHA, whole prompt", 4, 1, 32, 300, 300},
    {"GQA 4:1, whole prompt", 2, 4, 32, 300, 300},
    {"GQA 4:1, continued chunk", 2, 4, 64, 300, 77},
    {"MHA, continued chunk", 3, 1, 16, 260, 45},
    {"GQA 8:1, one new token", 1, 8, 32, 150, 1},
    {"GQA 2:1, head_dim 12 (no fused kernel)", 2, 2, 12, 90, 60},
};

// Each tiling with the fused kernel (where the CPU runs it) and with the BLAS task.
const AttentionTiling kTilings[] = {{256, 512},   {3, 7},         {40, 64},
                                    {4096, 4096}, {25, 16},       {256, 512, true},
                                    {3, 7, true}, {40, 64, true}, {4096, 4096, true}};

}  // namespace

class TestModelsAttention : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() { configure_threads(2); }

    // fp32: every tiling of the blocked kernel, and the batched path, within 1e-5 of the fp64 reference and
    // of each other.
    void fp32_matches_reference() {
        at::manual_seed(11);
        for (const Shape& s : kShapes)
            for (int64_t window : {int64_t(0), int64_t(37)}) {
                const at::Tensor q = at::randn({s.n_kv, s.group * s.n_new, s.head_dim}),
                                 k = at::randn({s.n_kv, s.keys, s.head_dim}) * 2,
                                 v = at::randn({s.n_kv, s.keys, s.head_dim});
                const at::Tensor want = reference_attention(q, k, v, s.n_new, window);
                const at::Tensor batched = gqa_causal_attention_batched(q, k, v, s.n_new, window);
                QVERIFY2(rel_max(batched, want) < 1e-5, s.name);
                for (const AttentionTiling& t : kTilings) {
                    const at::Tensor got = gqa_causal_attention_blocked(q, k, v, s.n_new, window, t);
                    QCOMPARE(got.scalar_type(), at::kFloat);
                    QVERIFY2(rel_max(got, want) < 1e-5, qPrintable(QString("%1, window %2, tiling %3x%4: %5")
                                                                       .arg(s.name)
                                                                       .arg(window)
                                                                       .arg(t.query_rows)
                                                                       .arg(t.key_block)
                                                                       .arg(rel_max(got, want))));
                }
                QVERIFY2(rel_max(gqa_causal_attention(q, k, v, s.n_new, window), want) < 1e-5, s.name);
            }
    }

    // bf16 in, bf16 out: within one bf16 step (2^-8, relative to the largest output) of the fp64 attention of
    // the same bf16 inputs: the kernel rounds once, at its output. (The batched path on LibTorch 1.13's CPU
    // also rounds its scores and probabilities to bf16; its error is printed for comparison.)
    void bf16_within_dtype_tolerance() {
        at::manual_seed(12);
        for (const Shape& s : kShapes)
            for (int64_t window : {int64_t(0), int64_t(37)}) {
                const at::Tensor q = at::randn({s.n_kv, s.group * s.n_new, s.head_dim}).to(at::kBFloat16),
                                 k = (at::randn({s.n_kv, s.keys, s.head_dim}) * 2).to(at::kBFloat16),
                                 v = at::randn({s.n_kv, s.keys, s.head_dim}).to(at::kBFloat16);
                const at::Tensor want = reference_attention(q, k, v, s.n_new, window);
                const double batched = rel_max(gqa_causal_attention_batched(q, k, v, s.n_new, window), want);
                double worst = 0;
                for (const AttentionTiling& t : kTilings) {
                    const at::Tensor got = gqa_causal_attention_blocked(q, k, v, s.n_new, window, t);
                    QCOMPARE(got.scalar_type(), at::kBFloat16);
                    const double err = rel_max(got, want);
                    QVERIFY2(err < std::ldexp(1.0, -8),
                             qPrintable(QString("%1, window %2: blocked %3, batched %4")
                                            .arg(s.name)
                                            .arg(window)
                                            .arg(err)
                                            .arg(batched)));
                    worst = std::max(worst, err);
                }
                qInfo("bf16 %s, window %lld: blocked %.2e, batched %.2e", s.name, (long long)window, worst,
                      batched);
            }
    }

    // Blocks that no query of a tile can see are never read: keys and values that a sliding window hides from
    // every new token are NaN, and the result is still the reference's.
    void hidden_blocks_are_not_read() {
        at::manual_seed(13);
        const int64_t keys = 400, n_new = 50, window = 60;
        const at::Tensor q = at::randn({2, 4 * n_new, 32});
        at::Tensor k = at::randn({2, keys, 32}), v = at::randn({2, keys, 32});
        const at::Tensor want = reference_attention(q, k, v, n_new, window);
        const int64_t unseen = keys - n_new - window + 1;  // the first new token's window starts here
        k.narrow(1, 0, unseen).fill_(std::numeric_limits<float>::quiet_NaN());
        v.narrow(1, 0, unseen).fill_(std::numeric_limits<float>::quiet_NaN());
        for (const AttentionTiling& t : kTilings) {
            const at::Tensor got = gqa_causal_attention_blocked(q, k, v, n_new, window, t);
            QVERIFY(!got.isnan().any().item<bool>());
            QVERIFY(rel_max(got, want) < 1e-5);
        }
    }

    // The fused step's exp (its generic build; the AVX2 build is what the attention comparisons above run):
    // within 2 ulp of exp on [-87, 0], exactly 1 at 0, and 0 below -87 and at -inf (masked scores, and the
    // rescale of the first visible block).
    void exp_matches_std_exp() {
        double worst = 0;
        for (int i = 0; i <= 870000; ++i) {
            const float x = -static_cast<float>(i) * 1e-4f;
            const double want = std::exp(static_cast<double>(x));
            worst = std::max(worst, std::abs(exp_nonpositive(x) - want) / want);
        }
        qInfo("exp_nonpositive: largest relative error on [-87, 0]: %.2e", worst);
        QVERIFY2(worst < 2.4e-7, qPrintable(QString::number(worst)));
        QCOMPARE(exp_nonpositive(0.0f), 1.0f);
        QCOMPARE(exp_nonpositive(-87.5f), 0.0f);
        QCOMPARE(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
    }

    // The kernel's tasks run on every thread LibTorch is given (at::parallel_for runs serially in a file
    // built without OpenMP, as the runtime's attention once was, unnoticed: one core of two).
    void tasks_use_every_thread() {
#if TORCH_VERSION_MAJOR < 2
        QCOMPARE(blocked_attention_workers(8), int64_t(2));
        QCOMPARE(blocked_attention_workers(1), int64_t(1));
#else
        QSKIP("LibTorch 2.x runs its own attention kernel on the CPU");
#endif
    }

    // The fused kernel is what runs where it can: x86-64 with AVX2 + FMA, head_dim a multiple of 8.
    void fused_kernel_where_supported() {
#if defined(__x86_64__) && defined(__GNUC__)
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        QCOMPARE(fused_attention_supported(32), avx2);
        QCOMPARE(fused_attention_supported(128), avx2);
#endif
        QVERIFY(!fused_attention_supported(12));
        QVERIFY(!fused_attention_supported(0));
    }

    // The fused kernel alone over 300 random shapes (head_dim 8-128, 1-70 tokens, groups of 1-5, windows, key
    // blocks of 1-300) against a double-precision loop, on buffers of exactly the size it may read and write
    // (so that the sanitizer build sees any overrun).
    void fused_kernel_random_shapes() {
        if (!fused_attention_supported(8)) QSKIP("no AVX2 + FMA on this CPU");
        std::mt19937 rng(7);
        std::normal_distribution<float> normal(0, 1);
        FusedAttentionScratch scratch;
        double worst = 0;
        for (int it = 0; it < 300; ++it) {
            const int64_t hd = 8 * (1 + rng() % 16), tokens = 1 + rng() % 70, group = 1 + rng() % 5;
            const int64_t prior = rng() % 200, window = rng() % 3 == 0 ? 1 + rng() % 90 : 0;
            const int64_t block = 1 + rng() % 300, rows = tokens * group, key_end = prior + tokens;
            const int64_t key_begin = window > 0 ? std::max<int64_t>(0, prior - window + 1) : 0;
            std::vector<float> q(rows * hd), k(key_end * hd), v(key_end * hd), out(rows * hd);
            for (float& x : q) x = 0.3f * normal(rng);
            for (float& x : k) x = normal(rng);
            for (float& x : v) x = normal(rng);
            fused_attention_task(q.data(), rows, tokens, prior, window, k.data(), v.data(), hd, key_begin,
                                 key_end, block, out.data(), scratch);
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t index = prior + r % tokens;
                const int64_t first = window > 0 ? std::max<int64_t>(0, index - window + 1) : 0;
                std::vector<double> p(static_cast<size_t>(index + 1));
                double top = -1e300, sum = 0;
                for (int64_t j = first; j <= index; ++j) {
                    double dot = 0;
                    for (int64_t c = 0; c < hd; ++c) dot += double(q[r * hd + c]) * k[j * hd + c];
                    p[j] = dot;
                    top = std::max(top, dot);
                }
                for (int64_t j = first; j <= index; ++j) sum += (p[j] = std::exp(p[j] - top));
                for (int64_t c = 0; c < hd; ++c) {
                    double o = 0;
                    for (int64_t j = first; j <= index; ++j) o += p[j] * v[j * hd + c];
                    worst = std::max(worst, std::abs(o / sum - out[r * hd + c]));
                }
            }
        }
        qInfo("fused kernel, 300 random shapes: largest absolute error %.2e", worst);
        QVERIFY2(worst < 1e-4, qPrintable(QString::number(worst)));
    }

    // The masks matter: the same inputs without the window, or seen as a whole prompt rather than a chunk,
    // give other results (a kernel that ignored either would pass the comparisons above only by accident).
    void masks_change_the_result() {
        at::manual_seed(14);
        const at::Tensor q = at::randn({2, 4 * 77, 32}), k = at::randn({2, 300, 32}),
                         v = at::randn({2, 300, 32});
        const AttentionTiling t{40, 64};
        const at::Tensor windowed = gqa_causal_attention_blocked(q, k, v, 77, 37, t);
        QVERIFY(rel_max(gqa_causal_attention_blocked(q, k, v, 77, 0, t), windowed) > 1e-2);
        QVERIFY(
            rel_max(gqa_causal_attention_blocked(q, k.narrow(1, 223, 77), v.narrow(1, 223, 77), 77, 37, t),
                    windowed) > 1e-2);
    }
};

QTEST_APPLESS_MAIN(TestModelsAttention)
#include "test_models_attention.moc"

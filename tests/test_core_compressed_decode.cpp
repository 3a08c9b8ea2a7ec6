// Decoding from compressed layers (KVCache prefixes: VarRate's store, codec/compressed_layer.h, with
// coefficients at cache precision or 4 bits; KIVI's packed layers, codec/quantized_layer.h) answers as
// decoding from the same layers rebuilt dense once, and as the codec's materialised cache, on real weights:
// the stories260k fixture and the demo model. The compressed cache holds its accounted bytes.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fstream>
#include <set>
#include <sstream>
#include <typeinfo>

#include "codec/methods/varrate_method.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "core/capture.h"
#include "core/data_paths.h"
#include "core/probe.h"
#include "core/suites/niah_document.h"
#include "models/generate.h"
#include "models/host_read.h"
#include "models/llama_model.h"
#include "models/rope.h"
#include "models/tokenizer/tokenizer.h"

using namespace varrate;

namespace {

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Caches {
    KVCache compressed, materialised;
    at::Tensor last_logits;
    int64_t accounted_bytes = 0;
};

// Prefills `context` with full attention, compressing every layer at the end (as the comparisons do): the
// observer keeps the layer's compressed store and its materialised dense cache; both caches continue from the
// prefill's last logits.
Caches compress(const LlamaModel& model, const std::vector<int64_t>& context,
                std::shared_ptr<const Basis> basis, double kappa, const std::string& name,
                int64_t coef_bits) {
    CodecSettings s;
    s.coef_bits = coef_bits;
    s.budget = kappa;
    s.r_min = 4;  // these models' D is 64 and 128
    s.rank = 1024;
    s.precise_timing = false;
    s.stride = basis->info().stride;  // the layout the basis was calibrated with
    s.anchors = basis->info().anchors;
    if (basis->info().window > 0) s.window = basis->info().window;
    const auto made = make_method(name, s, basis);
    CompressionMethod& method = *made;
    Caches out{model.new_cache(), model.new_cache(), {}, 0};
    ForwardOptions opt;
    opt.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
        const auto analysis = method.analyse(cap);
        const LayerAllocation alloc = method.allocate(*analysis, s);
        out.compressed.set_prefix(cap.layer, method.store(cap, *analysis, alloc));
        out.materialised.replace(cap.layer, method.materialise(cap, *analysis, alloc));
        out.accounted_bytes += alloc.diagnostics.stored_bytes;
        return std::nullopt;
    };
    KVCache prefill = model.new_cache();
    out.last_logits = model.forward(context, prefill, opt);
    out.compressed.set_next_position(prefill.next_position());
    out.materialised.set_next_position(prefill.next_position());
    return out;
}

// Greedy continuation of the context, then the answer to `question` after it (the cache keeps the
// continuation), from a copy of `cache`.
std::vector<int64_t> answer(const LlamaModel& model, const KVCache& cache, const at::Tensor& last_logits,
                            const std::vector<int64_t>& question) {
    KVCache c = cache;
    GenerateOptions opt;
    opt.max_new_tokens = 16;
    std::vector<int64_t> ids = decode_greedy(model, c, last_logits, opt).generated;
    opt.max_new_tokens = 24;
    for (int64_t id : generate_greedy(model, c, question, opt).generated) ids.push_back(id);
    return ids;
}

// context_text and question_text: the document and question, or (both empty) the demo regime's needle
// document.
void expect_same_answers(const std::filesystem::path& model_dir, std::shared_ptr<const Basis> basis,
                         std::string context_text, std::string question_text, size_t max_context,
                         const std::string& name, int64_t coef_bits) {
    const auto model = LlamaModel::load(model_dir, RuntimeOptions{});
    const Tokenizer tok = Tokenizer::load(model_dir);
    std::string expected;
    if (context_text.empty()) {
        const DemoRegime demo;
        NiahDocOptions o;
        o.seed = demo.seed;
        o.distractors = demo.distractors;
        const NiahDocument doc = NiahGenerator(tok, o).generate(demo.length, demo.depth_percent, 0);
        context_text = doc.context;
        question_text = "\n" + doc.question + "\n" + doc.answer_prefix;
        expected = doc.expected;
    }
    std::vector<int64_t> context = tok.encode(context_text);
    context.resize(std::min(context.size(), max_context));
    const std::vector<int64_t> question = tok.encode(question_text, false);
    const int64_t L = static_cast<int64_t>(context.size());
    QVERIFY2(L > 200, "context too short for the codec's anchors and window");
    if (!basis) {
        const auto& c = model->config();
        basis = random_basis(c.n_layer, 2 * c.n_kv_head * c.head_dim, 2 * c.n_kv_head * c.head_dim, 16, 4, 5);
    }
    const Caches caches = compress(*model, context, basis, 0.3, name, coef_bits);
    const KVCache dense = caches.compressed.densified();
    const auto from_store = answer(*model, caches.compressed, caches.last_logits, question);
    const auto from_dense = answer(*model, dense, caches.last_logits, question);
    const auto from_materialised = answer(*model, caches.materialised, caches.last_logits, question);
    const int64_t full_bytes = dense.used_bytes();
    qInfo(
        "%s, %lld-bit: %lld context tokens: compressed cache %lld bytes (accounted %lld), dense %lld; answer "
        "%s",
        name.c_str(), static_cast<long long>(coef_bits), static_cast<long long>(L),
        static_cast<long long>(caches.compressed.used_bytes()),
        static_cast<long long>(caches.accounted_bytes), static_cast<long long>(full_bytes),
        qPrintable(QString::fromStdString(tok.decode(from_store))));
    if (!expected.empty()) qInfo("expected answer: %s", expected.c_str());
    QCOMPARE(from_store, from_dense);
    QCOMPARE(from_store, from_materialised);
    QCOMPARE(static_cast<int64_t>(from_store.size()), int64_t(16 + 24));
    // Lock-step batches (the comparisons' decoder): rows attend through their stores by default, or rebuild
    // them dense once; both answer as one cache decoded alone.
    GenerateOptions g;
    g.max_new_tokens = 24;
    KVCache alone = caches.compressed;
    const std::vector<int64_t> single = generate_greedy(*model, alone, question, g).generated;
    const std::vector<const KVCache*> rows{&caches.compressed, &caches.materialised, &caches.compressed};
    const auto kept = generate_greedy_batch(*model, rows, question, at::Tensor(), {}, g);
    g.reconstruct_prefixes = true;
    const auto rebuilt = generate_greedy_batch(*model, rows, question, at::Tensor(), {}, g);
    for (size_t b = 0; b < rows.size(); ++b) {
        QCOMPARE(kept[b].generated, single);
        QCOMPARE(rebuilt[b].generated, single);
    }
    // The compressed cache holds the budget: the accounted bytes, measured from its tensors.
    QCOMPARE(caches.compressed.used_bytes(), caches.accounted_bytes);
    QVERIFY(caches.compressed.used_bytes() < full_bytes / 2);  // KIVI at head_dim 8: 45 %
    // A compressed cache cannot seed an observed prefill, and its layers are not tensors.
    KVCache c = caches.compressed;
    ForwardOptions observe;
    observe.observer = [](const LayerCapture&) { return std::optional<LayerKV>(); };
    EXPECT_ERROR(model->forward(question, c, observe), "needs an uncompressed cache");
    EXPECT_ERROR(caches.compressed.keys(0), "compressed prefix");
}

void add_methods() {
    QTest::addColumn<QString>("method");
    QTest::addColumn<int>("bits");
    QTest::newRow("varrate") << "varrate" << 16;
    QTest::newRow("varrate 4-bit") << "varrate" << 4;
    QTest::newRow("kivi2") << "kivi2" << 16;
}

// Greedy steps fed from the device, as decode_greedy feeds them: the host reads they took.
int64_t host_reads_of_steps(const LlamaModel& model, KVCache cache, const at::Tensor& last_logits,
                            int steps) {
    at::Tensor id = greedy_ids(last_logits).to(model.options().device);
    const int64_t before = host_reads();
    for (int i = 0; i < steps; ++i) id = greedy_ids(model.forward_on_device(id, cache));
    return host_reads() - before;
}

}  // namespace

class TestCoreCompressedDecode : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // VarRate's compressed store (cache-precision and 4-bit coefficients) and KIVI's packed layers.
    void stories260k_answers_from_the_compressed_store_data() { add_methods(); }
    void stories260k_answers_from_the_compressed_store() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QFETCH(QString, method);
        QFETCH(int, bits);
        const std::string text =
            read_text(varrate::test::source_dir() / "resources/eval/stories260k/eval.txt");
        expect_same_answers(dir, nullptr, text, " Then the little girl", 400, method.toStdString(),
                            bits);  // 512 positions
    }

    // Decode steps read nothing back to the host, through every registered method's cache (dense layers and
    // each store kind: VarRate's, its quantized coefficients, KIVI's, head-wise evictions); decode_greedy
    // reads the ids once per host_sync_every tokens and answers as when it reads every token, stops included.
    void decode_steps_read_nothing_back() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto model = LlamaModel::load(dir, RuntimeOptions{});
        const Tokenizer tok = Tokenizer::load(dir);
        const std::string text =
            read_text(varrate::test::source_dir() / "resources/eval/stories260k/eval.txt");
        std::vector<int64_t> ids = tok.encode(text);
        ids.resize(300);
        const std::vector<int64_t> question = tok.encode(" Then the little girl", false);
        const auto& c = model->config();
        auto basis =
            random_basis(c.n_layer, 2 * c.n_kv_head * c.head_dim, 2 * c.n_kv_head * c.head_dim, 16, 4, 5);
        CodecSettings s;
        s.budget = 0.5;
        s.r_min = 4;
        s.stride = 16;
        s.anchors = 4;
        s.obs_window = 16;
        s.streaming_sink = 8;  // DuoAttention in 300 tokens (kvpress's 128 + 256 fill them)
        s.streaming_recent = 32;
        PrefillCapture cap = capture_prefill(*model, ids, s);
        add_question_attention(*model, cap, question);
        add_repeat_scores(*model, cap, RepeatPrompt{{5, 6, 7}, {8, 9, 10}, {11}, 0});
        add_all_query_attention(*model, cap, /*observed=*/true, /*noncausal=*/true);
        std::set<std::string> kinds;
        for (const std::string& name : method_names()) {
            for (int64_t bits : {int64_t(16), int64_t(4)}) {
                if (bits == 4 && name != "varrate") continue;
                CodecSettings ms = s;
                ms.coef_bits = bits;
                const auto method = make_method(name, ms, basis);
                const MethodAnalysis analysis(*method, cap);
                const std::vector<LayerAllocation> alloc = analysis.allocate(ms);
                std::vector<LayerDiagnostics> diag;
                for (const LayerAllocation& a : alloc) diag.push_back(a.diagnostics);
                std::vector<std::shared_ptr<const LayerPrefix>> stores;
                const std::vector<LayerKV> layers = analysis.materialise(alloc, diag, &stores);
                const KVCache cache = cache_from_layers(*model, layers, cap.next_position, stores);
                for (const auto& st : stores)
                    if (st) kinds.insert(typeid(*st).name() + std::to_string(bits));
                const int64_t reads = host_reads_of_steps(*model, cache, cap.last_logits, 4);
                QVERIFY2(reads == 0, qPrintable(QString("%1 (%2-bit): %3 host reads in 4 decode steps")
                                                    .arg(QString::fromStdString(name))
                                                    .arg(bits)
                                                    .arg(reads)));
            }
        }
        qInfo("store kinds decoded: %zu", kinds.size());
        QVERIFY(kinds.size() >= 4);  // compressed, quantized coefficients, KIVI, head-wise
        // The loop: one read per host_sync_every tokens; the same tokens and the same cache after a stop.
        KVCache prefill = model->new_cache();
        const at::Tensor logits = model->forward(ids, prefill);
        GenerateOptions g;
        g.max_new_tokens = 24;
        KVCache a = prefill, b = prefill;
        g.host_sync_every = 1;
        int64_t before = host_reads();
        const GenerateResult every = decode_greedy(*model, a, logits, g);
        QCOMPARE(host_reads() - before, int64_t(24));
        g.host_sync_every = 8;
        before = host_reads();
        const GenerateResult batched = decode_greedy(*model, b, logits, g);
        QCOMPARE(host_reads() - before, int64_t(3));
        QCOMPARE(batched.generated, every.generated);
        QCOMPARE(b.next_position(), a.next_position());
        // A stop in the middle of a read-back: the tokens fed after it are taken back out of the cache.
        g.stop_ids = {every.generated[10]};
        KVCache sa = prefill, sb = prefill;
        g.host_sync_every = 1;
        const GenerateResult stop_every = decode_greedy(*model, sa, logits, g);
        g.host_sync_every = 8;
        const GenerateResult stop_batched = decode_greedy(*model, sb, logits, g);
        QVERIFY(stop_every.stopped && stop_batched.stopped);
        QCOMPARE(stop_batched.generated, stop_every.generated);
        QCOMPARE(sb.next_position(), sa.next_position());
        QCOMPARE(sb.length(0), sa.length(0));
        const std::vector<int64_t> more{question.front()};
        QVERIFY(at::equal(model->forward(more, sa), model->forward(more, sb)));
    }

    void demo_model_answers_from_the_compressed_store_data() { add_methods(); }
    void demo_model_answers_from_the_compressed_store() {
        QFETCH(QString, method);
        QFETCH(int, bits);
        const std::string dir = find_demo_model();
        if (dir.empty()) QSKIP("the demo model is not built into this checkout");
        const std::filesystem::path root = dir;
        auto basis = std::make_shared<const Basis>(Basis::load(root / "varrate-basis.safetensors"));
        expect_same_answers(root, basis, "", "", 4096, method.toStdString(), bits);
    }
};

QTEST_GUILESS_MAIN(TestCoreCompressedDecode)
#include "test_core_compressed_decode.moc"

// Compressed caches saved to a file and answered from (core/cache_file.h, codec/prefix_io.h): for full,
// SnapKV, VarRate and flat (and KIVI, PyramidKV and Ada-KV's head-wise store) on the stories260k fixture and
// the demo model, the answers from a saved and reloaded cache are compare's query-agnostic answers, decoded
// without a prefill, and every reloaded store rebuilds bit for bit what was saved. Each way a file can be
// wrong (truncated, altered, newer format, missing field, other model, other weights, other dtype, other
// tokenizer, shapes against the metadata) gives its own clear error.
#include "tests/test_support.h"

#include <fstream>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/codec_json.h"
#include "codec/compressed_layer.h"
#include "codec/headwise_eviction.h"
#include "codec/prefix_io.h"
#include "codec/quantize.h"
#include "core/cache_file.h"
#include "core/capture.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/demo_corpus.h"
#include "models/random_model.h"
#include "models/safetensors.h"

using namespace varrate;
namespace fs = std::filesystem;

namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string fixture_context() {
    const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
    return greedy["cases"][0]["text"].get<std::string>() + "\n" +
           greedy["cases"][2]["text"].get<std::string>();
}

// The reloaded context holds what was saved: dense layers equal, stores with equal parts that rebuild the
// same dense layer bit for bit, the same resident bytes.
void expect_same_cache(const CompressedContext& saved, const CompressedContext& loaded, const QString& what) {
    QCOMPARE(loaded.layers.size(), saved.layers.size());
    QCOMPARE(loaded.stores.size(), saved.stores.size());
    for (size_t l = 0; l < saved.layers.size(); ++l) {
        const QString where = what + QString(" layer %1").arg(l);
        QVERIFY2(bool(saved.stores[l]) == bool(loaded.stores[l]), qPrintable(where + " kind"));
        if (!saved.stores[l]) {
            QVERIFY2(at::equal(saved.layers[l].keys, loaded.layers[l].keys), qPrintable(where + " keys"));
            QVERIFY2(at::equal(saved.layers[l].values, loaded.layers[l].values),
                     qPrintable(where + " values"));
            continue;
        }
        const LayerPrefix *a = saved.stores[l].get(), *b = loaded.stores[l].get();
        // Every kind's parts, as prefix_io writes them (compressed VarRate/flat layers, KIVI's packed ones).
        const PrefixTensors x = to_tensors(*a, ""), y = to_tensors(*b, "");
        QVERIFY2(x.meta == y.meta, qPrintable(where + " scalars"));
        QCOMPARE(y.tensors.size(), x.tensors.size());
        for (size_t i = 0; i < x.tensors.size(); ++i) {
            QCOMPARE(y.tensors[i].first, x.tensors[i].first);
            QVERIFY2(at::equal(x.tensors[i].second, y.tensors[i].second),
                     qPrintable(where + " " + QString::fromStdString(x.tensors[i].first)));
        }
        // A head-wise eviction whose heads keep different numbers has no dense reconstruction (its parts are
        // compared above).
        if (!dynamic_cast<const HeadwiseEvictedLayer*>(a)) {
            const LayerKV ra = a->reconstruct(), rb = b->reconstruct();
            QVERIFY2(at::equal(ra.keys, rb.keys) && at::equal(ra.values, rb.values),
                     qPrintable(where + " reconstruction"));
        }
        QCOMPARE(b->resident_bytes(), a->resident_bytes());
    }
    // As compare counts it: the tensors, plus a self-calibrated basis when it is charged (the context's own).
    QCOMPARE(resident_bytes(loaded.layers, loaded.stores) + saved.info.basis_bytes,
             saved.info.resident_bytes);
    QVERIFY(at::equal(saved.last_logits, loaded.last_logits));
}

// compare's query-agnostic answers for one method, and the same from a cache compressed, saved and reloaded.
void expect_ask_equals_compare(const Session& s, CompareRequest req, const fs::path& dir) {
    req.mode = CompressionMode::QueryAgnostic;
    const MethodRun want = run_compare(s, req).runs.at(0);
    QVERIFY2(want.infeasible.empty(), want.infeasible.c_str());
    CompressContextRequest c;
    c.context = req.context;
    c.method = req.methods.at(0);
    c.settings = req.settings;
    c.chat = req.chat;
    const CompressedContext saved = compress_context(s, c);
    const QString what = QString::fromStdString(c.method);
    QCOMPARE(saved.info.context_ids, want.context_ids);
    QCOMPARE(saved.info.stored_bytes, want.stored_bytes);
    QCOMPARE(saved.info.resident_bytes, want.resident_bytes);
    const fs::path file = dir / (c.method + ".vrkv");
    const CacheFileInfo written = write_cache_file(file, saved);
    const CompressedContext loaded = read_cache_file(file, s);
    expect_same_cache(saved, loaded, what);
    QCOMPARE(loaded.info.method, c.method);
    QCOMPARE(loaded.info.next_position, static_cast<int64_t>(want.context_ids.size()));
    QCOMPARE(loaded.info.saved_shared_bytes, written.saved_shared_bytes);
    // A basis (and RoPE frequencies) travels with VarRate/flat stores; KIVI's store needs none.
    QCOMPARE(loaded.info.saved_shared_bytes > 0,
             bool(dynamic_cast<const CompressedLayer*>(saved.stores.at(0).get())));
    QVERIFY(to_json(loaded.info.settings) == to_json(saved.info.settings));
    // No prefill: the answers are decoded from the restored cache (forward_batch steps only).
    const int64_t prefills = s.model().forward_calls();
    const auto got = answer_from_cache(s, loaded, req.questions, req.answer_prefixes, req.max_new_tokens);
    QCOMPARE(s.model().forward_calls(), prefills);
    QVERIFY2(got == want.answer_ids, qPrintable(what + " answers differ from compare's"));
    qInfo("%s: accounted %.2f%%, resident %.2f%%, file %lld bytes; answer 1: %s", qPrintable(what),
          100.0 * loaded.info.footprint_fraction(), 100.0 * loaded.info.resident_fraction(),
          static_cast<long long>(fs::file_size(file)), want.answers.at(0).c_str());
}

// A copy of a cache file with its metadata (and tensors) edited, the checksum made for the new contents.
void rewrite(const fs::path& from, const fs::path& to, const std::function<void(nlohmann::json&)>& edit,
             const std::function<void(NamedTensors&)>& edit_tensors = {}) {
    NamedTensors tensors;
    std::string checksum;
    nlohmann::json meta;
    {
        const SafetensorsArchive archive = SafetensorsArchive::open(from);
        meta = nlohmann::json::parse(archive.metadata().at(kCacheMetadataKey));
        for (const std::string& name : archive.names())
            tensors.emplace_back(name, archive.tensor(name).clone());
    }
    edit(meta);
    if (edit_tensors) edit_tensors(tensors);
    const std::string text = meta.dump();
    write_safetensors(to, tensors,
                      {{kCacheMetadataKey, text}, {kCacheChecksumKey, cache_file_checksum(text, tensors)}});
}

void flip_byte(const fs::path& p, int64_t from_end) {
    std::string bytes = read_text_file(p);
    bytes[bytes.size() - static_cast<size_t>(from_end)] ^= 0x01;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A model directory beside the fixture's tokenizer: random weights of `config`.
fs::path random_model(const ModelConfig& config, const fs::path& dir, uint64_t seed) {
    write_random_model(config, dir, seed, at::kFloat);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(test::fixture("stories260k") / f, dir / f);
    return dir;
}

RuntimeOptions two_threads(at::ScalarType dtype = at::kFloat) {
    RuntimeOptions o;
    o.threads = configure_threads(2);
    o.dtype = dtype;
    return o;
}

}  // namespace

class TestCoreCacheFile : public QObject {
    Q_OBJECT
    fs::path dir_;

  private Q_SLOTS:
    void initTestCase() { dir_ = test::temp_dir("cache-file"); }
    void cleanupTestCase() { fs::remove_all(dir_); }

    void fixture_answers_from_a_saved_cache_equal_compare() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        CompareRequest req;
        req.context = fixture_context();
        req.questions = {"Who was in the story?", "What happened at the end?"};
        req.settings = test::small_codec_settings(0.4);
        req.max_new_tokens = 8;
        for (const char* method : {"full", "snapkv", "varrate", "flat", "kivi2", "pyramidkv", "adakv",
                                   "kvzip", "varrate-kvzip", "expected-attention"}) {
            req.methods = {method};
            expect_ask_equals_compare(s, req, dir_);
        }
        req.methods = {"varrate"};  // quantized coefficients
        req.settings.coef_bits = 4;
        expect_ask_equals_compare(s, req, dir_);
    }

    // What compare reports: for every method that stores a cache, at two budgets (and with 4-bit
    // coefficients), the bytes the decoded cache holds, measured from its tensors, are the accounted bytes
    // (within 1 %; in fact equal: ranks are charged with the anchor indices, positions derived).
    void resident_is_accounted_for_every_method() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        CompareRequest req;
        req.context = fixture_context();
        req.questions = {"Who was in the story?"};
        req.mode = CompressionMode::QueryAgnostic;
        req.methods = {"varrate", "flat", "snapkv", "kivi2", "kivi4"};
        req.budgets = {0.4, 0.6};
        req.attention_output_error = false;
        req.max_new_tokens = 2;
        for (int64_t bits : {16, 4}) {
            req.settings = test::small_codec_settings(0.4);
            req.settings.coef_bits = bits;
            const CompareResult r = run_compare(s, req);
            QCOMPARE(r.runs.size(),
                     size_t(8));  // varrate, flat, snapkv at both budgets; KIVI once each (its bits)
            for (const MethodRun& run : r.runs) {
                qInfo("%s kappa %.1f, %lld-bit: accounted %lld, resident %lld of %lld", run.method.c_str(),
                      run.budget, static_cast<long long>(bits), static_cast<long long>(run.stored_bytes),
                      static_cast<long long>(run.resident_bytes), static_cast<long long>(run.full_bytes));
                QVERIFY(run.resident_bytes > 0);
                QVERIFY2(std::abs(run.resident_bytes - run.stored_bytes) <= run.stored_bytes / 100,
                         qPrintable(QString::fromStdString(run.method)));
                QVERIFY(run.resident_bytes < run.full_bytes * 7 / 10);
            }
        }
    }

    void demo_model_answers_from_a_saved_cache_equal_compare() {
        auto session = Session::open(test::source_dir() / "resources/models/varrate-demo", two_threads());
        const DemoDocument doc = make_document(uint64_t(1) << 63 | 777, 512, 2, 40.0);
        CompareRequest req;
        req.context = doc.text;
        req.questions = {doc.question, "What is the document about?"};
        req.answer_prefixes = {doc.answer_prefix, ""};
        req.settings = *session->codec_defaults();
        req.settings.budget = 0.1;  // where the methods part ways on this model
        req.max_new_tokens = 16;
        for (const char* method : {"full", "snapkv", "varrate", "flat", "kivi4"}) {
            req.methods = {method};
            expect_ask_equals_compare(*session, req, dir_);
        }
        req.methods = {"flat"};
        req.settings.coef_bits = 3;
        expect_ask_equals_compare(*session, req, dir_);
    }

    // prefix_io on its own: a store's tensors and scalars back into an equal store; an unknown kind, a store
    // of another shape than expected and anchor indices out of range are errors naming them.
    void prefix_io_round_trip_and_checks() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        CompressContextRequest c;
        c.context = fixture_context();
        c.method = "varrate";
        c.settings = test::small_codec_settings(0.4);
        const CompressedContext ctx = compress_context(s, c);
        const LayerPrefix& store = *ctx.stores.at(1);
        PrefixTensors saved = to_tensors(store, "x.");
        QCOMPARE(saved.meta["kind"].get<std::string>(), std::string("compressed_layer"));
        std::map<std::string, at::Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
        const TensorSource source = [&](const std::string& name) {
            if (!by_name.count(name)) throw Error("no tensor " + name);
            return by_name.at(name);
        };
        const auto& cfg = s.model().config();
        const PrefixExpectation expect{store.length(), cfg.n_kv_head, cfg.head_dim, at::kFloat};
        const auto back = prefix_from_tensors(saved.meta, "x.", source, expect, "here");
        QVERIFY(at::equal(back->reconstruct().keys, store.reconstruct().keys));
        // The basis rows past the largest rank are not saved.
        const auto& parts = dynamic_cast<const CompressedLayer&>(store).parts();
        const auto& layer = dynamic_cast<const CompressedLayer&>(store);
        QCOMPARE(by_name.at("x.basis").size(0), layer.ranks(0, layer.n_coded()).max().item<int64_t>());

        // Version 1 files held the indices as [n_coded, c] int16 and the ranks as int16, without the widths:
        // read, range-checked and packed, they give the same cache.
        {
            nlohmann::json v1 = saved.meta;
            v1.erase("anchors");
            v1.erase("index_bits");
            v1.erase("set_bits");
            v1.erase("rank_bits");
            v1.erase("rank_total");
            std::map<std::string, at::Tensor> old = by_name;
            old["x.nearest"] = layer.nearest(0, layer.n_coded()).to(at::kShort);
            old["x.ranks"] = layer.ranks(0, layer.n_coded()).to(at::kShort);
            const TensorSource v1_source = [&](const std::string& name) { return old.at(name); };
            const auto v1_back = prefix_from_tensors(v1, "x.", v1_source, expect, "here");
            QVERIFY(at::equal(v1_back->reconstruct().keys, store.reconstruct().keys));
            QCOMPARE(v1_back->resident_bytes(), store.resident_bytes());
            old["x.nearest"].fill_(1000);
            EXPECT_ERROR(prefix_from_tensors(v1, "x.", v1_source, expect, "here"),
                         "anchor indices span [1000");
        }

        nlohmann::json other = saved.meta;
        other["kind"] = "kivi";
        EXPECT_ERROR(prefix_from_tensors(other, "x.", source, expect, "here"),
                     "here: unknown store kind 'kivi'", "compressed_layer");
        PrefixExpectation wider = expect;
        wider.head_dim *= 2;
        EXPECT_ERROR(prefix_from_tensors(saved.meta, "x.", source, wider, "here"),
                     "head_dim is 8, expected 16");
        PrefixExpectation bf16 = expect;
        bf16.dtype = at::kBFloat16;
        EXPECT_ERROR(prefix_from_tensors(saved.meta, "x.", source, bf16, "here"), "'x.exact_keys' is Float",
                     "expected BFloat16");
        // Version 2 files held c packed ordinals and every rank (no set_bits, no rank_total): read as they
        // are, they give the same cache.
        QVERIFY(parts.set_bits > 0);
        nlohmann::json v2 = saved.meta;
        v2.erase("set_bits");
        v2.erase("rank_total");
        at::Tensor near = layer.nearest(0, layer.n_coded()).clone();
        by_name["x.nearest"] = pack_bits(near, parts.index_bits);
        QVERIFY(at::equal(prefix_from_tensors(v2, "x.", source, expect, "here")->reconstruct().keys,
                          store.reconstruct().keys));
        near[0][0] = layer.n_anchors();
        by_name["x.nearest"] = pack_bits(near, parts.index_bits);
        EXPECT_ERROR(prefix_from_tensors(v2, "x.", source, expect, "here"),
                     fmt::format("an anchor index is past the layer's {} anchors", layer.n_anchors()));
        by_name.erase("x.ranks");
        EXPECT_ERROR(prefix_from_tensors(saved.meta, "x.", source, expect, "here"), "no tensor x.ranks");
    }

    void bad_files_give_one_clear_error() {
        VARRATE_REQUIRE_FIXTURE(fixture, "stories260k");
        const Session& s = *test::shared_fixture_session();
        const fs::path good = dir_ / "good.vrkv", bad = dir_ / "bad.vrkv";
        CompressContextRequest c;
        c.context = fixture_context();
        c.method = "varrate";
        c.settings = test::small_codec_settings(0.4);
        write_cache_file(good, compress_context(s, c));
        auto read = [&](const Session& session) { return read_cache_file(bad, session); };
        auto fresh = [&] { fs::copy_file(good, bad, fs::copy_options::overwrite_existing); };
        const std::string where = "cache file " + bad.string();

        fresh();
        fs::resize_file(bad, fs::file_size(bad) - 100);
        EXPECT_ERROR(read(s), where + " is not a readable cache file", "the file is truncated");
        fresh();
        fs::resize_file(bad, 200);  // inside the header
        EXPECT_ERROR(read(s), where + " is not a readable cache file", "the file is truncated");
        write_file_atomic(bad, "plain text, not a cache");
        EXPECT_ERROR(read(s), where + " is not a readable cache file");
        write_safetensors(bad, {{"w", at::zeros({2})}});
        EXPECT_ERROR(read(s), where + " is not a varrate KV cache", "varrate compress");
        fresh();
        flip_byte(bad, 50);
        EXPECT_ERROR(read(s), where + " is corrupt: its checksum is fnv1a64:", "altered");
        rewrite(good, bad, [](nlohmann::json& m) { m["format_version"] = kCacheFormatVersion + 1; });
        EXPECT_ERROR(read(s),
                     where + fmt::format(" was written by format version {}; this build reads up to {}",
                                         kCacheFormatVersion + 1, kCacheFormatVersion));
        rewrite(good, bad, [](nlohmann::json& m) { m.erase("next_position"); });
        EXPECT_ERROR(read(s), where + ": the metadata has no 'next_position'");
        rewrite(good, bad, [](nlohmann::json& m) { m["settings"].erase("stride"); });
        EXPECT_ERROR(read(s), where + " settings: the metadata has no 'stride'");
        rewrite(good, bad, [](nlohmann::json& m) { m["bytes"].erase("resident"); });
        EXPECT_ERROR(read(s), where + " bytes: the metadata has no 'resident'");

        // Shapes against the metadata: a store's layout, and a dense layer's entries.
        rewrite(good, bad, [](nlohmann::json& m) { m["layers"][2]["stride"] = 16; });
        EXPECT_ERROR(read(s), where + " layer 2: compressed layer 2: exact keys has shape");
        rewrite(good, bad, [](nlohmann::json& m) { m["layers"][0]["kind"] = "kivi"; });
        EXPECT_ERROR(read(s), where + " layer 0: unknown store kind 'kivi'");
        rewrite(
            good, bad, [](nlohmann::json&) {},
            [](NamedTensors& t) { t.emplace_back("extra", at::zeros({1})); });
        EXPECT_ERROR(read(s), where + ": unexpected tensor 'extra'");
        c.method = "snapkv";
        write_cache_file(dir_ / "snapkv.vrkv", compress_context(s, c));
        rewrite(dir_ / "snapkv.vrkv", bad, [](nlohmann::json& m) {
            m["n_tokens"][3] = m["n_tokens"][3].get<int64_t>() - 1;
            m["layers"][3]["n_tokens"] = m["n_tokens"][3];
        });
        EXPECT_ERROR(read(s), where + " layer 3: keys are Float [4, ", "expected Float [4, ");

        // Other models, weights, dtype, tokenizer.
        ModelConfig config = ModelConfig::load(fixture);
        config.n_layer = 3;
        const auto shallow = Session::open(random_model(config, dir_ / "shallow", 1), two_threads());
        fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
        EXPECT_ERROR(
            read(*shallow),
            where + " was made with a different model: num_hidden_layers is 5 in the file, 3 in this model");
        const auto same_shape =
            Session::open(random_model(ModelConfig::load(fixture), dir_ / "same", 2), two_threads());
        EXPECT_ERROR(read(*same_shape),
                     where + " was made with a different model: the same configuration with other weights");
        const auto bf16 = Session::open(fixture, two_threads(at::kBFloat16));
        EXPECT_ERROR(read(*bf16), "cache_dtype is \"fp32\" in the file, \"bf16\" in this model",
                     "--dtype fp32");
        const fs::path retokenized = dir_ / "retokenized";
        fs::create_directories(retokenized);
        for (const char* f :
             {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"})
            fs::create_symlink(fixture / f, retokenized / f);
        nlohmann::json tok = read_json_file(fixture / "tokenizer.json");
        tok["model"]["merges"].erase(tok["model"]["merges"].size() - 1);  // one merge fewer
        write_file_atomic(retokenized / "tokenizer.json", tok.dump());
        const auto other_tokenizer = Session::open(retokenized, two_threads());
        EXPECT_ERROR(read(*other_tokenizer), where + " was made with a different tokenizer");

        // The good file still loads after all that, and its info reads alone.
        QCOMPARE(read_cache_file(good, s).info.method, std::string("varrate"));
        QCOMPARE(read_cache_file_info(good).format_version, kCacheFormatVersion);
        EXPECT_ERROR(answer_from_cache(s, read_cache_file(good, s), {""}, {}, 4), "question 1 is empty");
    }
};

QTEST_GUILESS_MAIN(TestCoreCacheFile)
#include "test_core_cache_file.moc"

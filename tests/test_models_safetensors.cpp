// safetensors: bit-exact write/read round trips, sharded checkpoints, the stories260k fixture, one clear
// error per kind of corrupt file, and the random model writer.
#include "tests/test_support.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/file_io.h"
#include "models/model_config.h"
#include "models/random_model.h"
#include "models/safetensors.h"

using varrate::SafetensorsArchive;
using json = nlohmann::json;

namespace {

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
    if (a.numel() == 0) return true;  // an empty tensor may have no storage: memcmp of null is undefined
    const at::Tensor ca = a.contiguous(), cb = b.contiguous();
    return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// Random bit patterns (all exponents, NaNs, infinities, subnormals) reinterpreted as a 16-bit float type.
at::Tensor random_bits16(std::vector<int64_t> shape, c10::ScalarType type, int64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    return at::randint(-32768, 32767, shape, gen, at::kShort).view(type);
}

// A raw safetensors file: 8-byte length, the given header text, then `data_bytes` bytes.
void write_raw(const std::filesystem::path& p, const std::string& header, size_t data_bytes,
               int64_t declared_len = -1) {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = declared_len >= 0 ? uint64_t(declared_len) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(data_bytes, '\0');
}

varrate::ModelConfig tiny_config(const std::string& arch) {
    json j = {{"architectures", {arch}}, {"hidden_size", 64},        {"intermediate_size", 96},
              {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"vocab_size", 300},       {"bos_token_id", 1},        {"eos_token_id", {2, 3}}};
    return varrate::ModelConfig::from_json(j, "tiny.json");
}

}  // namespace

class TestSafetensors : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void round_trip_is_bit_exact() {
        const auto dir = varrate::test::temp_dir("st-rt");
        at::Generator gen = at::detail::createCPUGenerator(7);
        at::Tensor f32 = at::randn({3, 5}, gen, at::kFloat);
        f32[0][0] = -0.0f;
        f32[0][1] = std::numeric_limits<float>::infinity();
        f32[0][2] = std::numeric_limits<float>::denorm_min();
        f32[0][3] = std::numeric_limits<float>::quiet_NaN();
        const at::Tensor bf16 = random_bits16({4, 6}, at::kBFloat16, 1);
        const at::Tensor f16 = random_bits16({7}, at::kHalf, 2);
        const at::Tensor i64 = at::arange(-5, 5, at::kLong).view({2, 5});
        const at::Tensor i32 = at::tensor({-2147483647 - 1, 0, 2147483647}, at::kInt);
        const at::Tensor i16 = at::tensor({-32768, 1, 32767}, at::kShort);
        const at::Tensor i8 = at::tensor({-128, 0, 127}, at::kChar);
        const at::Tensor u8 = at::tensor({0, 1, 255, 7, 9}, at::kByte);  // odd length: the next is unaligned
        const at::Tensor transposed = at::arange(12, at::kFloat).view({3, 4}).t();  // non-contiguous input
        const at::Tensor scalar = at::full({}, 3.5f);
        const at::Tensor empty = at::empty({0, 4}, at::kFloat);
        const std::vector<std::pair<std::string, at::Tensor>> tensors = {
            {"z.f32", f32},   {"b.bf16", bf16}, {"f16", f16},      {"ids.i64", i64},
            {"i32", i32},     {"i16", i16},     {"t", transposed}, {"scalar", scalar},
            {"empty", empty}, {"codes.i8", i8}, {"codes.u8", u8}};
        const auto path = dir / "rt.safetensors";
        varrate::write_safetensors(path, tensors, {{"format", "pt"}, {"codec", "test"}});

        const auto archive = SafetensorsArchive::open(path);
        QCOMPARE(archive.names().size(), tensors.size());
        QCOMPARE(archive.names().front(), std::string("b.bf16"));  // sorted
        for (const auto& [name, t] : tensors) {
            const at::Tensor back = archive.tensor(name);
            QVERIFY2(same_bytes(back, t), name.c_str());
            QVERIFY(back.device().is_cpu());
        }
        QCOMPARE(archive.info("b.bf16").dtype, std::string("BF16"));
        QCOMPARE(archive.info("f16").dtype, std::string("F16"));
        QCOMPARE(archive.info("ids.i64").dtype, std::string("I64"));
        QCOMPARE(archive.info("codes.i8").dtype, std::string("I8"));
        QCOMPARE(archive.info("codes.u8").dtype, std::string("U8"));
        QCOMPARE(archive.info("t").shape, std::vector<int64_t>({4, 3}));
        QCOMPARE(archive.metadata().at("codec"), std::string("test"));
        // Zero copy: the tensor is a view of the mapping, not a fresh buffer per call.
        QCOMPARE(archive.tensor("z.f32").data_ptr(), archive.tensor("z.f32").data_ptr());

        // On-disk format as Hugging Face writes it: padded header, __metadata__ first, names sorted.
        const std::string bytes = varrate::read_text_file(path);
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        QCOMPARE(n % 8, uint64_t(0));
        const std::string header = bytes.substr(8, n);
        QVERIFY(header.rfind(R"({"__metadata__":{"codec":"test","format":"pt"},"b.bf16":)", 0) == 0);
        QVERIFY(header.find("\"z.f32\"") > header.find("\"t\""));

        // The archive (and its tensors) outlive a rewrite of the file: the old mapping stays valid.
        const at::Tensor kept = archive.tensor("z.f32");
        varrate::write_safetensors(path, {{"other", i16}});
        QVERIFY(same_bytes(kept, f32));
        QCOMPARE(SafetensorsArchive::open(path).names(), std::vector<std::string>({"other"}));
        QVERIFY(std::filesystem::is_empty(dir) == false);
        QCOMPARE(std::distance(std::filesystem::directory_iterator(dir), {}),
                 1L);  // no temporary left behind

        EXPECT_ERROR(varrate::write_safetensors(dir / "x.safetensors", {{"d", at::zeros({2}, at::kDouble)}}),
                     "x.safetensors", "tensor 'd' has dtype Double");
        EXPECT_ERROR(varrate::write_safetensors(dir / "x.safetensors", {{"a", i16}, {"a", i16}}),
                     "x.safetensors", "tensor 'a' given twice");
        EXPECT_ERROR(archive.info("missing.weight"), "tensor 'missing.weight'", "not found");
        QVERIFY(!std::filesystem::exists(dir / "x.safetensors"));
        std::filesystem::remove_all(dir);
    }

    void sharded_index() {
        const auto dir = varrate::test::temp_dir("st-shard");
        const at::Tensor a = at::arange(6, at::kFloat).view({2, 3});
        const at::Tensor b = random_bits16({5}, at::kBFloat16, 3);
        const at::Tensor c = at::ones({4}, at::kFloat);
        varrate::write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", a}, {"b", b}},
                                   {{"format", "pt"}});
        varrate::write_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", c}}, {{"format", "pt"}});
        const json index = {{"metadata", {{"total_size", 38}}},
                            {"weight_map",
                             {{"a", "model-00001-of-00002.safetensors"},
                              {"b", "model-00001-of-00002.safetensors"},
                              {"c", "model-00002-of-00002.safetensors"}}}};
        varrate::write_file_atomic(dir / "model.safetensors.index.json", index.dump());

        for (const auto& where : {dir, dir / "model.safetensors.index.json"}) {
            const auto archive = SafetensorsArchive::open(where);
            QCOMPARE(archive.names(), std::vector<std::string>({"a", "b", "c"}));
            QVERIFY(same_bytes(archive.tensor("a"), a));
            QVERIFY(same_bytes(archive.tensor("b"), b));
            QVERIFY(same_bytes(archive.tensor("c"), c));
            QCOMPARE(archive.info("c").file, dir / "model-00002-of-00002.safetensors");
            QCOMPARE(archive.metadata().at("format"), std::string("pt"));
        }

        json wrong = index;
        wrong["weight_map"]["c"] = "model-00001-of-00002.safetensors";
        varrate::write_file_atomic(dir / "model.safetensors.index.json", wrong.dump());
        EXPECT_ERROR(SafetensorsArchive::open(dir), "model.safetensors.index.json",
                     "tensor 'c' is mapped to");
        wrong["weight_map"]["c"] = "../escape.safetensors";
        varrate::write_file_atomic(dir / "model.safetensors.index.json", wrong.dump());
        EXPECT_ERROR(SafetensorsArchive::open(dir), "model.safetensors.index.json",
                     "'../escape.safetensors'");
        wrong["weight_map"]["c"] = "model-00003-of-00002.safetensors";
        varrate::write_file_atomic(dir / "model.safetensors.index.json", wrong.dump());
        EXPECT_ERROR(SafetensorsArchive::open(dir), "model-00003-of-00002.safetensors", "file not found");
        std::filesystem::remove(dir / "model.safetensors.index.json");
        EXPECT_ERROR(SafetensorsArchive::open(dir), dir.string(), "no model.safetensors");
        std::filesystem::remove_all(dir);
    }

    void stories260k_fixture() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto config = varrate::ModelConfig::load(dir);
        const auto archive = SafetensorsArchive::open(dir);
        QCOMPARE(archive.names().size(), size_t(47));
        QCOMPARE(archive.metadata().at("format"), std::string("pt"));
        const auto expected = config.expected_tensors();
        QCOMPARE(expected.size(), size_t(47));
        for (const auto& [name, shape] : expected) {
            QVERIFY2(archive.contains(name), name.c_str());
            QCOMPARE(archive.info(name).dtype, std::string("F32"));
            const at::Tensor t = archive.tensor(name);
            QCOMPARE(t.sizes().vec(), shape);
            QVERIFY2(at::isfinite(t).all().item<bool>(), name.c_str());
        }
        QVERIFY(!archive.contains("lm_head.weight"));
        // Real weights, not zeros: the embedding has spread, the norm weights are positive scales.
        QVERIFY(archive.tensor("model.embed_tokens.weight").std().item<double>() > 0.01);
        QVERIFY(archive.tensor("model.norm.weight").min().item<float>() > 0.0f);
    }

    void bad_files() {
        const auto dir = varrate::test::temp_dir("st-bad");
        const auto p = dir / "bad.safetensors";
        // Every message names the file and what is wrong with it.
        auto check = [&](const std::string& part1, const std::string& part2) {
            EXPECT_ERROR(SafetensorsArchive::open(p), p.string(), part1, part2);
        };

        { std::ofstream(p, std::ios::binary) << "abcde"; }
        check("5 bytes", "shorter than the 8-byte header length");
        write_raw(p, "{}", 0, 1000);
        check("header length 1000", "extends beyond the end of the file (10 bytes)");
        write_raw(p, "{}", 0, int64_t(1) << 40);
        check("header length 1099511627776", "absurd");
        write_raw(p, R"({"a": {"dtype": "F32", )", 0);
        check("invalid JSON header", "");
        write_raw(p, R"([1, 2])", 0);
        check("header is not a JSON object", "");
        write_raw(p, R"({"a": 5})", 0);
        check("tensor 'a'", "header entry is not an object");
        write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4);
        check("tensor 'w'",
              "data_offsets [0, 8] lie outside the data section (4 bytes): the file is truncated");
        write_raw(p,
                  R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                  12);
        check("tensors 'a' [0, 8] and 'b' [4, 12]", "overlap");
        write_raw(p, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
        check("tensor 'w'", "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8");
        write_raw(p, R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", 2);
        check("tensor 'w'", "unsupported dtype 'Q4_K'");
        write_raw(p, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
        check("tensor 'w'", "shape must hold non-negative integers");
        write_raw(p, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 4]}})",
                  4);
        check("tensor 'w'", "shape is too large");
        write_raw(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8);
        check("tensor 'w'", "end before they begin");
        write_raw(p, R"({"__metadata__": {"format": 1}})", 0);
        check("__metadata__ value 'format'", "not a string");
        std::filesystem::remove_all(dir);
    }

    void random_model_has_expected_tensors() {
        const auto root = varrate::test::temp_dir("st-rand");
        for (const std::string arch : {"LlamaForCausalLM", "Qwen2ForCausalLM"}) {
            const auto config = tiny_config(arch);
            const auto dir = root / arch;
            varrate::write_random_model(config, dir, 42, at::kBFloat16);
            const auto reloaded = varrate::ModelConfig::load(dir);
            QCOMPARE(reloaded.to_json()["torch_dtype"].get<std::string>(), std::string("bfloat16"));
            QCOMPARE(reloaded.expected_tensors(), config.expected_tensors());
            QCOMPARE(reloaded.eos_token_ids, std::vector<int64_t>({2, 3}));
            const auto archive = SafetensorsArchive::open(dir);
            const auto expected = config.expected_tensors();
            QCOMPARE(archive.names().size(), expected.size());
            for (const auto& [name, shape] : expected) {
                QVERIFY2(archive.contains(name), name.c_str());
                QCOMPARE(archive.info(name).dtype, std::string("BF16"));
                QCOMPARE(archive.tensor(name).sizes().vec(), shape);
            }
            QVERIFY(at::all(archive.tensor("model.layers.1.input_layernorm.weight") == 1).item<bool>());
            const double sd = archive.tensor("model.embed_tokens.weight").to(at::kFloat).std().item<double>();
            QVERIFY2(sd > 0.018 && sd < 0.022, std::to_string(sd).c_str());
        }
        QVERIFY(SafetensorsArchive::open(root / "Qwen2ForCausalLM")
                    .contains("model.layers.0.self_attn.q_proj.bias"));
        std::filesystem::remove_all(root);
    }

    void random_model_is_deterministic_per_seed() {
        const auto root = varrate::test::temp_dir("st-seed");
        const auto config = tiny_config("LlamaForCausalLM");
        varrate::write_random_model(config, root / "a", 5, at::kFloat);
        varrate::write_random_model(config, root / "b", 5, at::kFloat);
        varrate::write_random_model(config, root / "c", 6, at::kFloat);
        QCOMPARE(varrate::read_text_file(root / "a" / "model.safetensors"),
                 varrate::read_text_file(root / "b" / "model.safetensors"));
        const auto a = SafetensorsArchive::open(root / "a");
        const auto c = SafetensorsArchive::open(root / "c");
        QCOMPARE(a.info("lm_head.weight").dtype, std::string("F32"));
        QVERIFY(!same_bytes(a.tensor("lm_head.weight"), c.tensor("lm_head.weight")));
        // Distinct tensors of equal shape get distinct values.
        QVERIFY(!same_bytes(a.tensor("model.layers.0.mlp.gate_proj.weight"),
                            a.tensor("model.layers.0.mlp.up_proj.weight")));
        std::filesystem::remove_all(root);
    }

    // --init-std scales the random values (the same draws) and leaves the norms at 1; a bad one is refused.
    void random_model_init_std() {
        const auto root = varrate::test::temp_dir("st-std");
        const auto config = tiny_config("LlamaForCausalLM");
        varrate::write_random_model(config, root / "a", 5, at::kFloat);
        varrate::write_random_model(config, root / "b", 5, at::kFloat, varrate::kDefaultMaxShardBytes, 0.1);
        const auto a = SafetensorsArchive::open(root / "a");
        const auto b = SafetensorsArchive::open(root / "b");
        const at::Tensor ea = a.tensor("model.embed_tokens.weight"),
                         eb = b.tensor("model.embed_tokens.weight");
        QVERIFY(at::allclose(eb, ea * 5.0, 1e-5, 1e-7));
        const double sd = eb.std().item<double>();
        QVERIFY2(sd > 0.09 && sd < 0.11, std::to_string(sd).c_str());
        QVERIFY(at::all(b.tensor("model.norm.weight") == 1).item<bool>());
        EXPECT_ERROR(varrate::write_random_model(config, root / "c", 5, at::kFloat,
                                                 varrate::kDefaultMaxShardBytes, 0.0),
                     "standard deviation");
        std::filesystem::remove_all(root);
    }

    void random_model_shards_and_replaces() {
        const auto dir = varrate::test::temp_dir("st-rshard");
        const auto config = tiny_config("LlamaForCausalLM");
        std::ofstream(dir / "tokenizer.json") << "{}";            // unrelated files in the directory stay
        varrate::write_random_model(config, dir, 1, at::kFloat);  // single file first
        QVERIFY(std::filesystem::exists(dir / "model.safetensors"));
        // 64 KB shards: the 300x64 fp32 embedding (76.8 KB) alone exceeds it and gets its own shard.
        varrate::write_random_model(config, dir, 1, at::kFloat, 64 * 1024);
        QVERIFY(!std::filesystem::exists(dir / "model.safetensors"));
        QVERIFY(std::filesystem::exists(dir / "tokenizer.json"));
        const json index = varrate::read_json_file(dir / "model.safetensors.index.json");
        const auto& wm = index["weight_map"];
        std::set<std::string> files;
        for (const auto& f : wm) files.insert(f.get<std::string>());
        QVERIFY(files.size() >= 3);
        char last[64];
        std::snprintf(last, sizeof(last), "model-%05zu-of-%05zu.safetensors", files.size(), files.size());
        QCOMPARE(*files.rbegin(), std::string(last));
        QCOMPARE(wm["lm_head.weight"].get<std::string>(), std::string(last));
        QCOMPARE(wm["model.embed_tokens.weight"].get<std::string>(), *files.begin());
        QCOMPARE(*files.begin(), std::string(last).replace(6, 5, "00001"));
        for (const auto& f : files) QVERIFY2(std::filesystem::file_size(dir / f) < 80 * 1024, f.c_str());
        QCOMPARE(index["metadata"]["total_size"].get<int64_t>(), config.parameter_count() * 4);
        const auto sharded = SafetensorsArchive::open(dir);
        QCOMPARE(sharded.names().size(), config.expected_tensors().size());
        // Same seed, same values, whether sharded or not.
        const auto single_dir = dir / "single";
        varrate::write_random_model(config, single_dir, 1, at::kFloat);
        const auto single = SafetensorsArchive::open(single_dir);
        for (const auto& name : single.names())
            QVERIFY2(same_bytes(single.tensor(name), sharded.tensor(name)), name.c_str());
        EXPECT_ERROR(varrate::write_random_model(config, dir / "tokenizer.json", 1, at::kFloat),
                     "tokenizer.json", "not a directory");
        EXPECT_ERROR(varrate::write_random_model(config, dir / "x", 1, at::kLong), "x",
                     "float32, bfloat16 or float16");
        std::filesystem::remove_all(dir);
    }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "test_models_safetensors.moc"

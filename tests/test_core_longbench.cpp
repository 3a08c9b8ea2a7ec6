// LongBench (core/longbench.h, core/longbench_metrics.h): the metrics on hand-worked cases (the working is in
// the comments) and against LongBench's own metrics.py / eval.py (tests/data/oracles/longbench.json, made by
// scripts/oracles/longbench_reference.py), the JSONL reader's and the config loader's messages, the shipped
// config, the prompt split and pred.py's middle truncation on the shared llama3 tokenizer.
#include "tests/test_support.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "base/error.h"
#include "core/suites/longbench.h"
#include "core/suites/longbench_metrics.h"
#include "models/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace varrate;
using nlohmann::json;

namespace {

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

// Exact equality of doubles (QCOMPARE on doubles is fuzzy), with both values in the message.
#define EXPECT_EXACT(actual, expected, what)                                                                \
    do {                                                                                                    \
        const double a_ = (actual), e_ = (expected);                                                        \
        QVERIFY2(a_ == e_, qPrintable(qs(fmt::format("{}: got {:.17g}, expected {:.17g}", what, a_, e_)))); \
    } while (0)

fs::path write_file(const fs::path& dir, const std::string& name, const std::string& text) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

// One valid LongBench line (the fields of THUDM/LongBench's data files).
json sample_json(const std::string& id = "s1") {
    return {{"input", "Who wrote it?"}, {"context", "Passage 1: It was written by Ann."},
            {"answers", {"Ann"}},       {"length", 7},
            {"dataset", "hotpotqa"},    {"language", "en"},
            {"all_classes", nullptr},   {"_id", id}};
}

LongBenchConfig shipped_config() {
    return load_longbench_config(test::source_dir() / "resources" / "eval" / "longbench.json");
}

LongBenchSample make_sample(const std::string& dataset, std::vector<std::string> answers,
                            int64_t length = 100,
                            std::optional<std::vector<std::string>> classes = std::nullopt) {
    LongBenchSample s;
    s.id = "x";
    s.dataset = dataset;
    s.answers = std::move(answers);
    s.all_classes = std::move(classes);
    s.length = length;
    return s;
}

json config_with(const json& entry) {
    return {{"datasets", {{"mine", entry}}}};
}

}  // namespace

class TestLongBench : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void qa_f1_by_hand() {
        // lower -> drop ASCII punctuation -> drop the words a/an/the -> collapse whitespace
        QCOMPARE(normalize_answer("The Quick, brown (fox)!"), std::string("quick brown fox"));
        QCOMPARE(normalize_answer("An-the theater"), std::string("anthe theater"));  // "-" goes first
        // pred "The cat sat on the mat" -> [cat sat on mat]; gold "a cat on a mat" -> [cat on mat]
        // common 3: P = 3/4, R = 3/3, F1 = 2 * 0.75 * 1 / 1.75 = 6/7
        EXPECT_EXACT(qa_f1_score("The cat sat on the mat", "a cat on a mat"), (2 * 0.75 * 1.0) / (0.75 + 1.0),
                     "qa_f1");
        // multiset overlap: pred [cat cat dog] vs gold [cat dog dog] -> common {cat:1, dog:1} = 2, P = R =
        // 2/3
        EXPECT_EXACT(qa_f1_score("cat cat dog", "cat dog dog"), (2 * (2.0 / 3) * (2.0 / 3)) / (4.0 / 3),
                     "multiset");
        EXPECT_EXACT(qa_f1_score("the", "the"), 0.0, "only articles: no token");
        // Python's lower(): Σ at a word end becomes ς, so "ΟΔΟΣ" != "οδοσ" after normalisation
        QCOMPARE(normalize_answer("ΟΔΟΣ ΣΑ"), std::string("οδος σα"));
    }

    void rouge_by_hand() {
        // hyp sentences (split on '.'): "the cat sat", "the dog ran"; ref: "the cat ran"
        // m = distinct ref words {the cat ran} = 3; n = distinct hyp words {the cat sat dog ran} = 5
        // LCS(ref, hyp1) = "the cat", LCS(ref, hyp2) = "the ran": union {the cat ran} = 3
        // R = 3/3, P = 3/5, F = 2 * (P R / (P + R + 1e-8))
        EXPECT_EXACT(rouge_score("the cat sat. the dog ran", "the cat ran"),
                     2.0 * ((0.6 * 1.0) / (0.6 + 1.0 + 1e-8)), "rouge-L");
        // ties in the LCS backtracking: ref "b a" vs hyp "a b" keeps "a" (left move on a tie), then the
        // second ref sentence "b" adds "b": union 2 of m = n = 2 -> F = 2 * (1 / (2 + 1e-8))
        EXPECT_EXACT(rouge_score("a b", "b a. b"), 2.0 * ((1.0 * 1.0) / (1.0 + 1.0 + 1e-8)), "rouge tie");
        // case is kept: "Cat" != "cat"
        EXPECT_EXACT(rouge_score("Cat", "cat"), 0.0, "case");
        EXPECT_EXACT(rouge_score("", "the cat"), 0.0, "empty hypothesis");
        EXPECT_EXACT(rouge_score("...", "the cat"), 0.0, "no sentence");
    }

    void classification_retrieval_count_by_hand() {
        // classes in "A B AB": [A, B, AB]; metrics.py removes "A" (in the gold "AB", not equal), which makes
        // its loop skip "B"; the gold "AB" stays: score 1 / len([B, AB]) = 0.5
        EXPECT_EXACT(classification_score("A B AB", "AB", {"A", "B", "AB"}), 0.5, "classification quirk");
        EXPECT_EXACT(classification_score("City", "City", {"City", "Country"}), 1.0, "classification");
        EXPECT_EXACT(classification_score("Country", "City", {"City", "Country"}), 0.0,
                     "classification miss");
        // numbers [3, 30], gold id 3: 1 of 2
        EXPECT_EXACT(retrieval_score("Paragraph 3 or Paragraph 30", "Paragraph 3"), 0.5, "retrieval");
        EXPECT_EXACT(retrieval_zh_score("段落2", "段落2"), 1.0, "retrieval zh");
        EXPECT_ERROR(retrieval_score("3", "three"), "\"three\"", "Paragraph N");
        // numbers [5, 5, 4], gold 5: 2 of 3; none -> 0
        EXPECT_EXACT(count_score("5 5 4", "5"), 2.0 / 3.0, "count");
        EXPECT_EXACT(count_score("five", "5"), 0.0, "count without numbers");
    }

    void code_similarity_by_hand() {
        // the first line without a backtick, '#' or "//" is "return x"; against "return y" difflib matches
        // "return " (7): ratio 14/16 = 0.875 -> 87.5 -> round half to even: 88
        EXPECT_EXACT(code_sim_score("```python\n# comment\nreturn x\n", "return y"), 0.88, "code sim");
        // one common char of 8 + 8: 2/16 -> 12.5 -> 12 (half to even; half up would say 13)
        QCOMPARE(fuzz_ratio("abcdefgh", "aXXXXXXX"), 12);
        QCOMPARE(fuzz_ratio("abcdefgh", "aXXXXXXX", FuzzRatio::Levenshtein), 12);
        // 1 of 40 + 40: difflib 2 * 1 / 80 = 0.025, 100 x that is 2.5 exactly in doubles -> 2; Levenshtein
        // 1 - 78/80 = 0.025000000000000022 -> 2.5000000000000022 -> 3
        const std::string a = "a" + std::string(39, 'b'), b = "a" + std::string(39, 'c');
        QCOMPARE(fuzz_ratio(a, b), 2);
        QCOMPARE(fuzz_ratio(a, b, FuzzRatio::Levenshtein), 3);
        QCOMPARE(fuzz_ratio("", ""), 100);  // equal before empty: fuzzywuzzy's decorator order
        QCOMPARE(fuzz_ratio("x", ""), 0);
        EXPECT_EXACT(code_sim_score("# only comments", ""), 1.0, "empty line vs empty gold");
    }

    void sample_and_dataset_scores_by_hand() {
        // first line only (after leading newlines): "City"; max over gold answers
        const std::vector<std::string> classes = {"City", "Country"};
        EXPECT_EXACT(longbench_sample_score(LongBenchMetric::Classification, true, "\n\nCity\nCountry",
                                            {"City"}, classes),
                     1.0, "first line");
        EXPECT_EXACT(
            longbench_sample_score(LongBenchMetric::QaF1, false, "Paris", {"Rome", "paris"}, std::nullopt),
            1.0, "max over answers");
        EXPECT_ERROR(longbench_sample_score(LongBenchMetric::Classification, false, "x", {"x"}, std::nullopt),
                     "all_classes");

        const LongBenchConfig config = shipped_config();
        const LongBenchDataset& hotpot = config.dataset("hotpotqa");
        // per sample: "Paris" vs "Paris" 1; [paris france] vs [paris]: P 1/2, R 1, F1 2*0.5*1/1.5 = 2/3;
        // "Oslo" vs "Rome" 0 (the third is a LongBench-E sample, "hotpotqa_e")
        const std::vector<LongBenchSample> samples = {make_sample("hotpotqa", {"Paris"}, 3000),
                                                      make_sample("hotpotqa", {"Paris"}, 5000),
                                                      make_sample("hotpotqa_e", {"Rome"}, 9000)};
        const std::vector<std::string> preds = {"Paris", "Paris France", "Oslo"};
        // 100 * (1 + 2/3 + 0) / 3
        EXPECT_EXACT(longbench_dataset_score(hotpot, samples, preds), 100 * (1.0 + (2 * 0.5 * 1.0) / 1.5) / 3,
                     "dataset score");
        const LongBenchEScores e = longbench_e_scores(hotpot, samples, preds);
        EXPECT_EXACT(e.under_4k, 100.0, "0-4k");
        EXPECT_EXACT(e.from_4k_to_8k, 100 * ((2 * 0.5 * 1.0) / 1.5), "4-8k");
        EXPECT_EXACT(e.over_8k, 0.0, "8k+");
        QVERIFY(std::isnan(longbench_e_scores(hotpot, {samples[0]}, {preds[0]}).over_8k));
        EXPECT_ERROR(longbench_dataset_score(hotpot, samples, {"a"}), "1 predictions for 3 samples");
        EXPECT_ERROR(longbench_dataset_score(hotpot, {make_sample("trec", {"x"})}, {"x"}), "dataset 'trec'");
        LongBenchSample bad = make_sample("passage_retrieval_en", {"no id"});
        bad.line = 4;
        EXPECT_ERROR(longbench_dataset_score(config.dataset("passage_retrieval_en"), {bad}, {"1"}),
                     "passage_retrieval_en sample x (line 4)", "Paragraph N");
    }

    // Every case of the reference made by LongBench's own metrics.py and eval.py: exact equality.
    void metrics_match_longbench_reference() {
        const json ref = test::read_json(test::oracle_dir() / "longbench.json");
        QCOMPARE(ref["generator"]["longbench_commit"].get<std::string>(),
                 std::string("2e00731f8d0bff23dc4325161044d0ed8af94c1e"));
        int n = 0;
        for (const auto& c : ref["normalize_answer"]) {
            QCOMPARE(qs(normalize_answer(c["s"].get<std::string>())), qs(c["normalized"].get<std::string>()));
            ++n;
        }
        auto check = [&](const char* key, auto&& f) {
            for (const auto& c : ref[key]) {
                const std::string p = c["prediction"], g = c["ground_truth"];
                EXPECT_EXACT(f(c, p, g), c["score"].get<double>(), fmt::format("{} [{}] vs [{}]", key, p, g));
                ++n;
            }
        };
        check("qa_f1_score", [](const json&, auto& p, auto& g) { return qa_f1_score(p, g); });
        check("rouge_score", [](const json&, auto& p, auto& g) { return rouge_score(p, g); });
        check("classification_score", [](const json& c, auto& p, auto& g) {
            return classification_score(p, g, c["all_classes"].get<std::vector<std::string>>());
        });
        check("retrieval_score", [](const json&, auto& p, auto& g) { return retrieval_score(p, g); });
        check("count_score", [](const json&, auto& p, auto& g) { return count_score(p, g); });
        for (const auto& c : ref["code_sim_score"]) {
            const std::string p = c["prediction"], g = c["ground_truth"];
            EXPECT_EXACT(code_sim_score(p, g), c["difflib"].get<double>(), "code_sim difflib " + p);
            EXPECT_EXACT(code_sim_score(p, g, FuzzRatio::Levenshtein), c["levenshtein"].get<double>(),
                         "code_sim Levenshtein " + p);
            ++n;
        }
        for (const auto& c : ref["fuzz_ratio"]) {
            const std::string a = c["a"], b = c["b"];
            QVERIFY2(fuzz_ratio(a, b) == c["difflib"].get<int>(),
                     qPrintable(qs("difflib: " + a + " | " + b)));
            QVERIFY2(fuzz_ratio(a, b, FuzzRatio::Levenshtein) == c["levenshtein"].get<int>(),
                     qPrintable(qs("Levenshtein: " + a + " | " + b)));
            ++n;
        }
        QVERIFY2(n > 150, qPrintable(QString::number(n)));

        // eval.py's scorer and scorer_e (rounded to 2 decimals there) and every per-sample value (exact)
        const LongBenchConfig config = shipped_config();
        for (const auto& d : ref["eval"]) {
            const std::string name = d["dataset"];
            const LongBenchDataset& ds = config.dataset(name);
            std::vector<LongBenchSample> samples;
            const auto preds = d["predictions"].get<std::vector<std::string>>();
            for (size_t i = 0; i < preds.size(); ++i) {
                std::optional<std::vector<std::string>> classes;
                if (!d["all_classes"].is_null()) classes = d["all_classes"].get<std::vector<std::string>>();
                samples.push_back(make_sample(name, d["answers"][i].get<std::vector<std::string>>(),
                                              d["lengths"][i].get<int64_t>(), classes));
                EXPECT_EXACT(longbench_sample_score(ds.metric, ds.first_line_only, preds[i],
                                                    samples[i].answers, classes),
                             d["per_sample"][i].get<double>(), fmt::format("{} sample {}", name, i));
            }
            const double score = longbench_dataset_score(ds, samples, preds);
            QCOMPARE(qs(fmt::format("{:.2f}", score)), qs(fmt::format("{:.2f}", d["score"].get<double>())));
            const LongBenchEScores e = longbench_e_scores(ds, samples, preds);
            const std::pair<const char*, double> buckets[] = {
                {"0-4k", e.under_4k}, {"4-8k", e.from_4k_to_8k}, {"8k+", e.over_8k}};
            for (const auto& [key, value] : buckets) {
                const json& want = d["score_e"][key];
                if (want.is_null()) {
                    QVERIFY2(std::isnan(value), qPrintable(qs(name + " " + key)));
                } else {
                    QCOMPARE(qs(fmt::format("{:.2f}", value)), qs(fmt::format("{:.2f}", want.get<double>())));
                }
            }
        }
    }

    void jsonl_reading() {
        const fs::path dir = test::temp_dir("longbench-jsonl");
        json second = sample_json("s2");
        second["dataset"] = "trec";
        second["all_classes"] = {"City", "Country"};
        second["answers"] = {"City", "Town"};
        // CRLF line ends, a blank line and a final newline are fine; "language" is ignored
        const fs::path good =
            write_file(dir, "good.jsonl", sample_json().dump() + "\r\n\n" + second.dump() + "\n");
        const auto samples = read_longbench_jsonl(good);
        QCOMPARE(samples.size(), size_t{2});
        QCOMPARE(qs(samples[0].id), QString("s1"));
        QCOMPARE(qs(samples[0].input), QString("Who wrote it?"));
        QCOMPARE(qs(samples[0].context), QString("Passage 1: It was written by Ann."));
        QCOMPARE(samples[0].answers, std::vector<std::string>{"Ann"});
        QCOMPARE(samples[0].length, int64_t{7});
        QCOMPARE(samples[0].line, int64_t{1});
        QVERIFY(!samples[0].all_classes);
        QCOMPARE(samples[1].line, int64_t{3});
        QCOMPARE(*samples[1].all_classes, (std::vector<std::string>{"City", "Country"}));

        // Each bad line: the file, the line number and what is wrong.
        auto bad = [&](const std::string& name, const json& broken) {
            return write_file(dir, name, sample_json().dump() + "\n" + broken.dump() + "\n").string();
        };
        json j = sample_json();
        j.erase("_id");
        std::string f = bad("no_id.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "no \"_id\" field");
        j = sample_json();
        j["answers"] = "Ann";
        f = bad("answers_string.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"answers\" must be a list of strings", "\"Ann\"");
        j["answers"] = {"Ann", 3};
        f = bad("answers_number.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"answers\"[1] must be a string");
        j["answers"] = json::array();
        f = bad("answers_empty.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"answers\" is empty");
        j = sample_json();
        j["length"] = 7.5;
        f = bad("length.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"length\" must be a non-negative integer", "7.5");
        j = sample_json();
        j["all_classes"] = "City";
        f = bad("classes.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"all_classes\" must be a list of strings");
        j = sample_json();
        j.erase("all_classes");
        f = bad("classes_missing.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "no \"all_classes\" field");
        j = sample_json();
        j["context"] = json::object();
        f = bad("context.jsonl", j);
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "\"context\" must be a string");
        f = bad("array.jsonl", json::array({1, 2}));
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":2:", "expected a JSON object");
        f = write_file(dir, "truncated.jsonl", sample_json().dump() + "\n\n{\"input\": \"x\", \n").string();
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":3:", "not a JSON line");
        f = write_file(dir, "empty.jsonl", "\n  \n").string();
        EXPECT_ERROR(read_longbench_jsonl(f), f + ":", "no LongBench sample");
        EXPECT_ERROR(read_longbench_jsonl(dir / "absent.jsonl"), "absent.jsonl", "not found");
    }

    void shipped_config_is_longbench() {
        const std::string found = find_longbench_config();
        QVERIFY2(!found.empty(), "resources/eval/longbench.json not found from the test's directory");
        const LongBenchConfig c = load_longbench_config(found);
        QVERIFY(c.source.find("THUDM/LongBench") != std::string::npos);
        QCOMPARE(c.datasets.size(), size_t{16});
        // LongBench's values: dataset2maxlen, eval.py's metric and first-line rule, pred.py's chat skip
        struct Want {
            const char* name;
            int64_t max_new;
            LongBenchMetric metric;
            bool chat, first_line;
        };
        const Want want[] = {
            {"narrativeqa", 128, LongBenchMetric::QaF1, true, false},
            {"qasper", 128, LongBenchMetric::QaF1, true, false},
            {"multifieldqa_en", 64, LongBenchMetric::QaF1, true, false},
            {"hotpotqa", 32, LongBenchMetric::QaF1, true, false},
            {"2wikimqa", 32, LongBenchMetric::QaF1, true, false},
            {"musique", 32, LongBenchMetric::QaF1, true, false},
            {"gov_report", 512, LongBenchMetric::Rouge, true, false},
            {"qmsum", 512, LongBenchMetric::Rouge, true, false},
            {"multi_news", 512, LongBenchMetric::Rouge, true, false},
            {"trec", 64, LongBenchMetric::Classification, false, true},
            {"triviaqa", 32, LongBenchMetric::QaF1, false, true},
            {"samsum", 128, LongBenchMetric::Rouge, false, true},
            {"passage_count", 32, LongBenchMetric::Count, true, false},
            {"passage_retrieval_en", 32, LongBenchMetric::Retrieval, true, false},
            {"lcc", 64, LongBenchMetric::CodeSim, false, false},
            {"repobench-p", 64, LongBenchMetric::CodeSim, false, false},
        };
        for (const Want& w : want) {
            const LongBenchDataset& d = c.dataset(w.name);
            QVERIFY2(d.max_new_tokens == w.max_new && d.metric == w.metric && d.chat_template == w.chat &&
                         d.first_line_only == w.first_line && d.stop_at_newline == (d.name == "samsum"),
                     w.name);
        }
        QVERIFY(c.dataset("narrativeqa").prompt.find("as concisely") ==
                std::string::npos);                               // LongBench's typo
        QVERIFY(&c.dataset("qasper_e") == &c.dataset("qasper"));  // LongBench-E uses the same prompts
        EXPECT_ERROR(c.dataset("dureader"), "Chinese", "jieba");
        EXPECT_ERROR(c.dataset("nope"), "no LongBench dataset 'nope'", "hotpotqa");
    }

    void config_errors() {
        const json ok = {
            {"prompt", "{context}\n\nQ: {input}"}, {"max_new_tokens", 8}, {"metric", "qa_f1_score"}};
        QCOMPARE(parse_longbench_config(config_with(ok), "c.json").datasets.at(0).chat_template, true);
        auto with = [&](const char* key, const json& v) {
            json e = ok;
            e[key] = v;
            return config_with(e);
        };
        EXPECT_ERROR(parse_longbench_config(with("max_new_token", 3), "c.json"), "c.json: dataset 'mine'",
                     "unknown field 'max_new_token'");
        EXPECT_ERROR(parse_longbench_config(with("prompt", "no placeholder {input}"), "c.json"),
                     "dataset 'mine'", "{context} exactly once");
        EXPECT_ERROR(parse_longbench_config(with("prompt", "{context} {question}"), "c.json"),
                     "placeholder {question}");
        EXPECT_ERROR(parse_longbench_config(with("prompt", "{context} {input} {input}"), "c.json"),
                     "{input} at most once");
        EXPECT_ERROR(parse_longbench_config(with("prompt", "{context} }"), "c.json"), "'}' without its '{'");
        EXPECT_ERROR(parse_longbench_config(with("prompt", "{context} {input"), "c.json"),
                     "'{' without its '}'");
        EXPECT_ERROR(parse_longbench_config(with("max_new_tokens", 0), "c.json"), "\"max_new_tokens\"",
                     ">= 1");
        EXPECT_ERROR(parse_longbench_config(with("max_new_tokens", 1.5), "c.json"), "\"max_new_tokens\"");
        EXPECT_ERROR(parse_longbench_config(with("metric", "bleu"), "c.json"), "dataset 'mine'",
                     "unknown LongBench metric 'bleu'", "qa_f1_score");
        EXPECT_ERROR(parse_longbench_config(with("metric", "qa_f1_zh_score"), "c.json"), "dataset 'mine'",
                     "jieba");
        EXPECT_ERROR(parse_longbench_config(with("chat_template", "yes"), "c.json"), "'chat_template'",
                     "wrong type");
        EXPECT_ERROR(parse_longbench_config(json{{"datasets", json::object()}}, "c.json"), "\"datasets\"");
        EXPECT_ERROR(parse_longbench_config(json{{"sets", 1}}, "c.json"), "unknown field 'sets'");
        const fs::path dir = test::temp_dir("longbench-config");
        const fs::path broken = write_file(dir, "broken.json", "{\"datasets\": ");
        EXPECT_ERROR(load_longbench_config(broken), broken.string(), "invalid JSON");
    }

    void prompt_split() {
        const LongBenchConfig c = shipped_config();
        LongBenchSample s = make_sample("x", {"a"});
        s.context = "CONTEXT-TEXT";
        s.input = "INPUT-TEXT";
        for (const auto& d : c.datasets) {
            const LongBenchPromptText t = split_longbench_prompt(d, s);
            QCOMPARE(qs(t.compressed + t.question), qs(longbench_prompt(d, s)));
            QVERIFY2(t.compressed.size() >= s.context.size() &&
                         t.compressed.compare(t.compressed.size() - s.context.size(), s.context.size(),
                                              s.context) == 0,
                     d.name.c_str());
            const bool has_input = d.prompt.find("{input}") != std::string::npos;
            QVERIFY2((t.question.find(s.input) != std::string::npos) == has_input, d.name.c_str());
            QVERIFY2(t.compressed.find(s.input) == std::string::npos, d.name.c_str());
        }
        // text after {input} stays in the question part
        QCOMPARE(qs(split_longbench_prompt(c.dataset("hotpotqa"), s).question),
                 qs("\n\nAnswer the question based on the given passages. Only give me the answer and do not "
                    "output "
                    "any other words.\n\nQuestion: INPUT-TEXT\nAnswer:"));
        QCOMPARE(qs(split_longbench_prompt(c.dataset("lcc"), s).question), QString("Next line of code:\n"));
        QCOMPARE(qs(split_longbench_prompt(c.dataset("repobench-p"), s).question),
                 QString("INPUT-TEXTNext line of code:\n"));
        // {input} before {context}: the question is compressed with the context; {{ }} are braces
        LongBenchDataset d;
        d.name = "custom";
        d.prompt = "{{Q}} {input} / {context} end";
        const LongBenchPromptText t = split_longbench_prompt(d, s);
        QCOMPARE(qs(t.compressed), QString("{Q} INPUT-TEXT / CONTEXT-TEXT"));
        QCOMPARE(qs(t.question), QString(" end"));
        d.prompt = "{context} {other}";
        EXPECT_ERROR(split_longbench_prompt(d, s), "LongBench dataset 'custom'", "{other}");
    }

    void clean_up_spaces() {
        // transformers' replacements, in order
        QCOMPARE(qs(clean_up_tokenization("Hello , world . I do n't know ? It 's ' quoted ' !")),
                 QString("Hello, world. I don't know? It's'quoted '!"));  // " !" went before " ' " could
    }

    // tokenizer_config.json's clean_up_tokenization_spaces, which decides longbench_decode's clean-up.
    void tokenizer_clean_up_flag() {
        VARRATE_REQUIRE_FIXTURE(llama3, "tokenizers/llama3");
        VARRATE_REQUIRE_FIXTURE(qwen3, "tokenizers/qwen3");
        VARRATE_REQUIRE_FIXTURE(stories, "stories260k");
        QVERIFY(Tokenizer::load(llama3).clean_up_tokenization_spaces());  // true in its config
        QVERIFY(!Tokenizer::load(qwen3).clean_up_tokenization_spaces());  // false in its config
        const json tok = test::read_json(stories / "tokenizer.json");
        QVERIFY(!Tokenizer::from_json(tok, json::object(), "t").clean_up_tokenization_spaces());  // absent
        const Tokenizer on = Tokenizer::from_json(tok, json{{"clean_up_tokenization_spaces", true}}, "t");
        const auto ids = on.encode("Hello , world", false);
        QCOMPARE(qs(longbench_decode(on, ids)), QString("Hello, world"));
        QCOMPARE(qs(on.decode(ids)),
                 QString("Hello , world"));  // the tokenizers library's decode: no clean-up
        EXPECT_ERROR(Tokenizer::from_json(tok, json{{"clean_up_tokenization_spaces", "yes"}}, "t"),
                     "clean_up_tokenization_spaces must be true or false");
    }

    // pred.py's cut, compared with transformers on the shared llama3 tokenizer (clean-up of spaces on).
    void truncation_matches_transformers() {
        VARRATE_REQUIRE_FIXTURE(dir, "tokenizers/llama3");
        const Tokenizer tok = Tokenizer::load(dir);
        QVERIFY(tok.clean_up_tokenization_spaces());
        const json ref = test::read_json(test::oracle_dir() / "longbench.json")["truncation"];
        QCOMPARE(qs(test::sha256_hex(dir / "tokenizer.json")),
                 qs(ref["tokenizer_json_sha256"].get<std::string>()));
        LongBenchDataset d;
        d.name = "hotpotqa";
        d.prompt = ref["template"];
        LongBenchSample s = make_sample("hotpotqa", {"GAO"});
        s.context = ref["context"];
        s.input = ref["input"];
        const std::string prompt = longbench_prompt(d, s);
        QCOMPARE(static_cast<int64_t>(tok.encode(prompt, true).size()),
                 ref["prompt_token_count"].get<int64_t>());
        for (const auto& c : ref["cases"]) {
            const int64_t max_len = c["max_length"];
            const std::string cut = truncate_middle(tok, prompt, max_len);
            QCOMPARE(qs(cut), qs(c["truncated"].get<std::string>()));
            QCOMPARE(tok.encode(cut, true), c["ids"].get<std::vector<int64_t>>());
            if (max_len < 101) {  // the question part (about 40 tokens) does not fit in half the limit
                EXPECT_ERROR(build_longbench_prompt(tok, d, s, max_len, false), "cuts into the question part",
                             fmt::format("end keeps {}", max_len / 2));
                continue;
            }
            // The parts are tokenized apart: the same text, but Llama-3 makes one token of the context's
            // final
            // "." and the template's "\n\n" (".\n\n") when the prompt is tokenized whole, two at the cut.
            const LongBenchPrompt p = build_longbench_prompt(tok, d, s, max_len, false);
            QCOMPARE(p.truncated, max_len < ref["prompt_token_count"].get<int64_t>());
            QVERIFY(!p.chat);
            QCOMPARE(qs(tok.decode(p.parts.context_ids) + tok.decode(p.parts.question_ids)),
                     qs("<|begin_of_text|>" + c["truncated"].get<std::string>()));
            QCOMPARE(p.parts.context_ids.size() + p.parts.question_ids.size(), c["ids"].size() + 1);
            QCOMPARE(qs(tok.decode(p.parts.question_ids)), qs(split_longbench_prompt(d, s).question));
        }
        EXPECT_ERROR(truncate_middle(tok, prompt, 1), "at least 2");
        QVERIFY(!build_longbench_prompt(tok, d, s, 0, false).truncated);

        // With the chat template: the user turn holds the whole prompt; its header is compressed, the
        // assistant header follows the question. trec skips the template as pred.py does.
        const LongBenchPrompt chat = build_longbench_prompt(tok, d, s, 0, true);
        QVERIFY(chat.chat);
        const std::string head = tok.decode(chat.parts.context_ids),
                          tail = tok.decode(chat.parts.question_ids);
        QVERIFY2(
            head.rfind("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nAnswer the question",
                       0) == 0,
            qPrintable(qs(head.substr(0, 120))));
        QVERIFY(tail.find("Question: " + s.input + "\nAnswer:<|eot_id|>") != std::string::npos);
        QVERIFY(tail.find("<|start_header_id|>assistant<|end_header_id|>\n\n") != std::string::npos);
        LongBenchDataset trec = d;
        trec.chat_template = false;
        QVERIFY(!build_longbench_prompt(tok, trec, s, 0, true).chat);
    }
};

QTEST_GUILESS_MAIN(TestLongBench)
#include "test_core_longbench.moc"

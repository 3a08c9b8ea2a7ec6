#pragma once
// LongBench's (v1) English answer metrics, as THUDM/LongBench's LongBench/metrics.py and eval.py compute them
// (those files are the tie-breaker): the value of one prediction against one gold answer, the per-sample
// score (first line for some datasets, max over the gold answers) and the dataset score (100 x the mean).
// Strings are UTF-8 and are compared as Python compares str: by code point. Where the Python code has a
// quirk (ROUGE's sentence split on '.', classification's removal during iteration, fuzzywuzzy's rounding)
// it is reproduced on purpose: a score must be comparable with published LongBench numbers.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace varrate {

// eval.py's dataset2metric, named after metrics.py's functions. The Chinese metrics that need jieba word
// segmentation (qa_f1_zh_score, rouge_zh_score) are not implemented: parse_longbench_metric says so.
enum class LongBenchMetric { QaF1, Rouge, Classification, Retrieval, RetrievalZh, Count, CodeSim };

// metrics.py's name: "qa_f1_score", "rouge_score", "classification_score", "retrieval_score",
// "retrieval_zh_score", "count_score", "code_sim_score".
std::string to_string(LongBenchMetric m);
// The metric of that name; Error naming the known ones otherwise, or saying that a jieba metric is not
// implemented.
LongBenchMetric parse_longbench_metric(const std::string& name);

// fuzz.ratio's two implementations, which fuzzywuzzy picks by what is installed. LongBench's
// requirements.txt installs fuzzywuzzy without python-Levenshtein, so difflib's is LongBench's.
enum class FuzzRatio {
    Difflib,      // difflib.SequenceMatcher(None, a, b).ratio() (autojunk on): 2 M / (|a| + |b|)
    Levenshtein,  // Levenshtein.ratio (python-Levenshtein installed): 1 - indel distance / (|a| + |b|)
};

// metrics.py's normalize_answer: lower case (Python's str.lower), ASCII punctuation removed, the words
// "a", "an", "the" replaced by a space, whitespace runs collapsed to one space, no leading/trailing space.
std::string normalize_answer(std::string_view s);

// Each returns metrics.py's value in [0, 1] for one prediction and one gold answer.
double qa_f1_score(std::string_view prediction, std::string_view ground_truth);
// The `rouge` package's (1.0.1) summary-level ROUGE-L F: sentences split on '.', words on whitespace,
// case kept; 0 when either text has no sentence (LongBench's except branch).
double rouge_score(std::string_view prediction, std::string_view ground_truth);
double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes);
// Error when the gold answer has no "Paragraph N" ("段落N" for the Chinese variant).
double retrieval_score(std::string_view prediction, std::string_view ground_truth);
double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth);
double count_score(std::string_view prediction, std::string_view ground_truth);
double code_sim_score(std::string_view prediction, std::string_view ground_truth,
                      FuzzRatio fuzz = FuzzRatio::Difflib);
// fuzzywuzzy's fuzz.ratio: 100 when equal, 0 when either is empty, else round(100 x ratio) (half to even).
int fuzz_ratio(std::string_view a, std::string_view b, FuzzRatio fuzz = FuzzRatio::Difflib);

// eval.py's per-sample score: the prediction's first line when `first_line_only` (after leading newlines),
// then the max over the gold answers (0 when there are none). all_classes: needed by Classification only
// (Error when it is missing).
double longbench_sample_score(LongBenchMetric metric, bool first_line_only, std::string_view prediction,
                              const std::vector<std::string>& answers,
                              const std::optional<std::vector<std::string>>& all_classes,
                              FuzzRatio fuzz = FuzzRatio::Difflib);

}  // namespace varrate

#pragma once
// LongBench (THUDM/LongBench, v1): samples from a user's JSONL file, the per-dataset prompt settings
// (resources/eval/longbench.json ships LongBench's English values), each sample's prompt split into the part
// a KV-cache method compresses and the question part, pred.py's truncation from the middle, and eval.py's
// dataset scores (metrics in core/longbench_metrics.h). No data set is bundled or downloaded: the user brings
// the JSONL files.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/prompt.h"
#include "core/suites/longbench_metrics.h"

namespace varrate {

class Tokenizer;

// One line of a LongBench JSONL file.
struct LongBenchSample {
    std::string id;       // "_id"
    std::string dataset;  // "dataset": selects the config entry (LongBench-E's "<name>_e" too)
    std::string input;    // the question or query; "" for datasets without one (gov_report, lcc, ...)
    std::string context;  // the long document
    std::vector<std::string> answers;                     // the gold answers, at least one
    std::optional<std::vector<std::string>> all_classes;  // the label set (trec, lsht); null elsewhere
    int64_t length = 0;                                   // LongBench's context length in words
    int64_t line = 0;                                     // 1-based line in the file, for messages
};

// Every sample of the file, or an Error "<file>:<line>: ..." for the first bad line (not JSON, not an
// object, one of the seven fields missing or of the wrong type, no gold answer) and for a file without
// samples: nothing is returned half-read. Blank lines are skipped; other fields (LongBench-E's "language")
// are ignored.
std::vector<LongBenchSample> read_longbench_jsonl(const std::filesystem::path& path);
// The same on text already read; `where` names it in messages.
std::vector<LongBenchSample> parse_longbench_jsonl(const std::string& text, const std::string& where);

// One dataset's settings: LongBench's config/dataset2prompt.json, dataset2maxlen.json and the per-dataset
// rules of pred.py and eval.py.
struct LongBenchDataset {
    std::string name;
    // Python format string: {context} once, {input} at most once, {{ and }} for literal braces.
    std::string prompt;
    int64_t max_new_tokens = 0;
    bool chat_template = true;  // false: plain text even for a chat model (trec, triviaqa, samsum, lsht, lcc,
                                // repobench-p)
    LongBenchMetric metric = LongBenchMetric::QaF1;
    bool first_line_only = false;  // score the prediction's first line (trec, triviaqa, samsum, lsht)
    bool stop_at_newline = false;  // pred.py also stops generating at "\n" (samsum)
};

struct LongBenchConfig {
    std::string where;                       // the file, for messages
    std::string source;                      // the file's provenance note ("" when none)
    std::vector<LongBenchDataset> datasets;  // sorted by name
    // The entry of that name ("<name>_e" falls back to "<name>": LongBench-E uses LongBench's prompts);
    // Error listing the known names, or saying that LongBench's Chinese datasets are not supported.
    const LongBenchDataset& dataset(const std::string& name) const;
};

// {"source": "...", "datasets": {"<name>": {"prompt": ..., "max_new_tokens": ..., "metric": ...,
// "chat_template": true, "first_line_only": false, "stop_at_newline": false}}}; the last three are
// optional. Error "<file>: dataset '<name>': ..." for anything else: unknown fields, a template without
// {context} or with another placeholder, a count below 1, an unknown metric or one that needs jieba.
LongBenchConfig load_longbench_config(const std::filesystem::path& path);
LongBenchConfig parse_longbench_config(const nlohmann::json& j, const std::string& where);
// resources/eval/longbench.json in the first data root (core/data_paths.h) that has it; "" when none does.
std::string find_longbench_config();

// The template filled with the sample (what pred.py's prompt_format.format(**sample) gives).
std::string longbench_prompt(const LongBenchDataset& d, const LongBenchSample& s);

// The filled template cut right after the context: `compressed` is the template up to and including
// {context}, `question` everything after it ({input} and the instruction text around it, e.g. "\nAnswer:"),
// so that compressed + question == longbench_prompt(). Text that LongBench puts after {input} (the answer
// cue, passage_retrieval_en's format instruction) is part of the question, never compressed. A template
// whose {input} comes BEFORE {context} (none of LongBench's) leaves the question inside the compressed part.
struct LongBenchPromptText {
    std::string compressed;
    std::string question;
};
LongBenchPromptText split_longbench_prompt(const LongBenchDataset& d, const LongBenchSample& s);

// What pred.py's tokenizer.decode(ids, skip_special_tokens=True) gives with transformers: the decode with
// special tokens skipped, then, when the tokenizer's config asks for it (Llama-3's does), transformers'
// clean-up of tokenization spaces. Use it for the predictions too: eval.py scores that text.
std::string longbench_decode(const Tokenizer& tokenizer, const std::vector<int64_t>& ids);
// transformers' clean_up_tokenization: " ." " ?" " !" " ," lose their space, " ' " becomes "'", and " n't",
// " 'm", " 's", " 've", " 're" are joined to the word before, one replacement after the other.
std::string clean_up_tokenization(std::string text);

// pred.py's truncation: when `text` encodes (with BOS, as the tokenizer's call does) to more than
// `max_tokens` ids, longbench_decode of the first max_tokens/2 ids followed by that of the last
// max_tokens/2; `text` itself otherwise. Error when max_tokens < 2.
std::string truncate_middle(const Tokenizer& tokenizer, const std::string& text, int64_t max_tokens);

struct LongBenchPrompt {
    // context_ids: BOS or chat header + template head + context; question_ids: the rest (+ the assistant
    // header with a chat template); prefix_ids: empty (LongBench gives no answer prefix).
    PromptParts parts;
    bool truncated = false;  // the prompt was cut in the middle
    bool chat = false;       // the chat template was applied
};
// The sample's prompt as a model sees it: filled, truncated to `max_prompt_tokens` as pred.py does (0:
// never), then split (compressed part / question part) and tokenized, with the tokenizer's chat template when
// `chat` is set, the dataset allows it and the tokenizer has one (LongBench skips it for six datasets).
// The two parts are tokenized separately, as build_prompt does, so ids at the cut may differ from
// tokenizing the whole prompt. Error when truncation cut into the question part (it is longer than half
// the limit).
LongBenchPrompt build_longbench_prompt(const Tokenizer& tokenizer, const LongBenchDataset& d,
                                       const LongBenchSample& s, int64_t max_prompt_tokens, bool chat);

// eval.py's scorer: 100 x the mean over samples of longbench_sample_score (unrounded; eval.py reports it
// rounded to 2 decimals). predictions[i] answers samples[i]. Error when the counts differ, there is no
// sample, or a sample is of another dataset.
double longbench_dataset_score(const LongBenchDataset& d, const std::vector<LongBenchSample>& samples,
                               const std::vector<std::string>& predictions,
                               FuzzRatio fuzz = FuzzRatio::Difflib);

// eval.py's scorer_e (LongBench-E): the same per context-length bucket of `length` (words); NaN for an
// empty bucket, as numpy's mean of nothing.
struct LongBenchEScores {
    double under_4k = 0;       // length < 4000
    double from_4k_to_8k = 0;  // 4000 <= length < 8000
    double over_8k = 0;        // length >= 8000
};
LongBenchEScores longbench_e_scores(const LongBenchDataset& d, const std::vector<LongBenchSample>& samples,
                                    const std::vector<std::string>& predictions,
                                    FuzzRatio fuzz = FuzzRatio::Difflib);

}  // namespace varrate

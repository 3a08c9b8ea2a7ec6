#pragma once
// RULER's synthetic tasks (the rules of NVIDIA/RULER's scripts/data/synthetic, summarised in
// docs/reference-methods.md of the shared folder) and its scorers. A sample is split the way kvpress's RULER
// data is: the context (RULER's template up to the end of the haystack, one-shot example first: what a
// KV-cache method compresses), the question and the answer prefix; core/prompt.h's build_prompt joins them
// (its "Question:" / "Answer:" labels stand for RULER's, so they are not in the question or the prefix).
// Lengths follow RULER: the haystack grows (binary search over its units: essay words, noise lines,
// distractor needles, list words, coded words) to the largest size whose prompt tokens, as build_prompt
// tokenizes context + question + answer prefix, plus the tokens to generate fit the target length.
// Where this differs from RULER's scripts, on purpose: every shuffle and position is drawn per sample (RULER
// reuses one fixed-seed shuffle); distractor needles never repeat a real key or value, VT names are always
// distinct and cwe's one-shot example shares no word with the list, so each answer is in the context exactly
// as often as the rules say; sentences end at . ! ? (RULER uses nltk's Punkt); fwe is fitted by the same
// binary search as the others (RULER steps by length/32 words); cwe stops at the word list's size (RULER
// then switches to another list) with an Error.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace varrate {

class Tokenizer;
struct RulerWordLists;

enum class RulerMetric { StringMatchAll, StringMatchPart };
std::string to_string(RulerMetric m);  // "string_match_all" | "string_match_part"

// niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe (RULER's order).
const std::vector<std::string>& ruler_task_names();
// Throw Error naming the task and the known ones when `task` is not one of them.
int64_t ruler_max_new_tokens(const std::string& task);  // niah 128, vt 30, cwe 120, fwe 50
RulerMetric ruler_metric(const std::string& task);      // as RULER's eval constants.py assigns

struct RulerOptions {
    uint64_t seed = 42;
    bool chat = false;  // lengths counted as build_prompt(chat) tokenizes the prompt
    // The essay haystack: "" = the procedural filler of core/demo_corpus.h (one text shared by every
    // sample, as RULER's essays are); else this text's words, repeated as needed.
    std::string essay_text;
    std::string word_dir;  // the wonderwords lists; "" = find_ruler_word_dir()
};

struct RulerSample {
    std::string task;
    int64_t index = 0;
    std::string context;   // compressed part: template (one-shot example first) up to the haystack's end
    std::string question;  // e.g. "What is the special magic number for ... mentioned in the provided text?"
    std::string answer_prefix;  // e.g. "The special magic number for ... mentioned in the provided text is"
    std::vector<std::string> outputs;  // the references
    int64_t max_new_tokens = 0;
    RulerMetric metric = RulerMetric::StringMatchAll;
    int64_t prompt_tokens = 0;  // context + question + answer prefix tokens as build_prompt makes them
    int64_t target_length = 0;  // prompt_tokens + max_new_tokens <= target_length
    // What the tests and probes look at: the haystack's size in its units (essay words, noise lines,
    // distractor needles, list words, coded words), the inserted statements (NIAH needles, VT chain) in
    // context order, and each NIAH needle's depth in percent (essay: the drawn depth point; line haystacks:
    // 100 * line / lines).
    int64_t haystack_units = 0;
    std::vector<std::string> needles;
    std::vector<double> depths;
};

// Deterministic: sample `index` of a task at a length draws its keys, values and needles from a seed of
// (seed, task, length, index), so samples are independent and regenerating one gives the same text. Not
// thread-safe (it caches the essay and the word lists): one generator per thread.
class RulerGenerator {
  public:
    RulerGenerator(const Tokenizer& tokenizer, RulerOptions options);
    ~RulerGenerator();
    // Throws Error for an unknown task, a negative index or a length too short for the smallest haystack.
    RulerSample generate(const std::string& task, int64_t length, int64_t index);

  private:
    const RulerWordLists& words();
    const std::vector<std::string>& essay_words(size_t n);
    const Tokenizer& tokenizer_;
    RulerOptions options_;
    std::unique_ptr<RulerWordLists> words_;
    struct Essay;
    std::unique_ptr<Essay> essay_;
};

// RULER's postprocessing of a prediction: control characters (U+0000-U+001F) become newlines, then leading
// and trailing whitespace is removed.
std::string ruler_postprocess(const std::string& prediction);
// Scores in [0, 100] of one (already postprocessed) prediction; a reference counts when it occurs in the
// prediction, case-insensitively. all: the share of references that occur; part: 100 if any does.
double ruler_string_match_all(const std::string& prediction, const std::vector<std::string>& references);
double ruler_string_match_part(const std::string& prediction, const std::vector<std::string>& references);
// One prediction for a sample: postprocessed, then scored with the sample's metric and references.
double ruler_score(const RulerSample& sample, const std::string& prediction);

}  // namespace varrate

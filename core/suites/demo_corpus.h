#pragma once
// The procedural corpus of the embedded demo model: filler sentences from the project's own lexicon and
// grammar, needles "The special magic number for <key> is <digits>.", distractor needles with other keys, and
// the question "What is the special magic number for <key>?". No downloaded data. Deterministic per seed.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "models/tokenizer/bpe_trainer.h"

namespace varrate {

struct Needle {
    std::string key;               // a colour-animal compound such as "amberfox": one token
    std::string value;             // 6-7 digits
    std::string sentence() const;  // "The special magic number for <key> is <value>."
};

// Filler text and needles. Every filler word and key is a whole word of the lexicon, so a word-level
// tokenizer makes each one a single token.
class DemoTextGenerator {
  public:
    explicit DemoTextGenerator(uint64_t seed);
    std::string filler_sentence();                                   // ends with "." and no trailing space
    Needle needle(const std::vector<std::string>& avoid_keys = {});  // a fresh key not in avoid_keys
    static std::string question(const std::string& key);  // "What is the special magic number for <key>?"
    // "The special magic number for <key> is": the start of the reply, given in the prompt (RULER's
    // convention)
    static std::string answer_prefix(const std::string& key);
    static const std::vector<std::string>& lexicon();  // filler words
    static const std::vector<std::string>& keys();     // needle keys
    std::mt19937_64& rng() { return rng_; }

    // Words that also occur without a leading space (first word of a text or of a line): the capitalised
    // sentence starters, including those of the needle and the question.
    static const std::vector<std::string>& line_start_words();
    // Every word of the needle and question templates ("The", "special", "magic", "number", "for", ...).
    static const std::vector<std::string>& template_words();
    // Uniform integer in [0, n) from rng(); the same on every standard library (unlike std distributions).
    uint64_t below(uint64_t n);

  private:
    std::mt19937_64 rng_;
};

// One haystack document with its target needle, distractor needles and question.
struct DemoDocument {
    std::string text;                 // filler sentences with every needle inserted at a sentence boundary
    Needle needle;                    // the one the question asks about
    std::vector<Needle> distractors;  // needles with other keys (and other values)
    std::string question;             // DemoTextGenerator::question(needle.key)
    std::string answer_prefix;        // DemoTextGenerator::answer_prefix(needle.key), the end of the prompt
    std::string answer;               // " " + needle.value + ".": the expected reply after the prefix
    size_t needle_offset = 0;         // char offset of needle.sentence() in text
    int64_t n_tokens = 0;             // demo_token_count(text)

    // What the demo model is trained and evaluated on: text + "\n\nQuestion: " + question + "\nAnswer: " +
    // answer_prefix (the plain prompt of core/prompt.h, as compare and niah build it), after which the model
    // completes the needle sentence with `answer` (then end of sequence).
    std::string prompt() const;
};

// A document of about `target_tokens` tokens of the demo tokenizer (see demo_token_count), never fewer, with
// the needle's sentence starting at about depth_percent (0 = first sentence, 100 = last sentence) of the text
// and `n_distractors` distractor needles at random sentence boundaries. Deterministic per seed.
// repeat_share > 0 (training only): that fraction of filler sentences repeats an earlier sentence of the same
// document, a dense next-token signal for copying (induction) that the needle task then builds on.
DemoDocument make_document(uint64_t seed, int64_t target_tokens, int n_distractors, double depth_percent,
                           double repeat_share = 0.0);

// Number of pieces of the demo pre-tokenizer (a word with its leading space, a single digit with its leading
// space, one punctuation character, a run of whitespace). With the demo tokenizer each piece of corpus text
// is one token, so this is the token count of corpus text (without BOS).
int64_t demo_token_count(const std::string& text);

// The demo model's tokenizer: byte-level BPE trained on `n_documents` corpus documents (prompt + answer) plus
// every lexicon word, key, template word and digit, so that each of them (with its leading space, and the
// capitalised line-start words also without) is one token. Deterministic per seed.
TrainedTokenizer train_demo_tokenizer(uint64_t seed = 20240601, int n_documents = 64);
// The same with a second vocabulary: the pieces of `extra_texts` (e.g. RULER's word lists and templates)
// are merged after the demo corpus's, by their own frequencies, until the vocabulary holds max_vocab_size
// tokens (every demo piece stays one token: the demo texts outweigh all of them). Throws Error when the
// cap is too small for the demo pieces.
TrainedTokenizer train_demo_tokenizer(uint64_t seed, int n_documents,
                                      const std::vector<std::string>& extra_texts, int64_t max_vocab_size);

}  // namespace varrate

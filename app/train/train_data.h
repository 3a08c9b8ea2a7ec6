#pragma once
// Training and evaluation sequences of the demo model: corpus documents tokenized with the demo tokenizer,
// each followed by questions and answers, with the positions whose next token the loss (or the eval) scores.
// Everything is a pure function of (seed, step) or of the eval grid, so a resumed run sees the same data.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/hash.h"
#include "core/suites/demo_corpus.h"
#include "core/suites/ruler_tasks.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate::train {

// Document seeds of training are below 2^63; evaluation uses seeds at or above 2^63, never seen in training.
constexpr uint64_t kEvalSeedBit = uint64_t(1) << 63;

struct Sequence {
    std::vector<int64_t> ids;        // BOS, document, then "\n" question "\n" answer pairs, EOS
    std::vector<int64_t> score_pos;  // position p whose logits must predict ids[p + 1]
    int64_t doc_tokens = 0;          // tokens of the document text
    int n_distractors = 0;
    double depth = 0;
    int64_t first_answer_end = 0;  // score_pos entries of the first answer (the evaluated one) are [0, this)
    // Copy targets of the answers' digits: the position predicting a digit of a reply (copy_query) and the
    // position of that digit in the asked needle of the document (copy_source), for attention supervision.
    std::vector<int64_t> copy_query, copy_source;
    std::vector<int64_t> copy_head;  // query head (0 or 1 of the last layer) supervised for each pair
    // Key-gather targets: every position of a needle sentence from "is" to its last digit, in the document
    // and in each reply, paired with that sentence's key token (what the copy head must match on).
    std::vector<int64_t> gather_query, gather_source;
};

struct Batch {
    at::Tensor ids;           // [B, T] int64, right-padded with pad_id
    at::Tensor rows;          // [N] int64 flat indices b*T + p of the scored positions
    at::Tensor targets;       // [N] int64 next tokens
    at::Tensor lm_rows;       // [M] every non-pad position with a next token (the language-modelling rows)
    at::Tensor lm_targets;    // [M]
    int64_t n_tokens = 0;     // non-pad tokens
    at::Tensor copy_index;    // [K] flat indices ((b*2 + head)*T + query)*T + source into [B, 2, T, T]
    at::Tensor gather_index;  // [G] flat indices (b*2*T + query)*T + source into [B, 2, T, T] (head 0)
};

// Training curriculum: document lengths grow with progress; distractors (0..max) from the first step.
struct Curriculum {
    std::vector<int64_t> lengths = {256, 512, 1024, 1536, 2048, 2304};   // document token buckets
    std::vector<double> unlock_at = {0.0, 0.0, 0.08, 0.16, 0.25, 0.35};  // fraction of the run
    int max_distractors = 3;
    int max_questions = 4;    // questions per document (the target first, then other needles)
    double repeat_share = 0;  // fraction of filler sentences repeating an earlier one (see make_document)
    int copy_heads = 1;  // query heads (0, or 0 and 1) of the last layer whose copy attention is supervised
    // RULER-format steps (core/ruler_tasks.h): this fraction of the steps trains on samples of RULER's tasks
    // (uniformly over ruler_tasks, empty = all) at one of ruler_lengths (prompt + answer tokens), drawn from
    // seeds below 2^63; the other steps train on the needle documents above.
    double ruler_share = 0;
    std::vector<int64_t> ruler_lengths = {1024, 2048};
    std::vector<std::string> ruler_tasks;
    int64_t pick_length(uint64_t seed, int64_t step, int64_t total_steps) const;
};

class DemoData {
  public:
    DemoData(const Tokenizer& tok, int64_t pad_id);

    // One training document: `n_distractors` distractors, several questions (all scored), EOS at the end.
    Sequence training_sequence(uint64_t doc_seed, int64_t doc_tokens, int n_distractors, double depth,
                               int n_questions, double repeat_share = 0, int copy_heads = 1) const;
    // The evaluation format: document, one question with the answer prefix, the answer; only the answer is
    // scored.
    Sequence eval_sequence(const DemoDocument& doc) const;
    // A RULER sample as the eval suite prompts it (plain prompt: context, question, answer prefix), followed
    // by ruler_reply(sample) and EOS, all scored. A reference that occurs once in the context gets copy
    // targets for its tokens.
    Sequence ruler_sequence(const RulerSample& sample, int copy_heads = 1) const;
    // The batch of step `step`: tokens_per_step / length documents of the curriculum's length (at least one),
    // generated on `threads` threads (the result does not depend on it).
    std::vector<Sequence> training_step(uint64_t seed, int64_t step, int64_t total_steps,
                                        int64_t tokens_per_step, const Curriculum& curriculum,
                                        int threads = 1) const;
    Batch collate(const std::vector<Sequence>& seqs, bool first_answer_only = false) const;

  private:
    std::vector<Sequence> ruler_step(uint64_t seed, int64_t step, int64_t tokens_per_step,
                                     const Curriculum& c, int threads) const;
    void add_copy_targets(Sequence& s, size_t doc_end, const std::vector<int64_t>& reply,
                          int copy_heads) const;
    static void add_gather_targets(Sequence& s, int64_t key_pos, size_t n_digits);
    const Tokenizer& tok_;
    int64_t pad_id_;
};

// What the model is taught to answer after a RULER sample's answer prefix (scored by ruler_score as 100):
// NIAH values in the order the question asks them (one key: in context order) joined by ", " with a full
// stop; VT's names in chain order; cwe's common words as RULER's numbered list in first-occurrence order;
// fwe's words by frequency. `spans` receives each reference's [begin, end) char range in the reply.
std::string ruler_reply(const RulerSample& sample, std::vector<std::pair<size_t, size_t>>* spans = nullptr);

// The texts that give the tokenizer RULER's vocabulary: the wonderwords lists (with a leading space; nouns
// also without, as the second half of a word key) and one sample of every task (its templates).
std::vector<std::string> ruler_tokenizer_texts(const Tokenizer& base_tokenizer);

}  // namespace varrate::train

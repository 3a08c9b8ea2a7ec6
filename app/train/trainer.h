#pragma once
// The demo model's training run: AdamW with linear warmup and cosine decay, gradient-norm clipping, a
// deterministic seed, checkpoints that resume bit-exactly, periodic exact-match evaluation per document
// length and per number of distractors, and the export of a Hugging Face model directory.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "app/train/demo_llama.h"
#include "app/train/train_data.h"

namespace varrate::train {

struct TrainOptions {
    std::filesystem::path out_dir;         // the exported model
    std::filesystem::path checkpoint_dir;  // step-NNNNNN/ subdirectories ("" = no checkpoints)
    std::filesystem::path resume;          // a checkpoint directory to continue from
    std::filesystem::path init_from;       // start from these weights (an exported model dir), new optimizer
    int64_t steps = 1200;
    int64_t stop_at = 0;  // end early (after checkpointing) at this step, as if interrupted
    uint64_t seed = 1234;
    int threads = 2;
    std::string device = "cpu";  // "cuda" trains on the GPU (minutes instead of an hour)
    int data_threads = 1;        // threads generating the documents of the next step (prefetched)
    double lm_weight = 0;        // weight of next-token loss on every position, besides the answer spans
    // > 0: weight of attention supervision (query head 0 of the last layer attends to the needle digit each
    // answer digit copies; cross-entropy of that attention weight)
    double copy_attention_weight = 0;
    // >= 0 (with copy_attention_weight > 0): query head 0 of this layer is supervised to attend from each
    // needle or reply position between "is" and the last digit to the sentence's key token, so that the
    // digits carry their key for the copy head to match (-1 = off)
    int64_t key_gather_layer = -1;
    // >= 0 (with copy_attention_weight > 0): query head 0 of this layer is supervised to attend from every
    // position to the one before it (a previous-token head: the half of an induction circuit that lets the
    // copy head match a needle digit by the digit before it) (-1 = off)
    int64_t prev_token_layer = -1;
    // > 0 (with copy_attention_weight > 0): weight of a cross-entropy on the supervised copy head's own logit
    // contribution (the final norm and the lm_head applied to its o_proj term) at each copying position, with
    // the copied token as target: it trains the head's value/output map to tell every copied token apart
    double copy_logit_weight = 0;
    bool lm_head_from_embedding = false;  // with --untied: the lm_head starts as a copy of the embedding
    double embed_init_std = 0;            // > 0: the input embedding starts at this std instead of 0.02
    int64_t export_every = 0;  // also export the model every N steps (a long run leaves a usable model)
    double minutes = 0;        // > 0: choose `steps` so that the run fits this time (timing probe first)
    int64_t tokens_per_step = 8192;
    double lr = 2e-3, min_lr_ratio = 0.1, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0;
    int64_t warmup = 100;
    int64_t checkpoint_every = 200;
    int64_t eval_every = 200;
    int eval_samples = 2;         // per (length, depth) during training
    int final_eval_samples = 10;  // per (length, depth) at the end (0 = none)
    std::vector<int64_t> eval_lengths = {512, 1024, 2048};
    std::vector<double> eval_depths = {0, 25, 50, 75, 100};
    int64_t log_every = 10;
    bool fixed_batch = false;           // every step trains on the batch of step 0 (overfitting check)
    bool bf16_attention = true;         // T x T scores and probabilities in bf16
    std::filesystem::path dump_logits;  // after training, save ids + all-position fp32 logits here
    // > 0: the tokenizer also learns RULER's vocabulary (train_data.h's ruler_tokenizer_texts) up to this
    // many tokens; 0: the demo corpus's vocabulary alone
    int64_t ruler_vocab = 0;
    std::vector<int64_t> ruler_eval_lengths = {1024};  // RULER teacher-forced checks (with ruler_share > 0)
    DemoModelShape shape;                              // vocab_size comes from the tokenizer
    Curriculum curriculum;
};

struct EvalResult {
    std::vector<std::pair<std::string, double>> by_ruler_task;  // RULER task -> exact reply (teacher-forced)
    std::vector<std::pair<int64_t, double>> by_length;          // document tokens -> exact match
    std::vector<std::pair<int, double>> by_distractors;         // number of distractors -> exact match
    std::vector<std::pair<double, double>> by_depth;            // depth percent -> exact match
    double overall = 0;
    int64_t samples = 0;
};

// Runs (or resumes) training and writes the export; returns the last evaluation.
EvalResult run_training(const TrainOptions& options);

}  // namespace varrate::train

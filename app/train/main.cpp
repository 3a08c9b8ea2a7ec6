// varrate-train: trains the embedded demo model (resources/models/varrate-demo) from the project's own
// procedural corpus and exports it as a Hugging Face model directory.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "app/train/trainer.h"
#include "base/error.h"

int main(int argc, char** argv) {
    using varrate::train::TrainOptions;
    TrainOptions o;
    CLI::App app{
        "Train the VarRate demo retrieval model (Llama architecture) on the procedural needle corpus"};
    std::string out, checkpoint_dir, resume, init_from, dump_logits, attention = "bf16";
    app.add_option("--out", out,
                   "Directory for the exported model (config.json, model.safetensors, tokenizer)")
        ->required();
    app.add_option("--steps", o.steps, "Optimizer steps of the whole run")->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the initial weights and of the training data")
        ->capture_default_str();
    app.add_option("--threads", o.threads, "CPU threads (the run is bit-reproducible for a fixed count)")
        ->capture_default_str();
    app.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
    app.add_option("--data-threads", o.data_threads, "Threads generating the next step's documents")
        ->capture_default_str();
    app.add_option("--lm-weight", o.lm_weight,
                   "Weight of the next-token loss on every position (0 = answer spans only)")
        ->capture_default_str();
    app.add_option(
           "--repeat-share", o.curriculum.repeat_share,
           "Fraction of filler sentences that repeat an earlier one (a copying signal for --lm-weight)")
        ->capture_default_str();
    app.add_option("--copy-attention", o.copy_attention_weight,
                   "Weight of attention supervision: query head 0 of the last layer attends to the needle "
                   "digit each answer digit copies (0 = off)")
        ->capture_default_str();
    app.add_option("--copy-heads", o.curriculum.copy_heads,
                   "With --copy-attention: supervise query head 0 (1) or heads 0 and 1 (2) of the last layer")
        ->check(CLI::Range(1, 2))
        ->capture_default_str();
    app.add_option("--key-gather-layer", o.key_gather_layer,
                   "With --copy-attention: also supervise query head 0 of this layer (below the last) to "
                   "attend from each needle and reply digit to its sentence's key token (-1 = off)")
        ->capture_default_str();
    app.add_option("--prev-token-layer", o.prev_token_layer,
                   "With --copy-attention: also supervise query head 0 of this layer (below the last) to "
                   "attend from every position to the previous one (-1 = off)")
        ->capture_default_str();
    app.add_option(
           "--copy-logit", o.copy_logit_weight,
           "With --copy-attention: weight of a cross-entropy on the copy head's own logit "
           "contribution (final norm + lm_head of its output term) against the copied token (0 = off)")
        ->capture_default_str();
    app.add_option("--embed-init-std", o.embed_init_std,
                   "Std of the input embedding's initialisation (0 = 0.02 like every other matrix)")
        ->capture_default_str();
    app.add_option("--max-distractors", o.curriculum.max_distractors,
                   "Distractor needles per training document: 0..N, drawn uniformly")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    app.add_option("--max-questions", o.curriculum.max_questions,
                   "Questions per training document (the target first, then other needles), all scored")
        ->check(CLI::Range(1, 17))
        ->capture_default_str();
    app.add_option("--ruler-share", o.curriculum.ruler_share,
                   "Fraction of the steps that train on RULER-format samples of every task (0 = none)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--ruler-lengths", o.curriculum.ruler_lengths,
                   "Lengths (prompt + answer tokens) of the RULER training samples")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--ruler-tasks", o.curriculum.ruler_tasks,
                   "RULER tasks of the training samples (default all)")
        ->delimiter(',');
    app.add_option("--ruler-eval-lengths", o.ruler_eval_lengths,
                   "Lengths of the periodic RULER checks (teacher-forced exact replies, with --ruler-share)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option(
           "--ruler-vocab", o.ruler_vocab,
           "Also give the tokenizer RULER's vocabulary (word lists, templates), up to this many tokens "
           "(0 = the demo corpus's vocabulary alone)")
        ->capture_default_str();
    app.add_option("--export-every", o.export_every, "Also export the model every N steps (0 = at the end)")
        ->capture_default_str();
    app.add_option("--minutes", o.minutes,
                   "Fit the run into this many minutes: a timing probe chooses --steps (printed, so that "
                   "--steps N reproduces the run)");
    app.add_option(
        "--init-from", init_from,
        "Start from the weights of this exported model directory (a new optimizer and schedule; a resumed "
        "run names it again)");
    app.add_option("--resume", resume, "Continue from this checkpoint directory (step-NNNNNN)");
    app.add_option("--checkpoint-dir", checkpoint_dir, "Write step-NNNNNN checkpoints here");
    app.add_option("--checkpoint-every", o.checkpoint_every, "Steps between checkpoints (0 = none)")
        ->capture_default_str();
    app.add_option("--stop-at", o.stop_at, "Stop after this step with a checkpoint, as if interrupted");
    app.add_option("--eval-every", o.eval_every, "Steps between evaluations (0 = none)")
        ->capture_default_str();
    app.add_option("--eval-samples", o.eval_samples, "Documents per (length, depth) in periodic evaluations")
        ->capture_default_str();
    app.add_option("--final-eval-samples", o.final_eval_samples,
                   "Documents per (length, depth) in the final evaluation (0 = none)")
        ->capture_default_str();
    app.add_option("--eval-lengths", o.eval_lengths, "Document lengths (tokens) of the evaluation")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--tokens-per-step", o.tokens_per_step, "Document tokens per optimizer step")
        ->capture_default_str();
    app.add_option("--lr", o.lr, "Peak learning rate (AdamW)")->capture_default_str();
    app.add_option("--warmup", o.warmup, "Linear warmup steps before the cosine decay")
        ->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of the matrices")
        ->capture_default_str();
    app.add_option("--grad-clip", o.grad_clip, "Gradient-norm clipping threshold")->capture_default_str();
    app.add_option("--log-every", o.log_every, "Steps between progress lines")->capture_default_str();
    app.add_option("--hidden", o.shape.hidden, "Model width")->capture_default_str();
    app.add_option("--layers", o.shape.layers, "Decoder layers")->capture_default_str();
    app.add_option("--heads", o.shape.heads, "Query heads")->capture_default_str();
    app.add_option("--kv-heads", o.shape.n_kv_head, "Key/value heads (grouped-query attention)")
        ->capture_default_str();
    app.add_option("--head-dim", o.shape.head_dim, "Head dimension")->capture_default_str();
    app.add_option("--intermediate", o.shape.intermediate, "SwiGLU width")->capture_default_str();
    app.add_flag("!--untied", o.shape.tie_embeddings,
                 "A separate lm_head instead of the tied embedding (config tie_word_embeddings false)");
    app.add_flag("--lm-head-from-embedding", o.lm_head_from_embedding,
                 "With --untied: initialise the lm_head as a copy of the input embedding");
    app.add_option("--rope-theta", o.shape.rope_theta, "RoPE base")->capture_default_str();
    app.add_option("--curriculum-lengths", o.curriculum.lengths,
                   "Curriculum document lengths (tokens), shortest first")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--unlock-at", o.curriculum.unlock_at,
                   "Fraction of the run at which each curriculum length becomes available")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--compute", attention,
                   "dtype of the matmuls and of the T x T attention (fp32 master weights): bf16 or fp32")
        ->check(CLI::IsMember({"bf16", "fp32"}))
        ->capture_default_str();
    app.add_flag("--fixed-batch", o.fixed_batch,
                 "Train every step on the batch of step 0 (overfitting check)");
    app.add_option("--dump-logits", dump_logits,
                   "After training, save a fixed token sequence and the trainer's fp32 logits (safetensors)");
    CLI11_PARSE(app, argc, argv);
    o.out_dir = out;
    o.checkpoint_dir = checkpoint_dir;
    o.resume = resume;
    o.init_from = init_from;
    o.dump_logits = dump_logits;
    o.bf16_attention = attention == "bf16";
    try {
        varrate::train::run_training(o);
    } catch (...) {
        std::fprintf(stderr, "varrate-train: error: %s\n", varrate::describe_current_exception().c_str());
        return 1;
    }
    return 0;
}

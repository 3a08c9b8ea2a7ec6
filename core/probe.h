#pragma once
// Extra passes over a captured prefix, for the signals that read more than the prefill itself:
//   question  the ids that follow the prefix before the answer (the question, its chat suffix and any answer
//             prefix) read with the full cache: their mean attention over the prefix, per query head
//             (varrate:oracle; in query-aware mode the prefix already ends with the question, which is then
//             read a second time);
//   repeat    KVzip's context reconstruction: the prefix fed back in chunks of 2048 after "Repeat the
//   previous
//             context exactly." (later chunks: "...starting with" + the previous chunk's last 8 ids), each on
//             the full cache of the prefix; a token's score is the largest attention weight any repeat query
//             of its KV head's group puts on it, softmax over the sinks, its chunk and the repeat ids
//             (kvpress KVzipPress). Costs about one more prefill.
//   observed  the context read again from an empty cache in one chunk, every query's attention weights
//             (softmax over the keys it sees, in fp32) summed per key and divided by how many queries see
//             it (kvpress's ObservedAttentionPress on eager attention, H2O). Costs one more prefill and the
//             attention matrix's arithmetic, in blocks of queries (never the whole matrix at once).
//   noncausal the same pass: every query's attention within its chunk of 256, before and after it, logits
//             unscaled (kvpress's NonCausalAttnPress inside CompactorPress). Costs the same prefill (shared
//             with observed) and little arithmetic.
// The results land in each LayerCapture (question_attention, repeat_scores, observed_attention,
// noncausal_attention); the capture is otherwise unchanged.
#include <cstdint>
#include <string>
#include <vector>

#include "base/job.h"
#include "codec/registry.h"
#include "core/capture.h"

namespace varrate {

class Session;

struct ProbeNeeds {
    bool question = false;
    bool repeat = false;
    bool observed = false;
    bool noncausal = false;
    bool any() const { return question || repeat || observed || noncausal; }
};
// What the registered methods `methods` read beyond the prefill.
ProbeNeeds probe_needs(const std::vector<std::string>& methods);

// Fills question_attention of every layer. `ids`: what follows the prefix, non-empty.
void add_question_attention(const LlamaModel& model, PrefillCapture& capture, const std::vector<int64_t>& ids,
                            const JobControl& job = {});

struct RepeatPrompt {
    std::vector<int64_t> first;   // "\n\nRepeat the previous context exactly."
    std::vector<int64_t> later;   // "\n\nRepeat the part of the previous context exactly, starting with"
    std::vector<int64_t> suffix;  // what ends the user turn: the chat suffix, or "\n" without a chat template
    // Leading ids of the prefix that are not reconstructed (kvpress's prefix_length): with a chat template
    // the BOS and the header before the user's content, 0 without one. Their scores stay 0.
    int64_t prefix_length = 0;
};
// The repeat prompt in the session's tokenizer (chat: the chat format's suffix).
RepeatPrompt repeat_prompt(const Session& session, bool chat);

inline constexpr int64_t kRepeatChunk = 2048;  // context ids per reconstruction pass
inline constexpr int64_t kRepeatOverlap = 8;   // ids of the previous chunk quoted by the next prompt
inline constexpr int64_t kRepeatSinks = 4;     // leading positions each later chunk's softmax also sees

// Fills repeat_scores of every layer (KVzip's scores over the whole prefix).
void add_repeat_scores(const LlamaModel& model, PrefillCapture& capture, const RepeatPrompt& prompt,
                       const JobControl& job = {}, int64_t chunk = kRepeatChunk);

// Fills observed_attention of every layer. The capture must start at position 0 (a prefill that began on
// an empty cache).
void add_observed_attention(const LlamaModel& model, PrefillCapture& capture, const JobControl& job = {});
// Fills observed_attention and/or noncausal_attention of every layer, both from one pass over the context.
void add_all_query_attention(const LlamaModel& model, PrefillCapture& capture, bool observed, bool noncausal,
                             const JobControl& job = {});

// What a capture's extra passes need: which, the ids that follow the prefix, and whether prompts are chat.
struct ProbeRequest {
    ProbeNeeds needs;
    std::vector<int64_t> question_ids;  // question (+ chat suffix) + answer prefix
    bool chat = false;
    // How many of the prefix's last ids are the question (query-aware mode; 0 when it holds none): set as
    // every layer's LayerCapture::question_tokens (Finch's window).
    int64_t question_in_prefix = 0;
};
// The time of the extra pass a method with `probe` reads (charged to its analysis); 0 for none.
double probe_time_ms(const PrefillCapture& capture, MethodProbe probe);

// Marks the question in the prefix (question_in_prefix) and runs the passes `request` asks for, timing each
// in capture.question_ms / repeat_ms / observed_ms (the all-queries pass: observed and non-causal attention).
void add_probes(const Session& session, PrefillCapture& capture, const ProbeRequest& request,
                const JobControl& job = {});

}  // namespace varrate

#pragma once
// Splits a prompt into the context part (compressed once) and the question part (appended after it), as
// kvpress's pipeline does: with a chat template the context opens the user turn and the question closes it
// together with the assistant header; without one the question follows the context as "Question:
// ...\nAnswer:".
#include <cstdint>
#include <string>
#include <vector>

namespace varrate {

class Tokenizer;

struct PromptParts {
    std::vector<int64_t> context_ids;   // BOS/chat header + context
    std::vector<int64_t> question_ids;  // question + chat suffix (assistant header), no BOS
    std::vector<int64_t> prefix_ids;    // the answer prefix (empty without one): never compressed
};

// The question part without a chat template: "\n\nQuestion: <question>\nAnswer:" (the reply follows with a
// space), then " <answer_prefix>" when one is given.
std::string plain_question_suffix(const std::string& question, const std::string& answer_prefix = "");

// answer_prefix: the start of the reply, given to the model as RULER's NIAH prompts do ("The special magic
// number for <key> is"), so that the model only completes the value; it follows the question part (after
// the assistant header with a chat template) and, as in kvpress, is decoded after any compression.
PromptParts build_prompt(const Tokenizer& tokenizer, const std::string& context, const std::string& question,
                         bool chat, const std::string& answer_prefix = "");

// What a chat template puts around a user turn's content, found as kvpress finds it (a dummy content and a
// separator rendered with the generation prompt): prefix_ids = BOS and header before the content, suffix_ids
// = what closes the turn and opens the assistant's. Throws Error when the template has no chat template or
// drops the content.
struct ChatFrame {
    std::vector<int64_t> prefix_ids;
    std::vector<int64_t> suffix_ids;
};
ChatFrame chat_frame(const Tokenizer& tokenizer);

}  // namespace varrate

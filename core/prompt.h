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
};

// The question part without a chat template: "\n\nQuestion: <question>\nAnswer:" (the reply follows with a
// space).
std::string plain_question_suffix(const std::string& question);

PromptParts build_prompt(const Tokenizer& tokenizer, const std::string& context, const std::string& question,
                         bool chat);

}  // namespace varrate

#include "core/prompt.h"

#include "base/error.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {
// Never produced by a tokenizer's text; marks where the context ends inside the rendered chat prompt.
const std::string kSplitMark = "\x01\x02varrate-split\x02\x01";
}  // namespace

std::string plain_question_suffix(const std::string& question, const std::string& answer_prefix) {
    return "\n\nQuestion: " + question + "\nAnswer:" + (answer_prefix.empty() ? "" : " " + answer_prefix);
}

PromptParts build_prompt(const Tokenizer& tokenizer, const std::string& context, const std::string& question,
                         bool chat, const std::string& answer_prefix) {
    if (context.empty()) throw Error("the context document is empty");
    PromptParts parts;
    if (!chat) {
        parts.context_ids = tokenizer.encode(context, true);
        if (!question.empty()) parts.question_ids = tokenizer.encode(plain_question_suffix(question), false);
        if (!answer_prefix.empty()) parts.prefix_ids = tokenizer.encode(" " + answer_prefix, false);
        return parts;
    }
    const std::string rendered =
        render_chat(tokenizer, {{"user", context + kSplitMark + "\n\n" + question}}, true);
    const size_t at = rendered.find(kSplitMark);
    if (at == std::string::npos)
        throw Error("chat template dropped the message content; cannot split the prompt");
    parts.context_ids = tokenizer.encode(rendered.substr(0, at), false);
    parts.question_ids = tokenizer.encode(rendered.substr(at + kSplitMark.size()), false);
    if (!answer_prefix.empty()) parts.prefix_ids = tokenizer.encode(answer_prefix, false);
    return parts;
}

ChatFrame chat_frame(const Tokenizer& tokenizer) {
    // kvpress's KVzipPress.__call__: content "dummy context" + "\n" + "#" * 13, split at the separator.
    const std::string dummy = "dummy context", separator = "\n" + std::string(dummy.size(), '#');
    const std::string rendered = render_chat(tokenizer, {{"user", dummy + separator}}, true);
    const size_t at = rendered.find(separator), content = rendered.find(dummy);
    if (at == std::string::npos || content == std::string::npos || content > at)
        throw Error("chat template dropped the message content; cannot find its prefix and suffix");
    ChatFrame frame;
    frame.prefix_ids = tokenizer.encode(rendered.substr(0, content), false);
    frame.suffix_ids = tokenizer.encode(rendered.substr(at + separator.size()), false);
    return frame;
}

}  // namespace varrate

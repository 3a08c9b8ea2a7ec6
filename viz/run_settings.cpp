#include "viz/run_settings.h"

namespace varrate::viz {

CompareRequest RunSettings::request(const std::string& context) const {
    CompareRequest r;
    r.context = context;
    r.questions = questions;
    r.answers = answers;
    r.answer_prefixes = answer_prefixes;
    r.methods = methods;
    r.settings = codec;
    r.mode = mode;
    r.max_new_tokens = max_new_tokens;
    r.chat = chat;
    return r;
}

}  // namespace varrate::viz

#pragma once
// Everything the run panel edits, as a plain value (the document comes from the main window): what a run of
// the app asks for, what session files keep and what the NIAH tab mirrors.
#include <cstdint>
#include <string>
#include <vector>

#include "codec/method.h"
#include "codec/registry.h"
#include "core/compare.h"
#include "core/session.h"

namespace varrate::viz {

struct RunSettings {
    std::vector<std::string> questions, answers;  // answers: empty, or one per question
    std::vector<std::string> answer_prefixes;     // the start of each reply: empty, or one per question
    std::vector<std::string> methods = default_method_names();
    CodecSettings codec;
    CompressionMode mode = CompressionMode::QueryAgnostic;
    int64_t max_new_tokens = 32;
    bool chat = false;
    std::string device = "cpu", dtype = "auto";  // models/device.h's policy, as the CLI's default
    BasisChoice basis = BasisChoice::Shipped;
    std::string basis_file;

    CompareRequest request(const std::string& context) const;
};

}  // namespace varrate::viz

#pragma once
// Needle-in-a-haystack documents (gkamradt / kvpress / RULER conventions): a haystack of an exact token
// length (as build_prompt tokenizes the context) with a needle "The special magic number for <key> is
// <digits>." inserted at a depth percent, stepped back to the previous sentence end, and optional distractor
// needles with other keys. core/niah.h runs sweeps over such documents.
//
// Two needle protocols (NeedleProtocol): Fresh draws a new needle (key, value) and new distractors for every
// document, as RULER does, so a grid of lengths x depths x samples tests as many needle values as it has
// documents; Fixed gives sample i the same needle set at every length and depth (the paper's A.21 protocol),
// so a grid of 6 samples tests 6 needle values and its accuracies move together with those 6 values. In both,
// the haystack filler is per sample (a prefix at shorter lengths), so the needle is what varies.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace varrate {

class Tokenizer;

enum class NeedleProtocol { Fresh, Fixed };
std::string to_string(NeedleProtocol p);                     // "fresh" | "fixed"
NeedleProtocol parse_needle_protocol(const std::string& s);  // throws Error naming --needles

struct NiahDocOptions {
    std::string haystack_text;  // "": the procedural filler of core/demo_corpus.h; else repeated as needed
    uint64_t seed = 42;
    int64_t distractors = 0;  // extra needles with other keys at random sentence ends
    bool chat = false;        // the length is counted as build_prompt(chat) tokenizes the context
    NeedleProtocol needles = NeedleProtocol::Fresh;
};

struct NiahDocument {
    std::string context;   // the haystack with the needle(s) inserted
    std::string question;  // "What is the special magic number for <key>?"
    // "The special magic number for <key> is": the reply's start, given after the question (RULER's prompt)
    std::string answer_prefix;
    std::string expected;  // the needle's value
    std::string needle;    // the needle sentence
    std::vector<std::string> distractor_needles;
    int64_t context_tokens = 0;       // build_prompt(...).context_ids.size(): the requested length
    int64_t haystack_tokens = 0;      // tokens of the haystack part alone
    int64_t needle_token_offset = 0;  // haystack tokens before the needle
    size_t needle_char_offset = 0;    // where the needle sentence starts in `context`
};

// Deterministic in (seed, sample, length, depth): the needles are drawn from a seed of (seed, sample) under
// Fixed (the same at every length and depth) and of (seed, sample, length, depth) under Fresh; a sample's
// haystack at one length is a prefix of its haystack at a longer one under both.
class NiahGenerator {
  public:
    NiahGenerator(const Tokenizer& tokenizer, NiahDocOptions options);
    ~NiahGenerator();
    NiahDocument generate(int64_t context_length, double depth_percent, int64_t sample);

  private:
    struct Stream;
    Stream& stream_for(int64_t sample, int64_t min_tokens);
    const Tokenizer& tokenizer_;
    NiahDocOptions options_;
    std::map<int64_t, std::unique_ptr<Stream>> streams_;
};

}  // namespace varrate

#pragma once
// Needle in a haystack (gkamradt / kvpress conventions). The generator builds documents of an exact token
// length (as build_prompt tokenizes the context) with a needle "The special magic number for <key> is
// <digits>." inserted at a depth percent, stepped back to the previous sentence end. The sweep runs every
// method on the same document per (length, depth, sample), writes one JSON record per (method, length,
// depth, sample) atomically, skips finished records when re-run, and summarises accuracy. A budget that a
// length cannot meet is recorded as "infeasible" for that cell and left out of the accuracy.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/method.h"
#include "core/compare.h"
#include "core/needle_probe.h"
#include "core/session.h"

namespace varrate {

class Tokenizer;

struct NiahDocOptions {
    std::string haystack_text;  // "": the procedural filler of core/demo_corpus.h; else repeated as needed
    uint64_t seed = 42;
    int64_t distractors = 0;  // extra needles with other keys at random sentence ends
    bool chat = false;        // the length is counted as build_prompt(chat) tokenizes the context
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

// Deterministic in (seed, sample): a sample's needles are the same at every length and depth, and a
// sample's haystack at one length is a prefix of its haystack at a longer one.
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

struct NiahSweepOptions {
    std::vector<int64_t> lengths;  // context lengths in the model's tokens
    std::vector<double> depths;    // needle depth percent, 0..100
    int64_t samples = 1;           // documents per (length, depth)
    std::vector<std::string> methods = {"full", "varrate", "flat", "snapkv"};
    CodecSettings settings;
    CompressionMode mode = CompressionMode::QueryAgnostic;
    NiahDocOptions doc;
    std::string haystack_name = "procedural";  // recorded: the haystack file, or "procedural"
    int64_t max_new_tokens = 32;
    std::filesystem::path out_dir;
};

struct NiahProgress {
    int64_t done = 0, total = 0;  // records (method x length x depth x sample), skipped ones included
    int64_t computed = 0, skipped = 0;
    double elapsed_s = 0, eta_s = -1;  // eta < 0: not known yet
    std::string cell;                  // e.g. "L=1024 depth=50% sample=0"
    std::string stage;                 // inside the current document ("" between documents)
    int64_t stage_done = 0, stage_total = 0;
};
using NiahProgressFn = std::function<void(const NiahProgress&)>;

struct NiahSweepStats {
    int64_t total = 0, computed = 0, skipped = 0, documents = 0;  // documents: run_compare calls
};

// Throws Error for bad options or for records in out_dir written by a different sweep (other model,
// settings, mode, seed or haystack), Cancelled when job.cancel is raised (finished records stay).
NiahSweepStats run_niah_sweep(const Session& session, const NiahSweepOptions& options,
                              const JobControl& job = {}, const NiahProgressFn& on_progress = {});

// out_dir/records/<method>/L<length>_D<depth>_S<sample>.json
std::filesystem::path niah_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       int64_t length, double depth_percent, int64_t sample);

struct NiahCell {
    std::string method;
    int64_t context_length = 0;
    double depth_percent = 0;
    int64_t n = 0, correct = 0;
    int64_t infeasible = 0;  // records whose budget this length cannot meet: not in n
    double accuracy() const { return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : -1; }
};

// What a method kept of the asked needle's value, over the records whose answer was right or wrong, and of
// the distractors' values (see core/needle_probe.h).
struct NiahRetention {
    RetentionTally needle_correct, needle_wrong, distractors;
};

struct NiahSummary {
    std::string model, mode;
    double budget = 0;
    std::vector<std::string> methods;
    std::vector<int64_t> lengths;
    std::vector<double> depths;
    int64_t samples = 0;
    std::vector<NiahCell> cells;                     // methods x depths x lengths, row-major in that order
    std::map<std::string, NiahRetention> retention;  // by method
    const NiahCell& cell(size_t method, size_t depth, size_t length) const;
};

// Accuracy over the records of the options' grid found in out_dir (missing records count as n = 0).
NiahSummary summarize_niah(const NiahSweepOptions& options);
nlohmann::json to_json(const NiahSummary& s);
// method,context_length,depth_percent,n,correct,accuracy,infeasible (accuracy empty when n = 0).
std::string summary_csv(const NiahSummary& s);
// out_dir/summary.json and out_dir/summary.csv.
void write_niah_summary(const NiahSummary& s, const std::filesystem::path& out_dir);

}  // namespace varrate

#pragma once
// Options and helpers shared by several `varrate` commands.
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <csignal>

#include <CLI/CLI.hpp>

#include "codec/method.h"
#include "codec/settings_table.h"
#include "core/session.h"
#include "core/suites/sweep_files.h"
#include "core/suites/sweep_runner.h"
#include "models/llama_model.h"

namespace varrate::cli {

struct RuntimeArgs {
    std::string device = "cpu";
    std::string dtype = "auto";  // models/device.h's policy
    int threads = 0;
};

// --device, --dtype, --threads.
void add_runtime_options(CLI::App& sub, RuntimeArgs& args);
// Parses the runtime args, sets threads, and loads the model (with load progress logged).
std::unique_ptr<LlamaModel> load_model_for_cli(const std::filesystem::path& dir, const RuntimeArgs& args);
RuntimeOptions runtime_options(const RuntimeArgs& args);
// The codec options of one command (codec/settings_table.h: one per row), to tell afterwards which ones
// the user gave.
struct CodecFlags {
    std::vector<std::pair<const CodecSettingSpec*, CLI::Option*>> options;
    CLI::Option* budget = nullptr;           // --budget, also in options (null: the command has none)
    std::vector<double>* budgets = nullptr;  // where a budget list goes, for commands that take one
    bool given(const CodecSettingSpec& spec) const;
};
enum class BudgetOption { One, None };
// One option per row of the settings table, each checked by the table's range. With budget_list, --budget
// takes a comma-separated list ("0.05,0.1,0.2") written there in order, and s.budget is its first entry;
// without it, one number; BudgetOption::None: no --budget (the command sweeps a grid of its own).
CodecFlags add_codec_options(CLI::App& sub, CodecSettings& s, BudgetOption budget = BudgetOption::One,
                             std::vector<double>* budget_list = nullptr);
// "0.05, 0.1,0.2" -> {0.05, 0.1, 0.2}; throws Error naming --budget for an entry that is not a number in
// (0, 1] or an empty list.
std::vector<double> parse_budget_list(const std::string& text);
// Settings the user did not give come from the model's defaults (a budget list not given becomes {the default
// budget}) (core/codec_defaults.h: MODEL_DIR/
// varrate-codec.json when the model has one, else the width-based ones), as in the desktop app.
void apply_model_codec_defaults(const CodecFlags& given, const std::filesystem::path& model_dir,
                                CodecSettings& s);
// Progress of long jobs on stderr (one line, rewritten in place) when stderr is a terminal.
JobControl terminal_job();
// "full, varrate,flat" -> registered method names (entries trimmed, empty ones skipped); throws Error naming
// an unknown method (with the known ones) or an empty list.
std::vector<std::string> parse_methods(const std::string& list);
// Throws the error (unknown method, infeasible budget, naming the smallest feasible kappa) that `methods`
// would meet on n_tokens of `model`'s context, before any prefill: it would otherwise surface minutes later,
// inside the first layer. Returns whether any of them needs a basis.
bool check_methods_feasible(const std::vector<std::string>& methods, const CodecSettings& settings,
                            int64_t n_tokens, const LlamaModel& model);
// Every registered method, comma-separated: the default of --methods.
std::string join_method_names();
// "a, b,,c " -> {"a", "b", "c"}: comma-separated entries, trimmed, empty ones skipped.
std::vector<std::string> split_comma_list(const std::string& text);
// The text of a sweep's --haystack-file / --essay-file (read_document_file), with its file name in `name`;
// throws Error "<path>: the <what> file is empty" for a blank one.
std::string read_filler_file(const std::string& path, const std::string& what, std::string& name);
// "1,2,3" -> {1,2,3}; throws Error naming `what` on a bad entry.
std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what);

// Sweeps (niah, eval): Ctrl-C raises sigint_flag() once while a SigintGuard lives (the sweep stops after the
// current step, finished records stay); the handler resets itself, so a second Ctrl-C ends the process at
// once.
std::atomic<bool>& sigint_flag();
class SigintGuard {
  public:
    SigintGuard();
    ~SigintGuard();
    SigintGuard(const SigintGuard&) = delete;
    SigintGuard& operator=(const SigintGuard&) = delete;

  private:
    struct sigaction old_ {};
};
// "12s", "3m05s", "1h02m"; "?" for a negative (unknown) duration.
std::string format_duration(double seconds);
// Erases the progress line a sweep rewrites in place on a terminal stderr.
void clear_progress_line();
// A sweep's progress on stderr: one line rewritten in place when it is a terminal ("<name> 12/40 records (4
// reused) | document | stage | elapsed, ETA"), otherwise a log line per document.
SweepProgressFn sweep_progress_printer(const std::string& name);
// `varrate niah` and `varrate eval`'s run of their sweep: `run` with the terminal's progress line (`job`
// holds the SigintGuard's flag as its cancel). Interrupted: `on_interrupt` (e.g. a summary of what is there),
// then a line saying where the records are and how to resume, and Cancelled again. Returns false for a shard
// of a job array after printing its counts (the summary is made once every shard has finished: `varrate
// summarize`); true when the command goes on to summarise the whole sweep.
bool run_sweep_command(const std::string& name, const std::string& out_dir, const Shard& shard,
                       const JobControl& job,
                       const std::function<SweepStats(const JobControl&, const SweepProgressFn&)>& run,
                       SweepStats& stats, const std::function<void()>& on_interrupt = {});

}  // namespace varrate::cli

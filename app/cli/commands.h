#pragma once
// Each `varrate` subcommand lives in its own cmd_*.cpp and registers itself here. A command adds its
// CLI11 subcommand and returns the function main() runs when that subcommand was chosen. Commands throw
// varrate::Error for bad input; main() prints it as one line and exits non-zero.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>

namespace varrate::cli {

using CommandFn = std::function<int()>;

struct Command {
    CLI::App* app = nullptr;
    CommandFn run;
};

Command add_generate(CLI::App& root);
Command add_tokenize(CLI::App& root);
Command add_inspect(CLI::App& root);
Command add_make_model(CLI::App& root);
Command add_bench(CLI::App& root);
// `bench decode` (cmd_bench_decode.cpp), a subcommand of `bench`.
Command add_bench_decode(CLI::App& bench);
Command add_compare(CLI::App& root);
Command add_ppl(CLI::App& root);
Command add_calibrate(CLI::App& root);
Command add_niah(CLI::App& root);
// `summarize DIR` (cmd_summarize.cpp): the summary of a sweep's folder, however many shards wrote it.
Command add_summarize(CLI::App& root);
// The NIAH summary of a sweep folder from its sweep.json and records (cmd_niah.cpp).
int summarize_niah_folder(const std::filesystem::path& dir);
// `eval` (cmd_eval.cpp): task suites; and the summary of an eval folder.
Command add_eval(CLI::App& root);
int summarize_eval_folder(const std::filesystem::path& dir);
Command add_demo(CLI::App& root);
Command add_rd(CLI::App& root);
// `compress` (cmd_compress.cpp) saves a compressed cache; `ask` (cmd_ask.cpp) answers from one.
Command add_compress(CLI::App& root);
// `methods` (cmd_methods.cpp): the registry, one name<TAB>definition per line.
Command add_methods(CLI::App& root);
Command add_ask(CLI::App& root);

}  // namespace varrate::cli

// varrate summarize DIR: the summary of a sweep's output folder from its sweep.json and records, however many
// processes (shards of a job array) wrote them; the same files the unsharded sweep writes at its end.
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "base/error.h"
#include "core/suites/niah.h"
#include "core/suites/sweep_files.h"

namespace varrate::cli {

Command add_summarize(CLI::App& root) {
    auto dir = std::make_shared<std::string>();
    CLI::App* sub = root.add_subcommand(
        "summarize",
        "Summarise a sweep's folder (niah, eval) from its records, e.g. after the shards of a job array");
    sub->add_option("dir", *dir, "the sweep's --out folder")->required()->check(CLI::ExistingDirectory);
    return {sub, [dir] {
                const std::string kind = read_sweep_file(*dir)["grid"]["kind"].get<std::string>();
                if (kind == "niah") return summarize_niah_folder(*dir);
                if (kind == "eval") return summarize_eval_folder(*dir);
                throw Error((std::filesystem::path(*dir) / kSweepFile).string() + ": unknown sweep kind '" +
                            kind + "' (known: niah, eval)");
            }};
}

}  // namespace varrate::cli

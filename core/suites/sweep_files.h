#pragma once
// What every resumable sweep (core/niah.h, core/eval.h) writes beside its records: sweep.json, holding the
// grid a summary is made of and the sweep's identity (what makes two records comparable), written the same
// by every shard of a job array, and read back by `varrate summarize DIR`. Also the small pieces the sweeps'
// records share.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace varrate {

class Session;

inline constexpr const char* kSweepFile = "sweep.json";

// Where a sweep is: records done (reused ones included) of its total, the document in hand and the stage
// inside it.
struct SweepProgress {
    int64_t done = 0, total = 0;  // records, skipped ones included
    int64_t computed = 0, skipped = 0;
    double elapsed_s = 0, eta_s = -1;  // eta < 0: not known yet
    std::string cell;                  // the document, e.g. "L=1024 depth=50% sample=0"
    std::string stage;                 // inside the current document ("" between documents)
    int64_t stage_done = 0, stage_total = 0;
    // Sets elapsed_s and, from the records computed so far, eta_s.
    void estimate(double elapsed_seconds);
};
using SweepProgressFn = std::function<void(const SweepProgress&)>;

// Writes out_dir/sweep.json = {"grid": grid, "identity": identity} atomically. A folder whose sweep.json has
// another identity is refused (Error naming the first field that differs, "written by a different sweep"); a
// different grid (a sweep extended by a budget or a length) replaces the old one, as the summary a single
// process writes covers the grid of its last run.
void write_sweep_file(const std::filesystem::path& out_dir, const nlohmann::json& grid,
                      const nlohmann::json& identity);
// out_dir/sweep.json's {"grid", "identity"}; throws Error naming the file when it is missing, not JSON, or
// without a grid object of a "kind".
nlohmann::json read_sweep_file(const std::filesystem::path& out_dir);

// The settings that change results (precise_timing only changes how stages are timed), less the budget:
// every budget of a list has its own records (and says its budget), so one folder holds several.
nlohmann::json identity_settings(nlohmann::json settings);
std::string utc_timestamp();                     // "2026-12-03T08:00:00Z"
std::string model_name(const Session& session);  // the model directory's name

}  // namespace varrate

#pragma once
// The plots of an evaluation folder (viz/eval_plot_paint.h) as PNGs in DIR/plots/:
// score_vs_kappa_L<length>.png per context length (a panel per task and one for every task pooled) and
// heatmap_<task>.png per task (method x budget, a panel per length) with heatmap_all.png for every task
// pooled.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

namespace varrate::cli {

// Writes the PNGs into `plots_dir` (created), appending each to `written`. Returns false with `why_not` set
// when this build has no Qt Gui, there is nothing to draw, or rendering failed.
bool write_eval_plots(const EvalSummary& summary, const std::filesystem::path& plots_dir,
                      std::vector<std::filesystem::path>& written, std::string& why_not);

// "score_vs_kappa_L400.png", "heatmap_niah_single_1.png" ("" task: heatmap_all.png); characters other than
// letters, digits, '-', '_' and '.' of a task name become '_'.
std::string eval_score_plot_name(int64_t length);
std::string eval_heatmap_name(const std::string& task);

}  // namespace varrate::cli

#include "app/cli/eval_plots.h"

#include <cctype>

#include <fmt/format.h>

#ifdef VARRATE_HAVE_QTGUI
#include "app/cli/plot_png.h"
#include "viz/eval_plot_paint.h"
#endif

namespace varrate::cli {

std::string eval_score_plot_name(int64_t length) {
    return fmt::format("score_vs_kappa_L{}.png", length);
}

std::string eval_heatmap_name(const std::string& task) {
    std::string name = task.empty() ? "all" : task;
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    return "heatmap_" + name + ".png";
}

#ifdef VARRATE_HAVE_QTGUI

bool write_eval_plots(const EvalSummary& s, const std::filesystem::path& dir,
                      std::vector<std::filesystem::path>& written, std::string& why_not) {
    if (s.methods.empty() || s.lengths.empty() || s.tasks.empty()) {
        why_not = "nothing to draw (no method, length or task)";
        return false;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        why_not = dir.string() + ": cannot create the folder";
        return false;
    }
    const OffscreenGui gui;  // one application for every image
    const viz::EvalPlotStyle style = viz::EvalPlotStyle::png();
    for (int64_t length : s.lengths) {
        const auto png = dir / eval_score_plot_name(length);
        if (!write_png([&] { return viz::EvalScorePainter(s, length, style).render(); }, png, why_not))
            return false;
        written.push_back(png);
    }
    std::vector<std::string> tasks = s.tasks;
    tasks.push_back("");  // every task pooled
    for (const std::string& task : tasks) {
        const auto png = dir / eval_heatmap_name(task);
        if (!write_png([&] { return viz::EvalHeatmapPainter(s, task, style).render(); }, png, why_not))
            return false;
        written.push_back(png);
    }
    return true;
}

#else

bool write_eval_plots(const EvalSummary&, const std::filesystem::path&, std::vector<std::filesystem::path>&,
                      std::string& why_not) {
    why_not = "this build of varrate has no Qt Gui";
    return false;
}

#endif

}  // namespace varrate::cli

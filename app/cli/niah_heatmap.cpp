#include "app/cli/niah_heatmap.h"

#ifdef VARRATE_HAVE_QTGUI
#include "app/cli/plot_png.h"
#include "viz/niah_heatmap_paint.h"
#endif

namespace varrate::cli {

#ifdef VARRATE_HAVE_QTGUI

bool write_niah_heatmap(const NiahSummary& s, const std::filesystem::path& png, std::string& why_not) {
    if (s.methods.empty() || s.lengths.empty() || s.depths.empty()) {
        why_not = "nothing to draw (no method, length or depth)";
        return false;
    }
    return write_png([&] { return viz::NiahHeatmapPainter(s, viz::NiahHeatmapStyle::png()).render(); }, png,
                     why_not);
}

#else

bool write_niah_heatmap(const NiahSummary&, const std::filesystem::path&, std::string& why_not) {
    why_not = "this build of varrate has no Qt Gui";
    return false;
}

#endif

}  // namespace varrate::cli

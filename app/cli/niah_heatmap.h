#pragma once
// The NIAH sweep's heatmap.png: the desktop app's heatmap painter (viz/niah_heatmap_paint.h) on a fixed
// white image, rendered offscreen with Qt Gui when the CLI was built with it.
#include <filesystem>
#include <string>

#include "core/suites/niah.h"

namespace varrate::cli {

// Writes a PNG. Returns false with `why_not` set when this build has no Qt Gui or rendering failed.
bool write_niah_heatmap(const NiahSummary& summary, const std::filesystem::path& png, std::string& why_not);

}  // namespace varrate::cli

#pragma once
// The needle-in-a-haystack heatmap (gkamradt's layout): one panel per method, rows = depth %, columns =
// context length, accuracy on a fixed 0-1 scale from red through amber to green. Rendered offscreen with
// Qt Gui when the CLI was built with it.
#include <filesystem>
#include <string>

#include "core/niah.h"

namespace varrate::cli {

// The colour of an accuracy in [0, 1] as 0xRRGGBB: #F0496E at 0, #EBB839 at 0.5, #0CD79F at 1.
unsigned niah_color(double accuracy);

// Writes a PNG. Returns false with `why_not` set when this build has no Qt Gui or rendering failed.
bool write_niah_heatmap(const NiahSummary& summary, const std::filesystem::path& png, std::string& why_not);

}  // namespace varrate::cli

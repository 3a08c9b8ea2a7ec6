#pragma once
// spdlog set-up shared by the CLI, the GUI and the tests. Libraries log through spdlog's default logger.
#include <string>

namespace varrate {

// level: trace, debug, info, warn, error, critical, off. Throws Error for an unknown level.
void init_logging(const std::string& level);

}  // namespace varrate

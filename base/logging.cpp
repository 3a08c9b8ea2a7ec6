#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "base/error.h"

namespace varrate {

void init_logging(const std::string& level) {
    auto parsed = spdlog::level::from_str(level);
    // from_str maps unknown names to "off"; only accept "off" when it was asked for.
    if (parsed == spdlog::level::off && level != "off") {
        throw Error("unknown log level '" + level +
                    "' (use trace, debug, info, warn, error, critical or off)");
    }
    static bool made = false;
    if (!made) {
        auto logger = spdlog::stderr_color_mt("varrate");
        logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
        spdlog::set_default_logger(logger);
        made = true;
    }
    spdlog::set_level(parsed);
}

}  // namespace varrate

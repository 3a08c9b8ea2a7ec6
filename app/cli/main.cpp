// varrate: the headless command line of VarRate Studio.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include "app/cli/commands.h"
#include "base/error.h"
#include "base/job.h"
#include "base/logging.h"
#include "base/process_env.h"

int main(int argc, char** argv) {
    using namespace varrate;
    prepare_process_environment(argc, argv);
    CLI::App app{"VarRate Studio command line: run Llama-family models and KV-cache codecs", "varrate"};
    app.require_subcommand(1);
    std::string log_level = "warn";
    app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
        ->capture_default_str();

    std::vector<cli::Command> commands = {
        cli::add_generate(app),  cli::add_tokenize(app), cli::add_inspect(app),   cli::add_make_model(app),
        cli::add_bench(app),     cli::add_niah(app),     cli::add_compare(app),   cli::add_ppl(app),
        cli::add_calibrate(app), cli::add_demo(app),     cli::add_rd(app),        cli::add_compress(app),
        cli::add_ask(app),       cli::add_methods(app),  cli::add_summarize(app), cli::add_eval(app)};
    // CLI11 reports an unknown command only as "a subcommand is required"; name it instead.
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--log-level") {
            ++i;
            continue;
        }
        if (arg.rfind("-", 0) == 0) continue;
        bool known = false;
        std::string names;
        for (const auto& c : commands) {
            known = known || c.app->get_name() == arg;
            names += (names.empty() ? "" : ", ") + c.app->get_name();
        }
        if (!known) {
            std::fprintf(stderr, "varrate: error: unknown command '%s' (commands: %s)\n", arg.c_str(),
                         names.c_str());
            return 2;
        }
        break;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "varrate: error: %s\n", e.what());
        return 2;
    }
    try {
        init_logging(log_level);
        for (auto& c : commands) {
            if (c.app->parsed()) return c.run();
        }
        return 2;
    } catch (const Cancelled&) {
        std::fprintf(stderr, "varrate: cancelled\n");
        return 130;
    } catch (...) {
        std::fprintf(stderr, "varrate: error: %s\n", describe_current_exception().c_str());
        return 1;
    }
}

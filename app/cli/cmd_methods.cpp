// `varrate methods`: the registry, one `name<TAB>definition` per line (scripts read it; the default methods
// are those a command runs without --methods).
#include <iostream>

#include "app/cli/commands.h"
#include "codec/registry.h"

namespace varrate::cli {

Command add_methods(CLI::App& root) {
    CLI::App* sub = root.add_subcommand("methods", "List the compression methods: name<TAB>definition");
    return {sub, [] {
                for (const std::string& name : method_names())
                    std::cout << name << '\t' << method_description(name) << '\n';
                return 0;
            }};
}

}  // namespace varrate::cli

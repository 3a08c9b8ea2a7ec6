// `varrate methods`: the registry by group (reference, low-rank, VarRate by signal, eviction, quantization),
// one `name<TAB>definition` per line (scripts read it; the default methods are those a command runs without
// --methods); --markdown prints the README's method table from the same
// entries (a test holds the README to it), so a method's one-line description is written once.
#include <iostream>

#include "app/cli/commands.h"
#include "codec/registry.h"

namespace varrate::cli {

namespace {

std::string budget_word(BudgetRule r) {
    switch (r) {
        case BudgetRule::Kappa:
            return "κ";
        case BudgetRule::OwnSettings:
            return "its own settings";
        case BudgetRule::Uncompressed:
            return "none";
    }
    return "?";
}

// The registered names by group (methods_by_group), registry order within a group.
std::vector<std::string> grouped_names() {
    std::vector<std::string> out;
    for (const MethodGroup& g : methods_by_group()) out.insert(out.end(), g.methods.begin(), g.methods.end());
    return out;
}

}  // namespace

Command add_methods(CLI::App& root) {
    CLI::App* sub = root.add_subcommand("methods", "List the compression methods: name<TAB>definition");
    auto markdown = std::make_shared<bool>(false);
    sub->add_flag("--markdown", *markdown,
                  "A Markdown table: method, group, what sets its footprint, definition, whether it runs "
                  "by default");
    return {
        sub, [markdown] {
            if (!*markdown) {
                for (const std::string& name : grouped_names())
                    std::cout << name << '\t' << method_description(name) << '\n';
                return 0;
            }
            std::cout << "| method | group | footprint set by | what it does |\n| --- | --- | --- | --- |\n";
            for (const std::string& name : grouped_names()) {
                const MethodTraits& t = method_traits(name);
                std::cout << "| `" << name << "`" << (t.by_default ? " (default)" : "") << " | "
                          << method_group(t) << " | " << budget_word(t.budget) << " | " << t.description
                          << " |\n";
            }
            return 0;
        }};
}

}  // namespace varrate::cli

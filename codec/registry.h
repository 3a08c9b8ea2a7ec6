#pragma once
// Name -> method. Adding a method = one file pair + one line in registry.cpp's table.
#include <memory>
#include <string>
#include <vector>

#include "codec/basis.h"
#include "codec/method.h"

namespace varrate {

// Throws Error for an unknown name (listing the known ones) or a missing basis where one is needed.
std::unique_ptr<CompressionMethod> make_method(const std::string& name, const CodecSettings& settings,
                                               std::shared_ptr<const Basis> basis = nullptr);
std::vector<std::string> method_names();  // in registry order: full, varrate, flat, snapkv, ...
// What runs when no method list is given: full, varrate, flat, snapkv (the quantization baselines kivi2 and
// kivi4 have a footprint set by their bits, not by kappa, and are asked for by name).
std::vector<std::string> default_method_names();
bool method_needs_basis(const std::string& name);
std::string method_description(const std::string& name);

// What a method reads beyond the prefill capture (core/probe.h runs the extra pass before its analysis).
enum class MethodProbe {
    None,
    Question,  // the question's attention over the context (varrate:oracle)
    Repeat,    // KVzip's context-reconstruction scores (kvzip, varrate-kvzip)
};
MethodProbe method_probe(const std::string& name);

// What sets a method's footprint. Sweeps (niah, eval), compare, rd and the app run a Kappa method once per
// budget and every other one once, labelled by its measured footprint.
enum class BudgetRule {
    Kappa,         // the budget kappa (varrate, flat, snapkv, ...)
    OwnSettings,   // its own settings, whatever kappa says (kivi2, kivi4: the bits)
    Uncompressed,  // nothing is compressed (full, the reference)
};
BudgetRule method_budget_rule(const std::string& name);  // throws Error for an unknown name, as make_method
// BudgetRule::Kappa / not BudgetRule::Uncompressed; a name this build does not know (read from another
// build's records) counts as a budgeted compressor.
bool method_takes_budget(const std::string& name);
bool method_compresses(const std::string& name);

}  // namespace varrate

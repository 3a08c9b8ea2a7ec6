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
bool method_needs_basis(const std::string& name);
std::string method_description(const std::string& name);

}  // namespace varrate

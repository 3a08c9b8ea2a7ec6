#pragma once
// The extension varrate._varrate: the codec's C++ API on torch tensors. bindings.cpp holds the module, its
// exceptions, the registry, the settings and the basis; bindings_codec.cpp the captures, methods, allocations
// and stores. Settings cross as JSON text (the one JSON form, codec/codec_json.h); the Python layer
// (varrate/) turns them into dicts and checks tensors before they get here.
#include <torch/extension.h>

namespace varrate::python {

void bind_codec(pybind11::module_& m);

}  // namespace varrate::python

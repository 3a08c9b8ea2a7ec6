// A single .safetensors file: header length, JSON header, dtypes, shapes and offsets, then every tensor
// materialised (the zero-copy view and the unaligned copy) and read.
#include "models/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return varrate::fuzz::run([&] {
        const auto path = varrate::fuzz::write_input("model.safetensors", data, size);
        const auto archive = varrate::SafetensorsArchive::open(path);
        for (const auto& name : archive.names()) {
            const at::Tensor t = archive.tensor(name);
            // Touch every byte the view claims (ASan checks the mapping's bounds).
            if (t.numel() > 0) (void)t.to(at::kDouble).sum().item<double>();
        }
    });
}

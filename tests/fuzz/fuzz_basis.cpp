// A basis file (varrate-basis.safetensors): its metadata (the BasisInfo fields as text) and per-layer tensors
// "layer.{i}.basis" [R, D] / "layer.{i}.spectrum" [D], validated on load, then checked against requirements.
#include "codec/basis.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return varrate::fuzz::run([&] {
        const auto path = varrate::fuzz::write_input("varrate-basis.safetensors", data, size);
        const varrate::Basis basis = varrate::Basis::load(path);
        for (int64_t l = 0; l < basis.n_layer(); ++l) {
            (void)basis.directions_for_energy(l, 0.9);
            (void)basis.layer(l).sum().item<float>();
        }
        basis.check({"some-model", 64, 16, 4}, path.string());
    });
}

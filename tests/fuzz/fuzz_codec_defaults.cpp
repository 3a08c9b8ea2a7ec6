// A model's varrate-codec.json, read by read_codec_defaults over the width-based defaults of a small model.
#include "core/codec_defaults.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return varrate::fuzz::run([&] {
        varrate::fuzz::write_input(varrate::kCodecDefaultsFile, data, size);
        const auto base = varrate::width_codec_defaults(64);
        const auto settings = varrate::read_codec_defaults(varrate::fuzz::scratch_dir(), base);
        (void)varrate::describe_codec_defaults(64, settings);
    });
}

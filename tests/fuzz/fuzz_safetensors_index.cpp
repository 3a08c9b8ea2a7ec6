// A sharded checkpoint's model.safetensors.index.json, next to two valid shards: weight_map entries naming
// shards, missing files, paths leaving the directory, tensors in the wrong shard.
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void write_shards() {
    static bool done = false;
    if (done) return;
    const auto dir = varrate::fuzz::scratch_dir();
    varrate::write_safetensors(dir / "model-00001-of-00002.safetensors",
                               {{"a.weight", at::arange(6, at::kFloat).reshape({2, 3})}}, {{"format", "pt"}});
    varrate::write_safetensors(
        dir / "model-00002-of-00002.safetensors",
        {{"b.weight", at::ones({4}, at::kHalf)}, {"c.bias", at::zeros({0}, at::kFloat)}});
    done = true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    write_shards();
    return varrate::fuzz::run([&] {
        const auto path = varrate::fuzz::write_input("model.safetensors.index.json", data, size);
        const auto archive = varrate::SafetensorsArchive::open(path);
        for (const auto& name : archive.names()) (void)archive.tensor(name).numel();
    });
}

// A compressed cache file (.vrkv): the safetensors container, its "varrate_kv_cache" metadata JSON (format
// version, every field) and checksum, as read_cache_file_info reads them before a model is loaded. The rest
// of read_cache_file (tensors against a loaded model) needs a Session and is not fuzzed here. Bytes that are
// JSON go to the metadata reader directly too: mutations of a container rarely keep its header valid.
#include "core/cache_file.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (const auto j = varrate::fuzz::parse_json(data, size))
        varrate::fuzz::run([&] { (void)varrate::cache_file_info_from_json(*j, "metadata"); });
    return varrate::fuzz::run([&] {
        const auto path = varrate::fuzz::write_input("cache.vrkv", data, size);
        const auto info = varrate::read_cache_file_info(path);
        (void)info.footprint_fraction();
        (void)info.resident_fraction();
        (void)varrate::cache_file_info_from_json(varrate::to_json(info), "written back");
    });
}

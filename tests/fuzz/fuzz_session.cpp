// The Qt-free parts of a studio session file (viz/session_file.cpp reads the rest with Qt): a method's run
// with its per-layer diagnostics (method_run_from_json, the "restore" runs) and the codec settings of the run
// panel (codec_settings_from_json).
#include "codec/codec_json.h"
#include "core/compare.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace varrate;
    const auto j = fuzz::parse_json(data, size);
    if (!j) return 0;
    fuzz::run([&] { (void)method_run_from_json(*j, "session runs[0]"); });
    return fuzz::run([&] { (void)codec_settings_from_json(*j, "session codec"); });
}

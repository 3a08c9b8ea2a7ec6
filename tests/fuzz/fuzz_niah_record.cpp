// One NIAH record (records/<series>/L.._D.._S...json), as summaries and resumed sweeps read it back.
#include "core/suites/niah_record.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto j = varrate::fuzz::parse_json(data, size);
    if (!j) return 0;
    return varrate::fuzz::run([&] {
        const auto r = varrate::niah_record_from_json(*j, "record.json");
        (void)varrate::niah_record_from_json(varrate::to_json(r), "record.json (written back)");
        (void)varrate::niah_series_key(r.method, r.budget);
        (void)varrate::niah_depth_label(r.depth_percent);
    });
}

// One evaluation record (records/<series>/<task>/L.._S...json), as summaries and the Evaluation tab read it.
#include "core/suites/eval.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto j = varrate::fuzz::parse_json(data, size);
    if (!j) return 0;
    return varrate::fuzz::run([&] {
        const auto r = varrate::eval_record_from_json(*j, "record.json");
        (void)varrate::eval_record_from_json(varrate::to_json(r), "record.json (written back)");
    });
}

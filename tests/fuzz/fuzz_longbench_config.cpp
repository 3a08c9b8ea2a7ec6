// A LongBench config (resources/eval/longbench.json's format): datasets, prompt templates, metrics, flags;
// then every dataset's prompt for a fixed sample (the template's placeholders filled in).
#include "core/suites/longbench.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace varrate;
    const auto j = fuzz::parse_json(data, size);
    if (!j) return 0;
    return fuzz::run([&] {
        const LongBenchConfig config = parse_longbench_config(*j, "longbench.json");
        LongBenchSample s;
        s.context = "The context {input} {{x}}.";
        s.input = "The question?";
        for (const auto& d : config.datasets) {
            (void)longbench_prompt(d, s);
            (void)split_longbench_prompt(d, s);
            (void)config.dataset(d.name);
        }
    });
}

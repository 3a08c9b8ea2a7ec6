// A LongBench dataset file (JSONL, one sample a line), then each sample's prompt built from the shipped
// config (resources/eval/longbench.json; the Python format string with the sample's fields).
#include "core/suites/longbench.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace varrate;
    static const LongBenchConfig config =
        load_longbench_config(fuzz::source_dir() / "resources/eval/longbench.json");
    return fuzz::run([&] {
        for (const auto& s : parse_longbench_jsonl(fuzz::text(data, size), "data.jsonl")) {
            const auto& d = config.datasets[static_cast<size_t>(s.line) % config.datasets.size()];
            (void)longbench_prompt(d, s);
            (void)split_longbench_prompt(d, s);
        }
    });
}

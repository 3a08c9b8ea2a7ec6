// A sweep's sweep.json (its grid and identity), read back by `varrate summarize` and the app's NIAH and
// Evaluation tabs: as a NIAH grid and as an evaluation grid.
#include "core/suites/eval.h"
#include "core/suites/niah.h"
#include "core/suites/sweep_files.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace varrate;
    fuzz::write_input(kSweepFile, data, size);
    fuzz::run([&] { (void)read_niah_grid(fuzz::scratch_dir()); });
    return fuzz::run([&] { (void)read_eval_grid(fuzz::scratch_dir()); });
}

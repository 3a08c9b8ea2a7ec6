#include "base/process_env.h"

#include <cstdlib>

#include <unistd.h>

namespace varrate {

namespace {

// Sets `name` unless the user did; true when it was set here.
bool set_default(const char* name, const char* value) {
    if (std::getenv(name) != nullptr) return false;
    setenv(name, value, 1);
    return true;
}

}  // namespace

void prepare_process_environment(int argc, char** argv) {
    (void)argc;
#ifdef __linux__
    bool changed = set_default("OMP_WAIT_POLICY", "PASSIVE");
    changed = set_default("OPENBLAS_THREAD_TIMEOUT", "4") || changed;
    changed = set_default("MALLOC_MMAP_THRESHOLD_", "1073741824") || changed;
    changed = set_default("MALLOC_TRIM_THRESHOLD_", "1073741824") || changed;
    if (!changed) return;
    execv("/proc/self/exe", argv);
    // exec failed (e.g. no /proc): carry on with the environment the process started with.
#else
    (void)argv;
#endif
}

}  // namespace varrate

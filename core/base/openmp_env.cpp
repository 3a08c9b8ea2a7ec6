#include "core/base/openmp_env.h"

#include <cstdlib>

#include <unistd.h>

namespace varrate {

void ensure_passive_openmp_wait(int argc, char** argv) {
    (void)argc;
#ifdef __linux__
    if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
    // exec failed (e.g. no /proc): carry on with the default policy.
#else
    (void)argv;
#endif
}

}  // namespace varrate

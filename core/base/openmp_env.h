#pragma once
// OpenMP worker threads busy-wait for milliseconds at every synchronisation point by default. When the cores
// are shared (other processes, the GUI thread), that spinning slows LibTorch's parallel loops several-fold.
// The wait policy can only be set through the environment before the OpenMP runtime starts, so the
// executables re-launch themselves once with OMP_WAIT_POLICY=PASSIVE unless the user chose a policy.
namespace varrate {

// Call first thing in main(). Returns only when no re-launch happened (policy already set, or exec failed).
void ensure_passive_openmp_wait(int argc, char** argv);

}  // namespace varrate

#pragma once
// The process environment that LibTorch's CPU work needs, set before the libraries that read it start: the
// executables re-launch themselves once with what the user has not set already.
//   OMP_WAIT_POLICY=PASSIVE      OpenMP worker threads otherwise busy-wait for milliseconds at every
//                                synchronisation point; when the cores are shared (other processes, the GUI
//                                thread), that spinning slows LibTorch's parallel loops several-fold.
//   OPENBLAS_THREAD_TIMEOUT=4    OpenBLAS's own threads (fp32 GEMMs) otherwise keep yielding for about 2^28
//                                cycles after each call, competing with the OpenMP threads of what follows.
//   MALLOC_MMAP_THRESHOLD_,      glibc otherwise maps blocks above 32 MiB (above 128 KiB until it adapts)
//   MALLOC_TRIM_THRESHOLD_       fresh and returns them on free, so each large temporary tensor pays its page
//                                faults again (about 0.3 ms per MiB): freed blocks up to 1 GiB stay for
//                                reuse.
namespace varrate {

// Call first thing in main(). Returns only when no re-launch happened (nothing to set, or exec failed).
void prepare_process_environment(int argc, char** argv);

}  // namespace varrate

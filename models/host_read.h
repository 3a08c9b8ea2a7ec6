#pragma once
// The one way the runtime, the decoder and the compressed stores read a tensor back on the host. Counted, so
// that a test can check on any machine that a decode step reads nothing back: on a GPU each read is a
// device-to-host copy that also waits for every queued kernel.
#include <cstdint>

#include <ATen/ATen.h>

namespace varrate {

// `t` on the CPU (itself when it is there already; a copy from a device otherwise). Counted either way.
at::Tensor to_host(const at::Tensor& t);
// Calls of to_host() so far in this process (all threads).
int64_t host_reads();

}  // namespace varrate

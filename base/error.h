#pragma once
// One exception type for every bad input or failed operation. Library code throws it with a message that
// names what is wrong and where; the API boundary (CLI main, session) catches it once and reports it.
#include <stdexcept>
#include <string>

namespace varrate {

class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A budget that a cache of this length cannot meet (the anchors, window or floor alone exceed it): a sweep
// over lengths records such a cell as infeasible instead of stopping.
class InfeasibleBudget : public Error {
  public:
    using Error::Error;
};

// One line for any exception at a program's boundary (CLI, the app's worker thread, the trainer, the
// studio): the message's first line (LibTorch appends a stack trace), with a hint for out-of-memory.
std::string describe_exception(const std::exception& e);
// The same for the exception in flight (call inside a catch block); "unknown error" for non-std ones.
std::string describe_current_exception();

}  // namespace varrate

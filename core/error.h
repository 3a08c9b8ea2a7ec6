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

// Thrown when a cancel flag was raised; not an error to report, but it unwinds the same way.
class Cancelled : public std::runtime_error {
  public:
    Cancelled() : std::runtime_error("cancelled") {}
};

}  // namespace varrate

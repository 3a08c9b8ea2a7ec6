#pragma once
// A sweep's --budget list, checked once for niah and eval: each budget in (0, 1], none listed twice.
#include <vector>

namespace varrate {

// Throws Error "--budget: ..." naming the first bad or repeated entry.
void check_budget_list(const std::vector<double>& budgets);

}  // namespace varrate

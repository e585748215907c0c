// The planner's number and cut formats, for Plan's text (plan.cc) and the search's reasons
// (search.cc): one spelling of each.
#pragma once

#include <string>
#include <vector>

namespace pipewright::pipeline {

/// `value` with `digits` decimals ("12.50").
std::string fixed(double value, int digits);
/// Microseconds as milliseconds with two decimals ("1.25 ms").
std::string millis(double us);
/// A balance as the planner writes it: "4|9".
std::string balance_text(const std::vector<int>& balance);

}  // namespace pipewright::pipeline

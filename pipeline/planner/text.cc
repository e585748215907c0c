#include "pipeline/planner/text.h"

#include <cstdio>

namespace pipewright::pipeline {

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string millis(double us) { return fixed(us / 1000.0, 2) + " ms"; }

std::string balance_text(const std::vector<int>& balance) {
  std::string out;
  for (int b : balance) out += (out.empty() ? "" : "|") + std::to_string(b);
  return out;
}

}  // namespace pipewright::pipeline

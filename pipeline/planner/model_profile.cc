#include "pipeline/planner/model_profile.h"

#include <algorithm>
#include <cmath>

namespace pipewright::pipeline {

int64_t Affine::bytes(int64_t rows) const {
  return std::max<int64_t>(0, std::llround(at(rows)));
}

Affine Affine::through(int64_t r1, double y1, int64_t r2, double y2) {
  if (r1 == r2) return {y1, 0.0};
  const double slope = (y2 - y1) / static_cast<double>(r2 - r1);
  return {y1 - slope * static_cast<double>(r1), slope};
}

}  // namespace pipewright::pipeline

// Precision, the mixed-precision policy's one value (Note [The precision policy],
// autograd/precision.h), alone: for headers that name it without the engine (the planner's
// pure search, pipeline/planner/plan.h).
#pragma once

#include <cstdint>

namespace pipewright::autograd {

/// The dtype matrix products take their operands in (Note [The precision policy]).
enum class Precision : uint8_t { kFloat32, kBFloat16, kFloat16 };

}  // namespace pipewright::autograd

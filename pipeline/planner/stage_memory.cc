#include "pipeline/planner/stage_memory.h"

#include <cstdio>

namespace pipewright::pipeline {
namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

std::string StageMemory::str() const {
  return "layers [" + std::to_string(first) + ", " + std::to_string(last) + ") rows " +
         std::to_string(rows) + (exact ? "" : " (estimated)") + ": F keeps " +
         mib(forward.delta) + " (peak +" + mib(forward.peak) + "), checkpointed F keeps " +
         mib(checkpoint.delta) + ", B peak +" + mib(backward.peak) + ", parameters " +
         mib(parameter_bytes);
}

}  // namespace pipewright::pipeline

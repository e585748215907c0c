#include "pipeline/schedule/checkpoint_mode.h"

#include <stdexcept>

namespace pipewright::pipeline {

Checkpoint parse_checkpoint(std::string_view text) {
  if (text == "always") return Checkpoint::kAlways;
  if (text == "except_last") return Checkpoint::kExceptLast;
  if (text == "never") return Checkpoint::kNever;
  throw std::invalid_argument("checkpoint mode must be one of 'always', 'except_last', 'never' (got '" +
                              std::string(text) + "')");
}

std::string to_string(Checkpoint mode) {
  switch (mode) {
    case Checkpoint::kAlways: return "always";
    case Checkpoint::kExceptLast: return "except_last";
    case Checkpoint::kNever: return "never";
  }
  return "unknown";
}

bool is_checkpointed(Checkpoint mode, int microbatch, int num_microbatches) {
  switch (mode) {
    case Checkpoint::kAlways: return microbatch < num_microbatches;
    case Checkpoint::kExceptLast: return microbatch < num_microbatches - 1;
    case Checkpoint::kNever: return false;
  }
  return false;
}

}  // namespace pipewright::pipeline

// TiedParameters: one parameter of the model held as a copy on each of several stages (the
// token embedding of the first stage and the LM head of the last), kept equal.
//
// Note [Tied parameters]
// A parameter shared by stages on two workers cannot be one tensor: each worker accumulates
// its gradient on its own thread and device. So, as DeepSpeed's TiedLayerSpec and Megatron's
// embedding group do, each stage holds a copy, and the Pipe keeps the copies one parameter
// (PipeOptions::tied_parameters names each group's copies):
//
//   built:           every copy ← the first copy's value (the same bits on every process)
//   backward start:  every copy's .grad but the first's is reset (undefined)
//   backward end:    total = first.grad + Σ other copies' .grad   (over the pipeline's
//                    processes too: Processes::sum_over_pipeline); every copy's .grad ← total
//
// Resetting the other copies first makes the total right also when .grad accumulates over
// several backwards: the first copy carries what earlier steps summed, the others only this
// step's share. After the end every copy holds the same gradient bits, so any optimizer over
// all the copies (pipe.parameters()) moves them alike, and they stay bitwise equal (their
// optimizer states too). The gradient equals that of the plain model using one tensor in
// both places, to float rounding. Pipe::clip_grad_norm counts a group once (its first copy).
#pragma once

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/processes.h"

namespace pipewright::pipeline {

class TiedParameters {
 public:
  TiedParameters() = default;
  /// Resolves each group of parameter names (state-dict keys of `module`) to its tensors and
  /// stages (`balance`: children per stage), and copies the first tensor's value into the
  /// others. Throws std::invalid_argument naming the values for a group of fewer than two
  /// names, a name that is not a parameter of `module`, a name in two places, copies of other
  /// shapes or dtypes than the first's, or two names of one tensor (a group holds copies).
  TiedParameters(const nn::Sequential& module, const std::vector<std::vector<std::string>>& groups,
                 const std::vector<int>& balance);

  bool empty() const { return groups_.empty(); }

  /// Whether this process runs stage s (in one process: every stage).
  using RunsStage = std::function<bool(int stage)>;
  /// Backward start: resets .grad of every copy held here but each group's first one.
  void begin_backward(const RunsStage& runs_stage) const;
  /// Backward end: each copy held here gets the group's summed gradient; `processes`
  /// (null in one process) sums over the pipeline's processes. Throws communication errors.
  void reduce(const RunsStage& runs_stage, Processes* processes) const;

  /// Whether `p` is a copy other than its group's first (clip_grad_norm skips those).
  bool is_extra_copy(const Tensor& p) const { return extra_.count(p.impl()) > 0; }

 private:
  struct Member {
    std::string name;
    Tensor param;
    int stage = 0;
  };
  std::vector<std::vector<Member>> groups_;
  std::unordered_set<const TensorImpl*> extra_;
};

}  // namespace pipewright::pipeline

// Pipe: pipeline-parallel training of an nn::Sequential (torchgpipe's GPipe, rebuilt on
// pipewright's tensors and autograd, with the schedule as data).
//
//   pipeline::Pipe pipe(std::move(model), {.balance = {3, 1},
//                                          .devices = {Device::cpu(0), Device::cpu(1)},
//                                          .chunks = 8});
//   Tensor out = pipe.forward(x);               // GPipe forward, on the last stage's device
//   nn::cross_entropy(out, y.to(out.device())).backward();  // runs the pipeline's backward
//   opt.step();
//
//   StepResult r = pipe.train_step(x, y, loss_fn);   // the whole step under options().schedule
//
// How a step runs (Note [Anatomy of a step], runtime.h):
//   1. scatter: the mini-batch is cut into micro-batches (microbatch.h);
//   2. the schedule (schedule/generators.h) says, per worker, which cell actions run in which order;
//      the checkpoint mode becomes R actions (with_recompute); validate() proves it complete
//      and deadlock-free before anything runs;
//   3. the workers (one thread each, worker.h) interpret their action lists (runtime.h);
//      activations and gradients cross stages through the Transport (transport.h);
//   4. forward() runs only the F prefix of GPipe and returns the gathered output whose
//      grad_fn is a PipeBackward node owning the step; the user's loss.backward() reaches it
//      and it runs the rest (R, B) on the workers. train_step() runs the whole schedule, the
//      loss computed per micro-batch on the last stage.
//
// Tied parameters (a token embedding on the first stage and the LM head on the last): one
// copy per stage, named in PipeOptions::tied_parameters; their gradients are summed after
// every backward, so the copies stay equal (Note [Tied parameters], tied_parameters.h).
//
// Errors (torchgpipe's, with C++ types): balance empty / entry <= 0 / Σ balance != module
// size / duplicate child / shared parameter across workers / chunks <= 0 / virtual_stages
// not dividing balance / a bad tied_parameters group -> std::invalid_argument naming the values; fewer devices than
// workers -> std::out_of_range naming both counts. An exception raised inside a stage reaches
// the caller unchanged (same type and message); the Pipe stays usable.
//
// Devices: a stage's inputs are moved to its device, and a tensor its module returns on
// another device is copied back to it, differentiably (Note [A stage's output on another
// device], stage_fn.cc): what a stage sends, and forward()'s output, is on the stage's device.
//
// Threads: one per worker, alive as long as the Pipe, joined by ~Pipe. Each uses
// max(1, hardware_threads() / workers) intra-op threads (ThreadBudgetGuard; or
// PipeOptions::threads_per_worker), so the workers together use the machine's cores once.
// One call at a time per Pipe (forward, backward of its outputs, train_step are serialised);
// any number of Pipes may coexist.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/arguments.h"
#include "nn/random_key.h"
#include "nn/grad_scaler.h"
#include "nn/sequential.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipe_options.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/spec.h"
#include "pipeline/step_result.h"
#include "pipeline/trace.h"
#include "tensor/generator.h"

namespace pipewright::nn {
class Optimizer;
}  // namespace pipewright::nn

namespace pipewright::pipeline {

class Runtime;
class Step;
class PipeTestAccess;
class DeferredBatchNorm;
class TiedParameters;
class StepGraph;

/// What forward, train_step and eval_step take besides the tensors and the loss
/// (torch.distributed.pipelining's args_chunk_spec / kwargs / output_merge_spec / return
/// outputs, torchgpipe's NoChunk). Every field has a default: `{}` is one input and one target
/// split on dim 0, a mean loss, the Pipe's schedule. Pipe::forward reads input_chunks,
/// arguments and output_dims, and refuses what it cannot honour (a schedule, target specs, a
/// summed loss): it has no loss and runs GPipe.
struct StepOptions {
  /// How each input is cut into micro-batches: one ChunkSpec per input, split on a dim or
  /// replicated whole into every micro-batch; empty: every input split on dim 0. Every split
  /// input has the same size N on its dim.
  std::vector<ChunkSpec> input_chunks = {};
  /// The same for the targets; a split target has size N on its dim too.
  std::vector<ChunkSpec> target_chunks = {};
  /// Non-tensor arguments (flags, sizes, names) that every stage's modules and loss_fn read
  /// through nn::current_arguments(), whole, for every micro-batch, in the forward and in the
  /// recomputes of its backward (nn/arguments.h).
  nn::Arguments arguments = {};
  /// kMean: loss_fn averages over its micro-batch, gradients are weighted n_j / N (equal to
  /// the whole batch's mean loss); kSum: loss_fn sums, weights 1 (equal to the whole batch's
  /// summed loss, so gradients accumulated over several steps equal one step on the union).
  LossReduction reduction = LossReduction::kMean;
  /// Keep the last stage's outputs and return them in StepResult::outputs (Pipe::forward
  /// always returns them).
  bool return_outputs = false;
  /// Output k concatenated over the micro-batches on output_dims[k] (dim 0 for all when
  /// empty; negative counts from the end); in Pipe::forward its gradient is cut the same way
  /// in backward.
  std::vector<int> output_dims = {};
  /// This step's schedule exactly as given, instead of the one the Pipe builds from
  /// PipeOptions::schedule: its R actions are its checkpointing (a hand-written schedule, one
  /// read from torch's CSV, or pipe.schedule_for(m, "zb-h1") to run another registered
  /// schedule once). It must fit the pipe (workers, stages, placement, the batch's micro-batch
  /// count). train_step only: forward and eval_step refuse it.
  std::optional<Schedule> schedule = std::nullopt;
  /// The index of this mini-batch's first row in the global batch, which random layers key
  /// their draws by (Note [Keyed randomness], nn/random_key.h): distributed::train_step sets
  /// it to the replica's first row, so every data-parallel degree draws the same masks.
  int64_t first_sample = 0;
  /// Multiplies every micro-batch's loss gradient (n_j / N for kMean) by this factor, so every
  /// gradient of the step comes out scaled by it: nn::GradScaler::scale() for float16 (dynamic
  /// loss scaling, nn/grad_scaler.h; undo it with unscale_grads). The returned losses are
  /// unscaled. train_step only: forward and eval_step refuse another value than 1. Throws
  /// std::invalid_argument unless positive and finite.
  double loss_scale = 1.0;
  /// train_step with an optimizer only: before the update, clip the gradients' global 2-norm
  /// to this (torch's clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6))) with device
  /// ops alone, so a CUDA graph can hold it (Note [Clipping without a host read],
  /// pipe_clip_grad.cc). 0: no clipping. Throws std::invalid_argument for a negative or
  /// non-finite value, or a non-zero one without an optimizer or across processes (use
  /// Pipe::clip_grad_norm there).
  double max_grad_norm = 0.0;
  /// train_step with an optimizer only: dynamic loss scaling inside the whole step
  /// (nn/grad_scaler.h; torch.amp.GradScaler's semantics): the backward starts from the loss
  /// times grad_scaler->scale(), every gradient is then divided by it and checked for inf/NaN
  /// on the device (Note [Loss scaling without a host read], pipe_clip_grad.cc), clipped
  /// when max_grad_norm is set, and the optimizer steps unless a gradient anywhere overflowed;
  /// then grad_scaler->update() (the scale backs off after an overflow, grows after
  /// growth_interval clean steps). StepResult::skipped says whether the update was skipped.
  /// With PipeOptions::processes the finding is combined over the pipeline's processes.
  /// A disabled scaler changes nothing. Not owned: it must outlive the call. Throws
  /// std::invalid_argument when set with loss_scale != 1, or on a train_step without an
  /// optimizer (use loss_scale and unscale_grads there).
  nn::GradScaler* grad_scaler = nullptr;
  /// Trace each action of a CUDA worker by the device's clock instead of the host's (Note
  /// [Device timelines], runtime_timeline.cc): a timing event on the worker's stream after
  /// the stream's wait for the action's input and one where its compute ends (before its
  /// messages), converted after the step to the trace's microseconds. The trace and its
  /// bubble then say when the device ran each action, not when the host issued it (an
  /// action's host time on a GPU is its issue). Costs two event records per action and a host
  /// wait for each CUDA worker's stream at the step's start and end. Actions of CPU workers
  /// and the messages' times stay the host's. A whole step with PipeOptions::cuda_graphs runs
  /// eagerly with it (a replay is traced by no one).
  bool device_timeline = false;
};

class Pipe {
 public:
  /// Splits `module` into stages by options.balance, moves each stage's parameters and
  /// buffers to its device (Module::to) and starts the workers. Errors: see the file comment.
  Pipe(nn::Sequential module, PipeOptions options);
  /// Joins the worker threads. Outputs of forward() whose backward has not run yet keep
  /// their activations; their backward then throws std::logic_error.
  ~Pipe();
  /// A moved-from Pipe only accepts destruction and move assignment; anything else throws
  /// std::logic_error "this Pipe was moved from (std::move) ...".
  Pipe(Pipe&&) noexcept;
  Pipe& operator=(Pipe&&) noexcept;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  // ---- GPipe forward (backward through the returned tensors) ----

  /// input [N, ...] (float32/float64, any device; moved to the first stage's device) ->
  /// the model's output [N, ...] on the last stage's device, equal to module(input).
  /// Splits into micro-batches as torch.chunk does: ceil(N / chunks) rows each, the last
  /// smaller, so at most chunks of them and sometimes fewer (N 10, chunks 8: 5 micro-batches
  /// of 2; N 3, chunks 8: 3 of 1). Runs GPipe (or, when workers hold several stages, looped
  /// BFS over the placement: GPipe per stage); in training mode with grad mode on, the
  /// output's grad_fn is "PipeBackward": backward through it runs the pipeline's backward,
  /// accumulates every parameter's .grad and gives the input its gradient when it requires
  /// one; backward with retain_graph keeps the step, so the next backward runs it again and
  /// accumulates once more, as through the plain model. In eval mode or under NoGradGuard
  /// nothing is kept.
  /// Throws std::invalid_argument for a rank-0 or undefined input, for a Pipe spread over
  /// processes (use train_step), when the model returns other than one tensor (use the tuple
  /// form), and whatever a stage throws.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// The tuple form (torch Pipe's forward(*inputs)): equal to module(inputs) under an
  /// nn::ArgumentsGuard of options.arguments, split and run as forward(Tensor), with the same
  /// backward. Of StepOptions it reads input_chunks (default: every input split on dim 0,
  /// all with the same N; ChunkSpec::replicate() hands every micro-batch the whole tensor,
  /// torchgpipe's NoChunk), arguments and output_dims (output k concatenated over the
  /// micro-batches on output_dims[k], dim 0 by default); it refuses the fields it cannot honour
  /// (schedule, target_chunks, reduction kSum: it runs GPipe, the loss is the caller's); the
  /// others do not apply. Backward: an input split on dim d gets its gradient concatenated on
  /// d, a replicated one the sum over the micro-batches.
  /// Throws std::invalid_argument for a Pipe spread over processes (use train_step), for the
  /// refused fields (naming them), and as scatter() and gather() do (microbatch.h: a wrong
  /// number of specs or dims, an undefined, rank-0 or too-small split input, split inputs of
  /// different sizes, every input replicated, an output without its dim, naming the shapes);
  /// and whatever a stage throws.
  nn::Tensors forward(const nn::Tensors& inputs, const StepOptions& options = {});

  // ---- a whole training step under any schedule ----

  /// Runs forward and backward of one mini-batch with the loss computed per micro-batch on
  /// the last stage (torch.distributed.pipelining's schedule.step(x, target=y)).
  ///
  /// Tensors and loss: input [N, ...] (any dtype the first stage takes, any device: moved
  /// to the first stage's), target [N, ...] (any dtype, moved to the last stage's device);
  /// loss_j = loss_fn(output_j, target_j), one element. The tuple form takes several inputs
  /// (the first stage's tuple) and targets, and loss_fn(outputs_j, targets_j) over the last
  /// stage's whole output tuple; the single-tensor form is the tuple form with one input, one
  /// target and a last stage returning one tensor, and takes every StepOptions field (its
  /// spec lists and output_dims then have at most one entry).
  ///
  /// Options (StepOptions, all defaulted): input_chunks / target_chunks split each tensor on
  /// its dim or replicate it; reduction kMean (loss_fn averages over its micro-batch, the
  /// backward of micro-batch j starts from n_j / N, Note [Loss scaling]) or kSum (weight 1);
  /// arguments, seen by every stage and loss_fn; return_outputs and output_dims; first_sample
  /// for keyed random layers. The schedule: schedule_for(m), built from
  /// options().schedule for the batch's m micro-batches, or StepOptions::schedule exactly.
  ///
  /// Effects: parameter gradients equal those of the whole batch's loss and accumulate into
  /// .grad (zero them yourself); an input that requires grad gets its gradient as
  /// loss.backward() would give it (summed over micro-batches for a replicated one).
  /// Returns the mini-batch loss, each micro-batch's loss and size, the schedule that ran,
  /// its trace and counters (StepResult).
  ///
  /// Throws std::invalid_argument, naming the values, when loss_fn is empty, an input or
  /// target is undefined, a spec list has another size than its tensors, a split tensor has
  /// no such dim, split inputs or targets differ in size N on their dims, every input is
  /// replicated, output_dims does not fit the outputs, the single-tensor form's last stage
  /// returns other than one tensor, or StepOptions::schedule does not fit this
  /// pipe (workers, stages, stage placement, micro-batch count — naming both) or fails
  /// validate(); std::domain_error when a micro-batch's loss is NaN or infinite (Note
  /// [Non-finite loss], pipeline/step_readback.cc: found when the step's losses are read at
  /// its end, so the backwards ran and .grad holds what they spread: zero it before the next
  /// step); and whatever a stage or loss_fn throws (a GPU kernel's bad index,
  /// std::out_of_range, also at the step's end: Note [One read per step]). After any failure
  /// last_failure() says where it began; deferred BatchNorm statistics of the failed step are
  /// discarded.
  StepResult train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                        const StepOptions& options = {});
  StepResult train_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                        const TupleLossFn& loss_fn, const StepOptions& options = {});

  /// A whole training step: optimizer.zero_grad(), train_step(input, target, loss_fn,
  /// options), step(optimizer); the same result and the same bits. With
  /// PipeOptions::cuda_graphs, with every stage on a CUDA device (one graph over several:
  /// Note [A step over devices], step_graph.h), the second step of a kind (the same
  /// shapes, dtypes, options, optimizer and tensors) is captured as a CUDA graph and later
  /// ones replay it: the inputs are copied into the graph's own tensors, the graph is
  /// launched on the caller's current stream, the losses are read (Note [A step as one
  /// graph], step_graph.h). A replayed step's StepResult has no trace (last_trace() keeps the
  /// captured step's). Errors as train_step; a replayed step that fails (a non-finite loss, a
  /// bad index) changes no parameter, statistic or optimizer state, as the eager step would
  /// not (DeviceGraph::set_gate), throws what the eager step throws and drops the graph.
  /// options.max_grad_norm clips before the update and options.grad_scaler scales the loss,
  /// unscales and skips an overflowing update (StepResult::skipped), all on the device (see
  /// StepOptions), so a graph holds them too.
  StepResult train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                        nn::Optimizer& optimizer, const StepOptions& options = {});
  StepResult train_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                        const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                        const StepOptions& options = {});
  /// Bytes the captured step's graph holds on its device (its private memory pool: the
  /// step's activations, temporaries and gradients); 0 without a graph.
  int64_t graph_pool_bytes() const;
  /// Steps replayed from a graph so far, and graphs captured (tests and logs).
  int64_t graph_replays() const;
  int64_t graph_captures() const;

  /// Forward and loss of one mini-batch, no backward (torch.distributed.pipelining's
  /// schedule.eval()): the forward actions of the fill-drain schedule (GPipe; looped BFS over
  /// the placement when workers hold several stages), no autograd graph kept, no .grad
  /// touched. The modules run in their current mode: call eval() first for BatchNorm's
  /// running statistics and no Dropout (in training mode, deferred BatchNorm commits as in a
  /// training step). Returns loss and micro-batch losses as train_step (a NaN/inf loss is
  /// returned, not thrown: there is no backward to protect) and, with return_outputs, the
  /// outputs. Errors as train_step, and std::invalid_argument for a StepOptions::schedule
  /// (an evaluation runs forwards only).
  StepResult eval_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                       const TupleLossFn& loss_fn, const StepOptions& options = {});
  StepResult eval_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                       const StepOptions& options = {});

  // ---- gradient clipping ----
  /// torch's clip_grad_norm_ over every parameter of the model, wherever it lives: the
  /// p-norm of all gradients together (parameters without a .grad skipped), each stage's
  /// share reduced on its device, the shares summed (the maximum for p = inf) over stages,
  /// workers and, with PipeOptions::processes, over the processes of the replica's pipeline;
  /// then every gradient this process holds is scaled by min(1, max_norm / (norm + 1e-6)).
  /// Data-parallel replicas hold equal gradients after a step, so each computes the same norm.
  /// Equal to nn::clip_grad_norm on the un-pipelined model within float rounding (the sum's
  /// order differs). Call between steps (after train_step, or after the backward through
  /// forward()'s output). Returns the norm before clipping. Throws std::invalid_argument for
  /// norm_type <= 0 or max_norm < 0 (nn/clip_grad.h), and communication errors.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);

  /// nn::GradScaler::unscale over every parameter this process holds, the finding (an inf or
  /// NaN gradient anywhere) combined over every stage and, with PipeOptions::processes, every
  /// process of the pipeline, so that each decides alike before any optimizer steps (a
  /// data-parallel replica holds the same gradients after a step, so it finds the same). Call
  /// after train_step(..., {.loss_scale = scaler.scale()}) and before clip_grad_norm and the
  /// optimizer (scaler.step). Returns the finding. Throws what GradScaler::unscale throws and
  /// communication errors.
  bool unscale_grads(nn::GradScaler& scaler);

  // ---- the optimizer's step, stage by stage ----
  /// optimizer.step(), with each stage's parameters updated on that stage's worker, all stages
  /// at once (in a pipeline each stage owns its parameters; torch.distributed.pipelining gives
  /// each stage its own optimizer): on a GPU each stage's update runs on its worker's stream
  /// rather than serialised on the caller's, on CPU devices on its worker's cores. Equal to
  /// optimizer.step() bit for bit (each parameter's update reads only its own grad and state).
  /// Parameters of the optimizer that belong to no stage are updated on the caller's thread;
  /// with PipeOptions::processes, only this process's stages are (the others' grads are
  /// undefined here anyway). Every grad is checked before any is applied; throws what
  /// nn::Optimizer::step throws. Call between steps.
  void step(nn::Optimizer& optimizer);

  // ---- the schedule ----
  /// How many micro-batches a batch of `rows` rows makes (torch.chunk's rule with
  /// options().chunks: microbatch_sizes, schedule/spec.h). Throws std::invalid_argument when
  /// rows < 1.
  int num_microbatches(int64_t rows) const;
  /// The schedule train_step runs for a batch of `num_microbatches` micro-batches:
  /// build_schedule(options().schedule, workers, m) (schedule/spec.h). With `name`, the
  /// same spec (virtual stages, recompute) with that registered schedule instead: what to pass
  /// as StepOptions::schedule to run another schedule for one step. Throws what
  /// build_schedule throws, and std::invalid_argument for a name that interleaves virtual
  /// stages on a pipe without them (check_virtual_stages, pipe_schedule.h).
  Schedule schedule_for(int num_microbatches) const;
  Schedule schedule_for(int num_microbatches, const std::string& name) const;

  // ---- structure ----
  nn::Sequential& module();
  const nn::Sequential& module() const;
  /// The stages, in order (slices sharing the module's children).
  const std::vector<nn::Sequential>& partitions() const;
  const std::vector<int>& balance() const { return options().balance; }
  /// The device of each stage (p · v entries, stage s on options().devices[its worker]); the
  /// workers' devices are options().devices.
  const std::vector<Device>& stage_devices() const;
  const PipeOptions& options() const;
  int num_workers() const;
  int num_stages() const;
  /// Whether this process runs stage s (always, unless PipeOptions::processes says otherwise).
  bool runs_stage(int s) const;
  nn::Tensors parameters() const { return module().parameters(); }
  /// Training mode of the model and of every stage (Module::train).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return module().is_training(); }
  void zero_grad() { module().zero_grad(); }

  // ---- randomness ----
  // Random layers (nn::Dropout, attention dropout) draw keyed masks (Note [Keyed randomness],
  // nn/random_key.h): a function of (seed, step, the layer's index in the whole model, the
  // sample's index in the mini-batch), so every balance, schedule, chunks, placement and
  // data-parallel degree draws the same masks, equal to the plain model's under
  // nn::RandomKeyGuard({seed, step, 0}). What draws from the thread's current_generator()
  // instead (a custom layer) gets its worker's Generator.

  /// The key of the next training step: seed (PipeOptions::seed, or manual_seed's) and step,
  /// the number of training steps run so far (train_step, and forward() when it records a
  /// backward, each count one, whether or not they succeed; eval_step and forward without
  /// grad use the current step and do not count). Saving and restoring both resumes a run's
  /// masks exactly, under any cut.
  nn::RandomKey random_key() const { return {random_seed_, random_step_, 0}; }
  void set_random_step(uint64_t step) { random_step_ = step; }
  /// Re-seeds: the keyed draws to (seed, step 0), worker w's generator to (mix_seed(seed, w), 0).
  void manual_seed(uint64_t seed);
  /// Worker w's generator (read or set it only between calls).
  Generator& generator(int worker);

  // ---- what the last step did ----
  /// The trace of the most recent forward (+ its backward, once run) or train_step.
  Trace last_trace() const;
  /// Actions run per stage in that step (forwards, recomputes, backwards, weight_grads).
  StepCounters last_counters() const;
  /// Where that step failed: the stage, worker, micro-batch and action whose exception the
  /// caller received (Failure::str() says it in one line), and how many actions other
  /// workers started after it; nullopt when it succeeded or failed outside any action. A call
  /// refused before its step ran (a bad argument) is no step: this still describes the one
  /// before. The exception itself reaches the caller unchanged.
  std::optional<Failure> last_failure() const;

 private:
  // The tests' seam (fault injection: Runtime::set_fault_hook), pipeline/pipe_test_access.h.
  friend class PipeTestAccess;

  /// `captured`: when given, the step's values are gathered but not read (Step::defer_read)
  /// and the Step is handed out (a graph capture reads them after each replay).
  /// `loss_scale`: the whole step's loss scale as a one-element float64 tensor on a device
  /// (StepOptions::grad_scaler; undefined: options.loss_scale, a number).
  StepResult run_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                      const TupleLossFn& loss_fn, const StepOptions& options,
                      bool with_backward, std::shared_ptr<Step>* captured = nullptr,
                      const Tensor& loss_scale = Tensor());
  StepResult eager_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                        const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                        const StepOptions& options);
  StepResult capture_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                          const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                          const StepOptions& options);
  StepResult replay_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                         nn::GradScaler* scaler);
  /// The parameters of the stages this process runs (every stage in one process).
  nn::Tensors local_parameters() const;
  /// StepOptions::max_grad_norm (Note [Clipping without a host read], pipe_clip_grad.cc).
  void clip_grads_on_device(double max_norm);
  /// StepOptions::grad_scaler (Note [Loss scaling without a host read], pipe_clip_grad.cc):
  /// divides this process's gradients by `scale` (one float64 on a device) and returns the
  /// finding, a float64 on home_device(): 0, or NaN when a gradient is inf or NaN.
  Tensor unscale_grads_on_device(const Tensor& scale);
  /// The device of the first stage this process runs (where the whole step's scalars live).
  Device home_device() const;
  /// Why this step cannot be a graph ("" when it can).
  std::string why_not_graphed(const nn::Tensors& inputs, const nn::Optimizer& optimizer,
                              const StepOptions& options) const;
  Schedule fill_drain_schedule(int microbatches) const;
  void run(Step& step, const std::vector<std::vector<Action>>& actions);
  /// Throws std::logic_error when this Pipe was moved from: every public function but the
  /// destructor and move assignment calls it, or runtime(), first.
  void check_not_moved_from() const;
  Runtime& runtime() const;

  nn::Sequential module_;
  PipeOptions options_;
  std::shared_ptr<Runtime> runtime_;
  std::unique_ptr<DeferredBatchNorm> deferred_;
  std::shared_ptr<const TiedParameters> tied_;
  uint64_t random_seed_ = 0;
  uint64_t random_step_ = 0;
  std::unique_ptr<StepGraph> graph_;  // PipeOptions::cuda_graphs (step_graph.h)
};

}  // namespace pipewright::pipeline

#include "pipeline/planner/stage_estimate.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pipewright::pipeline {
namespace {

// The layers of [first, last) and, on the last stage, the loss.
std::vector<const LayerProfile*> layers_of(const ModelProfile& profile, int first, int last) {
  std::vector<const LayerProfile*> out;
  for (int i = first; i < last; ++i) out.push_back(&profile.layers[static_cast<size_t>(i)]);
  if (last == profile.num_layers()) out.push_back(&profile.loss);
  return out;
}

int64_t output_of(const ModelProfile& profile, int layer, int64_t rows) {
  return profile.layers[static_cast<size_t>(layer)].output_bytes.bytes(rows);
}

// The message crossing the cut before layer `first` (> 0): the previous layer's output as it
// travels (narrowed under a 16-bit policy) and the portals crossing the cut (as they are).
int64_t message_before(const ModelProfile& profile, const std::vector<SkipSpan>& skips,
                       int first, int64_t rows) {
  return profile.layers[static_cast<size_t>(first - 1)].message_bytes.bytes(rows) +
         portal_bytes(profile, skips, first, rows);
}

}  // namespace

int64_t portal_bytes(const ModelProfile& profile, const std::vector<SkipSpan>& skips, int cut,
                     int64_t rows) {
  int64_t bytes = 0;
  for (const SkipSpan& skip : skips) {
    if (skip.stash < cut && cut <= skip.pop) {
      bytes += output_of(profile, skip.stash, rows);
    }
  }
  return bytes;
}

int64_t stage_input_bytes(const ModelProfile& profile, const std::vector<SkipSpan>& skips,
                          int first, int64_t rows) {
  if (first == 0) return profile.input_bytes_per_row * rows;
  return output_of(profile, first - 1, rows) + portal_bytes(profile, skips, first, rows);
}

StageCosts estimate_stage_times(const ModelProfile& profile, int first, int last,
                                int64_t rows, const std::vector<SkipSpan>& skips) {
  StageCosts c{0, 0, 0, 0, 0};
  for (const LayerProfile* l : layers_of(profile, first, last)) {
    c.forward += std::max(0.0, l->forward_us.at(rows));
    c.backward += std::max(0.0, l->backward_us.at(rows));
    c.backward_input += std::max(0.0, l->backward_input_us.at(rows));
    c.backward_weight += std::max(0.0, l->backward_weight_us.at(rows));
  }
  // The copies: stage 0's micro-batch in F, the output sent at the end of F, the input
  // gradient sent at the end of B / I.
  const double speed = std::max(profile.copy_bytes_per_us, 1e-9);
  if (first == 0) c.forward += std::max(0.0, profile.input_copy_us.at(rows));
  if (last < profile.num_layers()) {
    c.forward += static_cast<double>(message_before(profile, skips, last, rows)) / speed;
  }
  if (first > 0) {
    const double grad = static_cast<double>(message_before(profile, skips, first, rows)) / speed;
    c.backward += grad;
    c.backward_input += grad;
  }
  c.recompute = c.forward;
  return c;
}

// Note [Additive stage costs]
// A recorded cell of layers [a, b) holds its input, what each layer keeps beyond its output,
// and each layer's output except those freed as soon as the next layer has run
// (LayerProfile::frees_input of the next layer): exact for chains, since the profile measured
// the same chain (profile.cc, Note [The memory pass]). The forward's peak is the highest of
// (held before layer i + layer i's forward peak). The backward is an estimate: the cell and
// the arriving gradient, plus the largest single-layer backward peak (and the stage's
// gradients on its first backward); I keeps each weight layer's output gradient for W.
// These guide the search; stage_probe.h measures what the planner finally reports.
StageMemory estimate_stage_memory(const ModelProfile& profile, int first, int last,
                                  int64_t rows, const std::vector<SkipSpan>& skips) {
  StageMemory m;
  m.first = first;
  m.last = last;
  m.rows = rows;
  m.is_first = first == 0;
  m.is_last = last == profile.num_layers();
  // A portal arriving is held with the input; one leaving is sent with the output. Under a
  // 16-bit policy the messages (and the gradients sent back) travel narrowed and the cell
  // holds its input widened (Note [16-bit messages], stage_fn.cc).
  const int64_t input = stage_input_bytes(profile, skips, first, rows);
  m.input_bytes = m.is_first ? 0 : message_before(profile, skips, first, rows);
  m.grad_input_bytes = m.input_bytes;
  m.output_bytes = m.is_last ? 0 : message_before(profile, skips, last, rows);  // next's
  m.grad_output_bytes = m.output_bytes;
  m.input_portal_bytes = m.is_first ? 0 : portal_bytes(profile, skips, first, rows);
  m.grad_output_portal_bytes = m.is_last ? 0 : portal_bytes(profile, skips, last, rows);
  m.target_bytes = m.is_last ? profile.target_bytes_per_row * rows : 0;

  int64_t held = input, peak = input, first_forward = 0, backward_peak = 0, kept_for_w = 0;
  int64_t previous_output = input;
  bool first_layer = true;
  for (const LayerProfile* l : layers_of(profile, first, last)) {
    const int64_t out = l->output_bytes.bytes(rows);
    peak = std::max(peak, held + l->forward_peak_bytes.bytes(rows));
    held += out + static_cast<int64_t>(std::llround(l->activation_bytes.at(rows)));
    if (!first_layer && l->frees_input) held -= previous_output;
    first_layer = false;
    previous_output = out;
    first_forward += l->first_forward_bytes.bytes(rows);
    backward_peak = std::max(backward_peak, l->backward_peak_bytes.bytes(rows));
    if (l->parameter_bytes > 0) kept_for_w += out;
    m.parameter_bytes += l->parameter_bytes;
    m.buffer_bytes += l->buffer_bytes;
  }
  // Relative to the level before each action, with the arriving message already there.
  const int64_t arrived = m.input_bytes;
  const int64_t loss_seed = m.is_last ? profile.loss_bytes : 0;
  m.forward = {peak - arrived, held + loss_seed - arrived};
  m.forward_first = {m.forward.peak + first_forward, m.forward.delta + first_forward};
  // A checkpointed cell keeps stage 0's batch as copied, a later stage's message as it
  // arrived (Note [16-bit checkpoints], cell.h), so during its F the 16-bit message is there
  // beside its widened copy (`input - arrived` more bytes: 0 in float32, where they are one).
  // A checkpointed last stage keeps the loss value and its seed, both made in F (measured:
  // planner_memory_test); R rebuilds the graph to the loss, the seed already there.
  const int64_t kept = m.is_first ? input : arrived;
  m.checkpoint = {peak - arrived + (m.is_first ? 0 : input - arrived),
                  kept - arrived + 2 * loss_seed};
  m.checkpoint_first = {m.checkpoint.peak + first_forward, m.checkpoint.delta + first_forward};
  m.recompute = {peak - kept, held - kept};
  const int64_t residue = m.is_last ? profile.loss_bytes : 0;  // the loss value, to step end
  const int64_t dy = m.is_last ? loss_seed : m.grad_output_bytes;
  m.backward = {backward_peak, residue - held - loss_seed - (m.is_last ? 0 : dy)};
  m.backward_first = {m.backward.peak + m.parameter_bytes, m.backward.delta + m.parameter_bytes};
  m.backward_input = {backward_peak, kept_for_w - (m.is_last ? loss_seed : dy)};
  // The first I makes the .grad of the parameters B takes (Note [What W takes], engine.cc);
  // the profile does not say which those are, so the first W counts every .grad.
  m.backward_input_first = m.backward_input;
  m.weight = {0, residue - held - kept_for_w};
  m.weight_first = {m.parameter_bytes, m.weight.delta + m.parameter_bytes};
  return m;
}

}  // namespace pipewright::pipeline

#include "pipeline/deferred_batch_norm.h"

#include "nn/batch_norm.h"

namespace pipewright::pipeline {
namespace {

void collect(nn::Module& module, std::vector<nn::BatchNorm1d*>& out) {
  if (auto* bn = dynamic_cast<nn::BatchNorm1d*>(&module)) out.push_back(bn);
  for (const auto& [name, child] : module.children()) collect(*child, out);
}

}  // namespace

std::vector<nn::BatchNorm1d*> find_batch_norms(nn::Module& module) {
  std::vector<nn::BatchNorm1d*> out;
  collect(module, out);
  return out;
}

DeferredBatchNorm::DeferredBatchNorm(nn::Module& module) : layers_(find_batch_norms(module)) {
  for (nn::BatchNorm1d* bn : layers_) bn->set_deferred(true);
}

DeferredBatchNorm::~DeferredBatchNorm() {
  for (nn::BatchNorm1d* bn : layers_) bn->set_deferred(false);
}

void DeferredBatchNorm::commit() {
  for (nn::BatchNorm1d* bn : layers_) bn->commit_deferred();
}

void DeferredBatchNorm::discard() {
  for (nn::BatchNorm1d* bn : layers_) bn->discard_deferred();
}

}  // namespace pipewright::pipeline

// nn::Tensors: the one spelling of a list of tensors above the autograd floor (a module's
// inputs and outputs, a micro-batch, a pipeline message).
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace pipewright::nn {

using Tensors = std::vector<Tensor>;

}  // namespace pipewright::nn

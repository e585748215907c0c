// Every differentiable op, by family. Include this, or just the family you use.
//
//   elementwise.h  add sub mul div (broadcasting), scalar add/mul, neg exp log sqrt square
//                  tanh sigmoid relu
//   linear.h       matmul (transpose flags), linear (x·Wᵀ + b, B/W split)
//   reduction.h    sum, mean (all elements or one dim)
//   shape_ops.h    reshape, flatten, slice, chunk, cat, to(device)
//   softmax.h      softmax, log_softmax
//   batch_norm.h   batch_norm_train, batch_norm_eval
//   dropout.h      dropout (replayable Philox mask)
//   loss.h         mse_loss, cross_entropy, Reduction
//
// Each op: same semantics and errors as the tensor/ops.h op of the same name (PyTorch's), and
// when grad mode is on and an input requires grad, records a Node whose backward computes
// the gradients; float32 and float64.
#pragma once

#include "autograd/batch_norm.h"
#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/linear.h"
#include "autograd/loss.h"
#include "autograd/reduction.h"
#include "autograd/shape_ops.h"
#include "autograd/softmax.h"

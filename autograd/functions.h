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
//   views.h        transpose, permute, contiguous
//   batched_matmul.h  batched_matmul (leading dims broadcast), sum_to_shape
//   masking.h      masked_fill, causal_softmax (scaled, causal-masked softmax in one kernel)
//   activation_ops.h  gelu (exact / tanh), erf
//   layer_norm.h   layer_norm, rms_norm (B/W split)
//   embedding.h    embedding (padding_idx)
//   attention.h    scaled_dot_product_attention (tiled: never stores the scores)
//
// Each op: same semantics and errors as the tensor/ops.h op of the same name (PyTorch's), and
// when grad mode is on and an input requires grad, records a Node whose backward computes
// the gradients; float32 and float64.
#pragma once

#include "autograd/activation_ops.h"
#include "autograd/attention.h"
#include "autograd/batch_norm.h"
#include "autograd/batched_matmul.h"
#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/embedding.h"
#include "autograd/layer_norm.h"
#include "autograd/linear.h"
#include "autograd/loss.h"
#include "autograd/masking.h"
#include "autograd/precision.h"
#include "autograd/reduction.h"
#include "autograd/shape_ops.h"
#include "autograd/softmax.h"
#include "autograd/views.h"

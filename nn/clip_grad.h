// Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_, and its two halves
// get_total_norm and clip_grads_with_norm_).
//
//   loss.backward();
//   double norm = nn::clip_grad_norm(model.parameters(), 1.0);  // the norm before clipping
//   opt.step();
//
// A model spread over processes (a Pipe across MPI ranks: pipeline::Pipe::clip_grad_norm)
// combines the halves: each process computes grad_norm_share() of its own parameters, the
// shares are summed (maximised for the inf-norm) over the processes, norm_from_share() turns
// the result into the total norm, and clip_grads_with_norm() scales the local gradients.
#pragma once

#include <limits>

#include "nn/module.h"

namespace pipewright::nn {

/// The p-norm of all gradients together, as if concatenated into one vector (torch's
/// get_total_norm over the parameters' .grad; parameters without a .grad are skipped):
///   (Σ_params Σ_i |g_i|^p)^(1/p), or max |g_i| for p = inf. 0 when no parameter has a grad.
/// Each parameter's share is reduced on its own device in its dtype (p = 1, 2, inf; other p on
/// the host) and the shares are combined in double, so the result equals torch's within float
/// rounding. Throws std::invalid_argument for norm_type <= 0 or NaN.
double total_grad_norm(const Tensors& params, double norm_type = 2.0);

/// torch.nn.utils.clip_grads_with_norm_: every .grad *= min(1, max_norm / (total_norm + 1e-6)),
/// in place (nothing is touched when the factor is 1). A NaN total_norm makes every gradient
/// NaN, as in torch. Throws std::invalid_argument for max_norm < 0 or NaN.
void clip_grads_with_norm(const Tensors& params, double max_norm, double total_norm);

/// torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite):
/// total_grad_norm, then clip_grads_with_norm. Returns the total norm before clipping.
/// Throws what those throw, and std::domain_error naming the norm when it is NaN or infinite
/// and error_if_nonfinite is set (the gradients are then left unchanged).
double clip_grad_norm(const Tensors& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

/// This set of parameters' share of the total norm: Σ |g|^p for finite p, max |g| for p = inf.
/// Shares of disjoint sets combine by sum (max for p = inf). Throws as total_grad_norm.
double grad_norm_share(const Tensors& params, double norm_type = 2.0);

/// grad_norm_share() for norm_type 1, 2 or inf by device ops alone (no host read: a CUDA graph can
/// hold it): each gradient's Σ|g|^p (max |g|) in its dtype on its device, widened to float64, moved
/// to `home` and added (maxed, NaN propagating) in the parameters' order (for p = 1 and 2, a
/// gradient on `home` by ops::add_norm_share_: one pass on a GPU, the same bits). A [1] float64
/// tensor on `home`; undefined when no parameter has a non-empty gradient. Throws
/// std::invalid_argument for another norm_type.
Tensor grad_norm_share_on_device(const Tensors& params, double norm_type, const Device& home);

/// The total norm from the combined share: share^(1/p), or the share itself for p = inf.
double norm_from_share(double share, double norm_type = 2.0);

}  // namespace pipewright::nn

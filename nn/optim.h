// The optimizers in one include (torch.optim): Optimizer (base, state_dict), SGD, Adam, AdamW.
//
//   #include "nn/optim.h"
//   nn::AdamW opt(model.parameters(), {.lr = 3e-4});
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Bazel target: //nn:optim.
#pragma once

#include "nn/optim_adam.h"
#include "nn/optim_sgd.h"
#include "nn/optimizer.h"

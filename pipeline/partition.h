// Partitioning: cut an nn::Sequential into pipeline stages and place them on devices.
//
// balance[s] consecutive children form stage s (torchgpipe's `balance`). With interleaving
// (v virtual stages per worker, PipeOptions::schedule.virtual_stages) there are p·v stages on p
// workers and stage s runs on worker s % p, on devices[s % p]:
//
//   children  0 1 | 2 | 3 4 5 | 6        balance {2, 1, 3, 1}, v = 2, p = 2
//   stage       0    1    2     3
//   worker      0    1    0     1        devices {cpu:0, cpu:1}
//
// Checks, with torchgpipe's messages (pipe.h lists the exception types):
//   balance empty, an entry <= 0, Σ balance != module size, a child appearing twice,
//   a parameter shared by stages on different workers, fewer devices than workers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

/// Throws std::invalid_argument when `module` holds the same module instance twice
/// ("module with duplicate children is not supported (child 3 is child 1)").
void verify_module(const nn::Sequential& module);

/// Throws std::invalid_argument when balance is empty, has an entry <= 0 (naming the
/// balance), or does not sum to module.size() (naming both numbers), or when its length is
/// not a multiple of `virtual_stages` (>= 1).
void verify_balance(const nn::Sequential& module, const std::vector<int>& balance,
                    int virtual_stages = 1);

/// The part of verify_balance that needs no module: balance non-empty, every entry > 0, and
/// Σ balance == `count` ("<what> and sum of balance have different length (<what>: 4, sum of
/// balance: 3)"). `what` names the sequence being cut (e.g. "module", "costs").
void verify_balance_sum(const std::vector<int>& balance, size_t count, const std::string& what);

/// Throws std::out_of_range when fewer devices than workers are given
/// ("too few devices to hold given partitions (devices: 1, partitions: 2)").
void verify_devices(const std::vector<Device>& devices, int num_workers);

/// Throws std::invalid_argument unless `stage_worker` has `num_stages` entries, each in
/// [0, num_workers), and every worker holds at least one stage (naming the offending entry).
void verify_placement(const std::vector<int>& stage_worker, int num_stages, int num_workers);

/// The stages: slices of `module` sharing its module instances (Sequential::slice).
/// Call verify_balance first.
std::vector<nn::Sequential> split_module(const nn::Sequential& module,
                                         const std::vector<int>& balance);

/// Throws std::invalid_argument naming the parameter when one tensor is a parameter of
/// two stages on different workers (their gradients would race). stage_worker[s] is the
/// worker of stage s.
void verify_no_shared_parameters(const std::vector<nn::Sequential>& stages,
                                 const std::vector<int>& stage_worker);

}  // namespace pipewright::pipeline

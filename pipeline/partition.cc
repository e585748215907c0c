#include "pipeline/partition.h"

#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pipewright::pipeline {
namespace {

std::string list_str(const std::vector<int>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

}  // namespace

void verify_module(const nn::Sequential& module) {
  std::map<const nn::Module*, size_t> seen;
  for (size_t i = 0; i < module.size(); ++i) {
    auto [it, inserted] = seen.emplace(module.ptr(i).get(), i);
    if (!inserted) {
      throw std::invalid_argument("module with duplicate children is not supported (child " +
                                  std::to_string(i) + " is child " + std::to_string(it->second) +
                                  ")");
    }
  }
}

void verify_balance_sum(const std::vector<int>& balance, size_t count, const std::string& what) {
  if (balance.empty()) {
    throw std::invalid_argument(
        "balance is required (got an empty balance): the number of children per stage, e.g. "
        "{.balance = {3, 1}}; pipeline::balance_by_parameters(stages, model) computes one, and "
        "pipeline::make_pipe derives it from where the children are");
  }
  for (int b : balance) {
    if (b <= 0) {
      throw std::invalid_argument("all balance numbers must be positive integer (balance: " +
                                  list_str(balance) + ")");
    }
  }
  const long sum = std::accumulate(balance.begin(), balance.end(), 0L);
  if (sum != static_cast<long>(count)) {
    throw std::invalid_argument(what + " and sum of balance have different length (" + what +
                                ": " + std::to_string(count) +
                                ", sum of balance: " + std::to_string(sum) + ")");
  }
}

void verify_balance(const nn::Sequential& module, const std::vector<int>& balance,
                    int virtual_stages) {
  verify_balance_sum(balance, module.size(), "module");
  if (virtual_stages <= 0) {
    throw std::invalid_argument("virtual_stages must be positive (virtual_stages: " +
                                std::to_string(virtual_stages) + ")");
  }
  if (balance.size() % static_cast<size_t>(virtual_stages) != 0) {
    throw std::invalid_argument(
        "balance length must be a multiple of virtual_stages (balance: " + list_str(balance) +
        ", virtual_stages: " + std::to_string(virtual_stages) + ")");
  }
}

void verify_devices(const std::vector<Device>& devices, int num_workers) {
  if (devices.size() < static_cast<size_t>(num_workers)) {
    throw std::out_of_range("too few devices to hold given partitions (devices: " +
                            std::to_string(devices.size()) +
                            ", partitions: " + std::to_string(num_workers) + ")");
  }
}

std::vector<nn::Sequential> split_module(const nn::Sequential& module,
                                         const std::vector<int>& balance) {
  std::vector<nn::Sequential> stages;
  size_t begin = 0;
  for (int b : balance) {
    stages.push_back(module.slice(begin, begin + static_cast<size_t>(b)));
    begin += static_cast<size_t>(b);
  }
  return stages;
}

void verify_no_shared_parameters(const std::vector<nn::Sequential>& stages,
                                 const std::vector<int>& stage_worker) {
  std::map<const TensorImpl*, size_t> owner;  // parameter -> first stage holding it
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const auto& [name, p] : stages[s].named_parameters()) {
      auto [it, inserted] = owner.emplace(p.impl(), s);
      if (!inserted && stage_worker[it->second] != stage_worker[s]) {
        throw std::invalid_argument(
            "parameter '" + name + "' of stage " + std::to_string(s) +
            " is shared with stage " + std::to_string(it->second) +
            ", which runs on another worker (worker " + std::to_string(stage_worker[s]) +
            " vs " + std::to_string(stage_worker[it->second]) +
            "); give each stage its own copy and name the copies in "
            "PipeOptions::tied_parameters");
      }
    }
  }
}

void verify_placement(const std::vector<int>& stage_worker, int num_stages, int num_workers) {
  if (static_cast<int>(stage_worker.size()) != num_stages) {
    throw std::invalid_argument("stage_worker has " + std::to_string(stage_worker.size()) +
                                " entries but there are " + std::to_string(num_stages) +
                                " stages");
  }
  std::vector<char> used(static_cast<size_t>(num_workers), 0);
  for (int s = 0; s < num_stages; ++s) {
    const int w = stage_worker[static_cast<size_t>(s)];
    if (w < 0 || w >= num_workers) {
      throw std::invalid_argument("stage_worker[" + std::to_string(s) + "] = " +
                                  std::to_string(w) + " is not a worker (0.." +
                                  std::to_string(num_workers - 1) + ")");
    }
    used[static_cast<size_t>(w)] = 1;
  }
  for (int w = 0; w < num_workers; ++w) {
    if (!used[static_cast<size_t>(w)]) {
      throw std::invalid_argument("stage_worker gives worker " + std::to_string(w) +
                                  " no stage");
    }
  }
}

}  // namespace pipewright::pipeline

// TiedParameters (Note [Tied parameters], tied_parameters.h).
#include "pipeline/tied_parameters.h"

#include <map>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace pipewright::pipeline {
namespace {

std::string group_text(const std::vector<std::string>& group) {
  std::string text = "{";
  for (size_t i = 0; i < group.size(); ++i) text += (i ? ", '" : "'") + group[i] + "'";
  return text + "}";
}

/// The stage of the parameter `name` ("<child>.<...>"): the stage holding that child.
int stage_of(const std::string& name, const std::vector<int>& balance) {
  const size_t child = std::stoul(name.substr(0, name.find('.')));
  size_t end = 0;
  for (size_t s = 0; s < balance.size(); ++s) {
    end += static_cast<size_t>(balance[s]);
    if (child < end) return static_cast<int>(s);
  }
  return static_cast<int>(balance.size()) - 1;
}

}  // namespace

TiedParameters::TiedParameters(const nn::Sequential& module,
                               const std::vector<std::vector<std::string>>& groups,
                               const std::vector<int>& balance) {
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : module.named_parameters()) params.emplace(name, p);
  std::map<std::string, size_t> seen;  // name -> its group
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<std::string>& names = groups[g];
    if (names.size() < 2) {
      throw std::invalid_argument("tied_parameters: group " + std::to_string(g) + " " +
                                  group_text(names) + " has fewer than two parameters");
    }
    std::vector<Member> members;
    for (const std::string& name : names) {
      auto it = params.find(name);
      if (it == params.end()) {
        throw std::invalid_argument("tied_parameters: '" + name +
                                    "' is not a parameter of the model (its state-dict keys "
                                    "name them, e.g. '" + module.named_parameters().front().first +
                                    "')");
      }
      if (auto [where, fresh] = seen.emplace(name, g); !fresh) {
        throw std::invalid_argument("tied_parameters: '" + name + "' appears twice (groups " +
                                    std::to_string(where->second) + " and " + std::to_string(g) +
                                    ")");
      }
      const Tensor& first = members.empty() ? it->second : members.front().param;
      if (!members.empty() && (it->second.shape() != first.shape() ||
                               it->second.dtype() != first.dtype())) {
        throw std::invalid_argument(
            "tied_parameters: '" + name + "' is " + it->second.shape().str() + " " +
            dtype_name(it->second.dtype()) + " but '" + members.front().name + "' is " +
            first.shape().str() + " " + dtype_name(first.dtype()));
      }
      for (const Member& m : members) {
        if (m.param.impl() == it->second.impl()) {
          throw std::invalid_argument("tied_parameters: '" + m.name + "' and '" + name +
                                      "' are one tensor; a group names copies, one per stage");
        }
      }
      members.push_back({name, it->second, stage_of(name, balance)});
    }
    autograd::NoGradGuard no_grad;
    for (size_t k = 1; k < members.size(); ++k) {
      members[k].param.copy_from(members.front().param);
      extra_.insert(members[k].param.impl());
    }
    groups_.push_back(std::move(members));
  }
}

void TiedParameters::begin_backward(const RunsStage& runs_stage) const {
  for (const auto& group : groups_) {
    for (size_t k = 1; k < group.size(); ++k) {
      if (runs_stage(group[k].stage)) Tensor(group[k].param).set_grad(Tensor());
    }
  }
}

void TiedParameters::reduce(const RunsStage& runs_stage, Processes* processes) const {
  autograd::NoGradGuard no_grad;
  for (const auto& group : groups_) {
    nn::Tensors held;
    Tensor total;  // Σ of the held copies' gradients, on the first held copy's device
    for (const Member& m : group) {
      if (!runs_stage(m.stage)) continue;
      held.push_back(m.param);
      const Tensor g = m.param.grad();
      if (!g.defined()) continue;
      total = total.defined() ? ops::add(total, g.to(total.device())) : g.clone();
    }
    if (processes != nullptr) {
      const Tensor& like = group.front().param;
      nn::Tensors sum = {total.defined()
                                     ? total.to(Device::cpu(0))
                                     : Tensor::zeros(like.shape(), {.dtype = like.dtype()})};
      processes->sum_over_pipeline(sum);
      total = sum[0];
    }
    if (!total.defined()) continue;
    // A fresh tensor for each copy: an accumulation into one copy's .grad must not reach another.
    for (Tensor p : held) {
      p.set_grad(p.device() == total.device() ? total.clone() : total.to(p.device()));
    }
  }
}

}  // namespace pipewright::pipeline

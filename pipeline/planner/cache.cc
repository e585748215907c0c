#include "pipeline/planner/cache.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pipewright::pipeline {
namespace {

// 2 (2026-11-27): the profile's input_copy_us; the profile's frees and backward peaks remeasured.
// 3 (2026-12-07): a stage's input_portal_bytes and grad_output_portal_bytes, a layer's
//   message_bytes.
// 4 (2026-12-07): a checkpointed cell keeps its 16-bit input message (Note [16-bit
//   checkpoints], cell.h): the probes' checkpoint and recompute levels under a policy.
// 5 (2026-12-07): under a policy a deferred W keeps dY in 16 bits and db (Note [What a
//   deferred W keeps], autograd/linear.cc), and a Linear's first db is 1ᵀ·dY (a row of ones
//   more): the probes' B and W levels and the profile's backward peaks; only products leave
//   their parameter gradients to W (Note [What W takes], engine.cc), so a stage's first I
//   has its own level (backward_input_first).
constexpr int kCacheVersion = 5;

using nlohmann::json;

json affine(const Affine& a) { return json::array({a.fixed, a.per_row}); }
json bytes(const ActionBytes& a) { return json::array({a.peak, a.delta}); }

// Reads field `key` of `j`, naming it when missing or of the wrong type.
template <class T>
T field(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw std::invalid_argument("planner cache: " + where + " has no \"" + key + "\"");
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw std::invalid_argument("planner cache: " + where + "." + key + ": " + e.what());
  }
}

Affine read_affine(const json& j, const std::string& key, const std::string& where) {
  const auto v = field<std::vector<double>>(j, key, where);
  if (v.size() != 2) throw std::invalid_argument("planner cache: " + where + "." + key + ": not [fixed, per_row]");
  return {v[0], v[1]};
}

ActionBytes read_bytes(const json& j, const std::string& key, const std::string& where) {
  const auto v = field<std::vector<int64_t>>(j, key, where);
  if (v.size() != 2) throw std::invalid_argument("planner cache: " + where + "." + key + ": not [peak, delta]");
  return {v[0], v[1]};
}

json layer_json(const LayerProfile& l) {
  return {{"name", l.name},
          {"forward_us", affine(l.forward_us)},
          {"backward_us", affine(l.backward_us)},
          {"backward_input_us", affine(l.backward_input_us)},
          {"backward_weight_us", affine(l.backward_weight_us)},
          {"parameter_bytes", l.parameter_bytes},
          {"buffer_bytes", l.buffer_bytes},
          {"output_bytes", affine(l.output_bytes)},
          {"message_bytes", affine(l.message_bytes)},
          {"activation_bytes", affine(l.activation_bytes)},
          {"forward_peak_bytes", affine(l.forward_peak_bytes)},
          {"backward_peak_bytes", affine(l.backward_peak_bytes)},
          {"first_forward_bytes", affine(l.first_forward_bytes)},
          {"frees_input", l.frees_input}};
}

LayerProfile read_layer(const json& j, const std::string& where) {
  LayerProfile l;
  l.name = field<std::string>(j, "name", where);
  l.forward_us = read_affine(j, "forward_us", where);
  l.backward_us = read_affine(j, "backward_us", where);
  l.backward_input_us = read_affine(j, "backward_input_us", where);
  l.backward_weight_us = read_affine(j, "backward_weight_us", where);
  l.parameter_bytes = field<int64_t>(j, "parameter_bytes", where);
  l.buffer_bytes = field<int64_t>(j, "buffer_bytes", where);
  l.output_bytes = read_affine(j, "output_bytes", where);
  l.message_bytes = read_affine(j, "message_bytes", where);
  l.activation_bytes = read_affine(j, "activation_bytes", where);
  l.forward_peak_bytes = read_affine(j, "forward_peak_bytes", where);
  l.backward_peak_bytes = read_affine(j, "backward_peak_bytes", where);
  l.first_forward_bytes = read_affine(j, "first_forward_bytes", where);
  l.frees_input = field<bool>(j, "frees_input", where);
  return l;
}

// StageMemory's ActionBytes fields, by name, for both directions.
template <class M, class F>
void each_action(M& m, F&& f) {
  f("forward_first", m.forward_first);
  f("forward", m.forward);
  f("checkpoint_first", m.checkpoint_first);
  f("checkpoint", m.checkpoint);
  f("recompute", m.recompute);
  f("backward_first", m.backward_first);
  f("backward", m.backward);
  f("backward_input_first", m.backward_input_first);
  f("backward_input", m.backward_input);
  f("weight_first", m.weight_first);
  f("weight", m.weight);
}

json stage_json(const StageMemory& m) {
  json j = {{"first", m.first},
            {"last", m.last},
            {"is_first", m.is_first},
            {"is_last", m.is_last},
            {"rows", m.rows},
            {"exact", m.exact},
            {"input_bytes", m.input_bytes},
            {"output_bytes", m.output_bytes},
            {"grad_output_bytes", m.grad_output_bytes},
            {"grad_input_bytes", m.grad_input_bytes},
            {"input_portal_bytes", m.input_portal_bytes},
            {"grad_output_portal_bytes", m.grad_output_portal_bytes},
            {"parameter_bytes", m.parameter_bytes},
            {"buffer_bytes", m.buffer_bytes},
            {"target_bytes", m.target_bytes}};
  each_action(m, [&](const char* name, const ActionBytes& a) { j[name] = bytes(a); });
  return j;
}

StageMemory read_stage(const json& j, const std::string& where) {
  StageMemory m;
  m.first = field<int>(j, "first", where);
  m.last = field<int>(j, "last", where);
  m.is_first = field<bool>(j, "is_first", where);
  m.is_last = field<bool>(j, "is_last", where);
  m.rows = field<int64_t>(j, "rows", where);
  m.exact = field<bool>(j, "exact", where);
  m.input_bytes = field<int64_t>(j, "input_bytes", where);
  m.output_bytes = field<int64_t>(j, "output_bytes", where);
  m.grad_output_bytes = field<int64_t>(j, "grad_output_bytes", where);
  m.grad_input_bytes = field<int64_t>(j, "grad_input_bytes", where);
  m.input_portal_bytes = field<int64_t>(j, "input_portal_bytes", where);
  m.grad_output_portal_bytes = field<int64_t>(j, "grad_output_portal_bytes", where);
  m.parameter_bytes = field<int64_t>(j, "parameter_bytes", where);
  m.buffer_bytes = field<int64_t>(j, "buffer_bytes", where);
  m.target_bytes = field<int64_t>(j, "target_bytes", where);
  each_action(m, [&](const char* name, ActionBytes& a) { a = read_bytes(j, name, where); });
  return m;
}

}  // namespace

std::string to_json(const PlanCache& cache) {
  const ModelProfile& p = cache.profile;
  json layers = json::array();
  for (const LayerProfile& l : p.layers) layers.push_back(layer_json(l));
  json profile = {{"layers", layers},
                  {"loss", layer_json(p.loss)},
                  {"input_bytes_per_row", p.input_bytes_per_row},
                  {"target_bytes_per_row", p.target_bytes_per_row},
                  {"loss_bytes", p.loss_bytes},
                  {"batch_rows", p.batch_rows},
                  {"threads", p.threads},
                  {"copy_bytes_per_us", p.copy_bytes_per_us},
                  {"input_copy_us", affine(p.input_copy_us)},
                  {"fingerprint", p.fingerprint}};
  json stages = json::array();
  for (const StageMemory& m : cache.stages) stages.push_back(stage_json(m));
  json trials = json::array();
  for (const PlanTrial& t : cache.trials) {
    trials.push_back({{"config", t.config}, {"measured_us", t.measured_us}, {"steps", t.steps}});
  }
  return json{{"version", kCacheVersion},
              {"profile", profile},
              {"stages", stages},
              {"trials", trials}}
      .dump(1);
}

PlanCache plan_cache_from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("planner cache: not JSON: ") + e.what());
  }
  if (field<int>(j, "version", "the file") != kCacheVersion) {
    throw std::invalid_argument("planner cache: version " + j["version"].dump() + ", expected " +
                                std::to_string(kCacheVersion));
  }
  PlanCache cache;
  const json profile = field<json>(j, "profile", "the file");
  ModelProfile& p = cache.profile;
  const json layers = field<json>(profile, "layers", "profile");
  for (size_t i = 0; i < layers.size(); ++i) {
    p.layers.push_back(read_layer(layers[i], "profile.layers[" + std::to_string(i) + "]"));
  }
  p.loss = read_layer(field<json>(profile, "loss", "profile"), "profile.loss");
  p.input_bytes_per_row = field<int64_t>(profile, "input_bytes_per_row", "profile");
  p.target_bytes_per_row = field<int64_t>(profile, "target_bytes_per_row", "profile");
  p.loss_bytes = field<int64_t>(profile, "loss_bytes", "profile");
  p.batch_rows = field<int64_t>(profile, "batch_rows", "profile");
  p.threads = field<int>(profile, "threads", "profile");
  p.copy_bytes_per_us = field<double>(profile, "copy_bytes_per_us", "profile");
  p.input_copy_us = read_affine(profile, "input_copy_us", "profile");
  p.fingerprint = field<std::string>(profile, "fingerprint", "profile");
  const json stages = field<json>(j, "stages", "the file");
  for (size_t i = 0; i < stages.size(); ++i) {
    cache.stages.push_back(read_stage(stages[i], "stages[" + std::to_string(i) + "]"));
  }
  if (j.contains("trials")) {
    const json trials = field<json>(j, "trials", "the file");
    for (size_t i = 0; i < trials.size(); ++i) {
      const std::string where = "trials[" + std::to_string(i) + "]";
      cache.trials.push_back({.config = field<std::string>(trials[i], "config", where),
                              .measured_us = field<double>(trials[i], "measured_us", where),
                              .steps = field<int>(trials[i], "steps", where),
                              .error = {}});
    }
  }
  return cache;
}

std::optional<PlanCache> read_plan_cache(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  // A cache an older pipewright wrote is remade, as a stale one is.
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("version") && j["version"].is_number_integer() &&
      j["version"].get<int>() < kCacheVersion) {
    return std::nullopt;
  }
  try {
    return plan_cache_from_json(text.str());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

void write_plan_cache(const std::string& path, const PlanCache& cache) {
  std::ofstream file(path);
  file << to_json(cache);
  if (!file) throw std::runtime_error("cannot write the planner cache " + path);
}

}  // namespace pipewright::pipeline

// Non-tensor arguments and the per-thread current ones (arguments.h).
#include "nn/arguments.h"

#include <stdexcept>

namespace pipewright::nn {
namespace {

const Arguments& no_arguments() {
  static const Arguments empty;
  return empty;
}

thread_local const Arguments* installed = nullptr;

const char* type_name(const Argument& value) {
  static const char* const kNames[] = {"bool", "int64", "double", "string"};
  return kNames[value.index()];
}

}  // namespace

void Arguments::type_error(const std::string& name, const char* requested) const {
  throw std::invalid_argument("argument '" + name + "' is a " +
                              type_name(values_.at(name)) + ", read as " + requested);
}

void Arguments::missing(const std::string& name) const {
  std::string names;
  for (const auto& [key, value] : values_) names += (names.empty() ? "" : ", ") + key;
  throw std::out_of_range("no argument '" + name + "' in this call (arguments: " +
                          (names.empty() ? "none" : names) + ")");
}

const Arguments& current_arguments() {
  return installed != nullptr ? *installed : no_arguments();
}

ArgumentsGuard::ArgumentsGuard(const Arguments& arguments) : previous_(installed) {
  installed = &arguments;
}

ArgumentsGuard::~ArgumentsGuard() { installed = previous_; }

}  // namespace pipewright::nn

// Non-tensor arguments of a forward call: flags, sizes, modes, names that every micro-batch
// of a pipelined step sees whole (torch.distributed.pipelining passes non-tensor kwargs to
// every micro-batch unchanged; torchgpipe took tensors only).
//
//   class Scale : public nn::Module {        // y = x · arguments()["scale"] (1 when absent)
//     Tensor forward(const Tensor& x) override {
//       return x * nn::current_arguments().get_or("scale", 1.0);
//     }
//   };
//   nn::ArgumentsGuard with({{"scale", 0.5}});  // un-pipelined: around the call
//   model.forward(x);
//   pipe.train_step(inputs, targets, loss, {.arguments = {{"scale", 0.5}}});  // pipelined
//
// Modules read the arguments of the call they run in through current_arguments(), a
// per-thread value installed by ArgumentsGuard (the same pattern as the skip tracker in
// skip.h): a Pipe installs the step's arguments on its worker threads around every forward
// and recompute of every stage (and the loss), so a module reads the same values pipelined
// or not, and a recomputed forward sees what the first one saw. Outside any guard the
// arguments are empty.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace pipewright::nn {

/// One argument: a flag, an integer, a real number or a string.
using Argument = std::variant<bool, int64_t, double, std::string>;

/// Named arguments, copied by value (cheap: a few small entries).
class Arguments {
 public:
  Arguments() = default;
  Arguments(std::initializer_list<std::pair<const std::string, Argument>> entries)
      : values_(entries) {}

  bool empty() const { return values_.empty(); }
  bool contains(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, Argument value) { values_[name] = std::move(value); }

  /// The argument `name` as T (bool, int64_t, double or std::string; an int64_t argument is
  /// also read as double). Throws std::out_of_range naming the argument and the names there
  /// are when it is absent, std::invalid_argument naming the stored and requested types when
  /// it holds another type.
  template <class T>
  T get(const std::string& name) const;
  /// get<T>(name), or `fallback` when absent (still throws on a type mismatch).
  template <class T>
  T get_or(const std::string& name, T fallback) const {
    return contains(name) ? get<T>(name) : fallback;
  }

  const std::map<std::string, Argument>& values() const { return values_; }
  friend bool operator==(const Arguments&, const Arguments&) = default;

 private:
  [[noreturn]] void type_error(const std::string& name, const char* requested) const;
  [[noreturn]] void missing(const std::string& name) const;
  std::map<std::string, Argument> values_;
};

/// The arguments of the forward call running on this thread (empty outside any guard).
const Arguments& current_arguments();

/// Installs `arguments` as this thread's current_arguments() until destroyed (then the
/// previous ones are back). The Arguments object must outlive the guard.
class ArgumentsGuard {
 public:
  explicit ArgumentsGuard(const Arguments& arguments);
  ~ArgumentsGuard();
  ArgumentsGuard(const ArgumentsGuard&) = delete;
  ArgumentsGuard& operator=(const ArgumentsGuard&) = delete;

 private:
  const Arguments* previous_;
};

// ---- template definitions ----

template <class T>
T Arguments::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) missing(name);
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  if constexpr (std::is_same_v<T, double>) {
    if (const int64_t* value = std::get_if<int64_t>(&it->second)) {
      return static_cast<double>(*value);
    }
  }
  if constexpr (std::is_same_v<T, bool>) type_error(name, "bool");
  else if constexpr (std::is_same_v<T, int64_t>) type_error(name, "int64");
  else if constexpr (std::is_same_v<T, double>) type_error(name, "double");
  else if constexpr (std::is_same_v<T, std::string>) type_error(name, "string");
  else static_assert(sizeof(T) == 0, "Arguments hold bool, int64_t, double or std::string");
}

}  // namespace pipewright::nn

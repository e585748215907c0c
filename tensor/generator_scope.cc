// current_generator() and GeneratorGuard: a per-thread stack of generators.
#include "tensor/generator.h"

namespace pipewright {
namespace {
thread_local Generator* t_current = nullptr;
}  // namespace

Generator& current_generator() { return t_current != nullptr ? *t_current : default_generator(); }

GeneratorGuard::GeneratorGuard(Generator& generator) : previous_(t_current) {
  t_current = &generator;
}

GeneratorGuard::~GeneratorGuard() { t_current = previous_; }

}  // namespace pipewright

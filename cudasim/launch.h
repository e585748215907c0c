// cudasim's kernel launch: what `kernel<<<grid, block, shared_bytes, stream>>>(args...)` does,
// spelled PW_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) (cudasim/device.h).
//
// On the calling host thread, like the CUDA runtime:
//  1. the arguments are converted to the kernel's parameter types and copied (kernel
//     parameters are passed by value, so the caller may change its variables at once);
//  2. the launch configuration is checked against an sm_90 GPU's limits; a bad one sets the
//     thread's last error cudaErrorInvalidConfiguration (what PW_CUDA_CHECK_LAUNCH reports)
//     and nothing runs;
//  3. the pointer arguments become the launch's memory accesses: `const T*` a read, `T*` a
//     read and write, each from the pointer to the end of its allocation (a kernel's extent
//     is not known); pointers inside a struct argument (a functor holding input pointers)
//     count as reads, unless the struct lists its pointers itself: a member
//     `template <class Sink> void each_pointer(const Sink& sink) const` calling
//     sink(pointer, bytes, written) for each (a tensor list, cuda_kernels/optim.cu), whose
//     accesses then have those extents. The runtime checks them (live device memory of the
//     stream's device, or of a peer with access enabled) and hands them to the race detector;
//  4. the grid is queued on the stream; it runs later on the stream's thread (executor.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudasim/executor.h"
#include "cudasim/sim_internal.h"

namespace cudasim {
namespace detail {

/// "const float*, float*, long int" for P = {const float*, float*, long int}.
template <class... P>
std::string parameter_list() {
  const std::string pretty = __PRETTY_FUNCTION__;  // "... [with P = {const float*, ...}; ...]"
  const size_t begin = pretty.find("P = {");
  if (begin == std::string::npos) return "";
  const size_t end = pretty.find('}', begin);
  return pretty.substr(begin + 5, end - begin - 5);
}

/// What a struct argument's each_pointer calls for each pointer it holds.
struct PointerSink {
  std::vector<Access>* out;
  int index;
  void operator()(const void* p, size_t bytes, bool written) const {
    if (p != nullptr) out->push_back(Access{p, bytes, written, index});
  }
};

template <class T, class = void>
struct ListsPointers : std::false_type {};
template <class T>
struct ListsPointers<T, std::void_t<decltype(std::declval<const T&>().each_pointer(
                            std::declval<const PointerSink&>()))>> : std::true_type {};

template <class T>
void add_accesses(std::vector<Access>& out, const T& value, int index) {
  if constexpr (ListsPointers<T>::value) {
    value.each_pointer(PointerSink{&out, index});
  } else if constexpr (std::is_pointer_v<T>) {
    if (value != nullptr) {
      out.push_back(Access{value, Access::kToEnd,
                           !std::is_const_v<std::remove_pointer_t<T>>, index});
    }
  } else if constexpr (std::is_class_v<T> && std::is_trivially_copyable_v<T>) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
    for (size_t off = 0; off + sizeof(void*) <= sizeof(T); off += alignof(void*)) {
      const void* word = nullptr;
      std::memcpy(&word, bytes + off, sizeof word);
      if (word != nullptr && is_device_memory(word)) {
        out.push_back(Access{word, Access::kToEnd, false, index});
      }
    }
  }
}

std::string config_error(dim3 grid, dim3 block, size_t shared_bytes);  // "" when valid
std::string dims(dim3 d);

}  // namespace detail

template <class... P>
class Launch {
 public:
  Launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes,
         cudaStream_t stream, const char* file, int line)
      : name_(name), kernel_(kernel), grid_(grid), block_(block), shared_bytes_(shared_bytes),
        stream_(stream), file_(file), line_(line) {}

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    struct Bound {
      void (*kernel)(P...);
      std::tuple<std::decay_t<P>...> args;
    };
    auto bound = std::make_shared<const Bound>(
        Bound{kernel_, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)});
    auto info = std::make_shared<KernelInfo>();
    info->name = std::string(name_) + "(" + detail::parameter_list<P...>() + ")";
    info->file = file_;
    info->line = line_;
    if (const std::string error = detail::config_error(grid_, block_, shared_bytes_);
        !error.empty()) {
      set_last_error(cudaErrorInvalidConfiguration, "kernel " + info->where() + ": " + error);
      return;
    }
    std::vector<Access> accesses;
    int index = 0;
    std::apply([&](const auto&... a) { (detail::add_accesses(accesses, a, index++), ...); },
               bound->args);
    Site site{"kernel " + info->name + " <<<" + detail::dims(grid_) + ", " +
                  detail::dims(block_) + ">>>",
              file_, line_};
    const dim3 grid = grid_, block = block_;
    (void)enqueue_kernel(stream_, site, std::move(accesses), [bound, info, grid, block] {
      run_grid(*info, grid, block,
               [](const void* p) {
                 const auto* b = static_cast<const Bound*>(p);
                 std::apply(b->kernel, b->args);
               },
               bound.get());
    });
  }

 private:
  const char* name_;
  void (*kernel_)(P...);
  dim3 grid_, block_;
  size_t shared_bytes_;
  cudaStream_t stream_;
  const char* file_;
  int line_;
};

template <class... P>
Launch(const char*, void (*)(P...), dim3, dim3, size_t, cudaStream_t, const char*, int)
    -> Launch<P...>;

}  // namespace cudasim

// nvcuda::wmma, the warp-level matrix multiply-accumulate API of <mma.h>, for kernels run on
// the executor (executor.h). nvcc's <mma.h> defines it only for device code (__CUDACC__), so
// under --config=cudasim cudasim/device.h includes this header and a kernel that includes
// <mma.h> compiles unchanged.
//
// What is simulated: the m16n16k16 shape with __nv_bfloat16 or __half inputs and a float
// accumulator (what the project's kernels use; other shapes and types do not compile here):
//   fill_fragment, load_matrix_sync, store_matrix_sync, mma_sync (d = a · b + c, the products
//   exact, summed in float in k order after c).
// What is checked, as the CUDA Programming Guide states the rules (a KernelFault otherwise):
//   - load/store/mma are warp-collective: every lane of the warp calls them at one site
//     (blockDim a multiple of 32), with the same pointer, ldm and layout in every lane;
//   - the pointer is 256-bit (32-byte) aligned; ldm is a multiple of 8 elements for 16-bit
//     types and of 4 for float, and at least the row (or column) length.
// How a fragment's x[] maps to matrix elements is unspecified on a GPU ("subject to change in
// future architectures"). Here each fragment use (matrix_a, matrix_b, accumulator) scatters
// its 256 elements over the lanes by its own fixed permutation, so a kernel that assumes a
// mapping computes nonsense under cudasim instead of passing by luck. Element-wise operations
// between fragments of one type (same mapping) are well defined, as on a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cudasim/executor.h"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cudasim's wmma simulates the m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : (std::is_same_v<T, __nv_bfloat16> ||
                                                    std::is_same_v<T, __half>),
                "cudasim's wmma: __nv_bfloat16 or __half inputs, a float accumulator");
  static_assert(std::is_same_v<Use, accumulator> == std::is_same_v<Layout, void>,
                "a matrix_a / matrix_b fragment names its layout; an accumulator does not");

 public:
  using element_type = T;
  static constexpr int num_elements = 8;  // 256 elements over 32 lanes
  T x[num_elements];
};

}  // namespace nvcuda::wmma

namespace cudasim::wmma_detail {

/// The permutation of one fragment use: element i of lane l holds matrix element
/// p = ((32 i + l) · mul + add) mod 256 (p = 16 · row + column); mul is odd, so it is one.
struct Mapping {
  std::array<uint8_t, 256> element_of{};  // (32 i + l) -> p
  std::array<uint8_t, 256> slot_of{};     // p -> 32 i + l
  constexpr Mapping(unsigned mul, unsigned add) {
    for (unsigned s = 0; s < 256; ++s) {
      element_of[s] = static_cast<uint8_t>((s * mul + add) % 256);
      slot_of[element_of[s]] = static_cast<uint8_t>(s);
    }
  }
};

template <class Use>
constexpr Mapping mapping() {
  if constexpr (std::is_same_v<Use, nvcuda::wmma::matrix_a>) return Mapping(97, 13);
  else if constexpr (std::is_same_v<Use, nvcuda::wmma::matrix_b>) return Mapping(61, 101);
  else return Mapping(37, 200);
}

/// The calling thread's lane and warp within its block.
struct WarpLane {
  unsigned warp, lane;
};
WarpLane warp_lane();

/// What a lane hands its warp at a collective: the operands it was given.
struct Published {
  const void* p0 = nullptr;
  const void* p1 = nullptr;
  unsigned ldm = 0;
  int layout = 0;
};

/// Waits for all 32 lanes of the calling warp at `site` (a fault if any is elsewhere), after
/// publishing `mine`; returns the warp's 32 publications, valid until the lanes' next
/// collective.
const Published* exchange(const Published& mine, std::source_location site);
/// Waits for all 32 lanes at `site` without publishing.
void warp_barrier(std::source_location site);
/// Throws a KernelFault with "cudasim: wmma::<op>: <what>".
[[noreturn]] void fault(const char* op, const std::string& what);

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }

/// Checks what every lane passed to a load or store, then returns the lanes' publications.
template <class T>
const Published* check_memory_op(const char* op, const T* ptr, unsigned ldm, int layout,
                                  std::source_location site) {
  const Published* all = exchange(Published{ptr, nullptr, ldm, layout}, site);
  for (int l = 0; l < 32; ++l) {
    if (all[l].p0 != ptr || all[l].ldm != ldm || all[l].layout != layout) {
      fault(op, "lane " + std::to_string(warp_lane().lane) + " and lane " + std::to_string(l) +
                    " passed different pointers, ldm or layouts (they must be the same in "
                    "every lane)");
    }
  }
  if (reinterpret_cast<uintptr_t>(ptr) % 32 != 0) {
    fault(op, "the pointer is not 256-bit (32-byte) aligned");
  }
  const unsigned multiple = sizeof(T) == 2 ? 8 : 4;
  if (ldm % multiple != 0 || ldm < 16) {
    fault(op, "ldm " + std::to_string(ldm) + " is not a multiple of " + std::to_string(multiple) +
                  " elements of at least 16");
  }
  return all;
}

/// The address of matrix element (r, c) for a row- or column-major layout with stride ldm.
inline int64_t offset(int r, int c, unsigned ldm, bool row_major) {
  return row_major ? int64_t(r) * ldm + c : int64_t(c) * ldm + r;
}

/// A load or store of a `Use` fragment: checks what the lanes passed, calls
/// f(i, offset of x[i]'s element from ptr) for the calling lane's 8 elements, then waits for
/// the warp (no lane's next collective may overwrite its publication while another still
/// checks it).
template <class Use, class T, class F>
void memory_op(const char* op, const T* ptr, unsigned ldm, int layout, bool row_major,
               std::source_location site, F&& f) {
  check_memory_op(op, ptr, ldm, layout, site);
  constexpr Mapping m = mapping<Use>();
  const unsigned lane = warp_lane().lane;
  for (int i = 0; i < 8; ++i) {
    const int p = m.element_of[32 * i + lane];
    f(i, offset(p / 16, p % 16, ldm, row_major));
  }
  warp_barrier(site);
}

}  // namespace cudasim::wmma_detail

namespace nvcuda::wmma {

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
  for (auto& e : f.x) e = static_cast<T>(v);
}

/// matrix_a / matrix_b: the layout is the fragment's.
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* ptr, unsigned ldm,
                      std::source_location site = std::source_location::current()) {
  ::cudasim::wmma_detail::memory_op<Use>("load_matrix_sync", ptr, ldm, 0,
                                         std::is_same_v<Layout, row_major>, site,
                                         [&](int i, int64_t at) { f.x[i] = ptr[at]; });
}

template <class T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* ptr, unsigned ldm,
                      layout_t layout, std::source_location site = std::source_location::current()) {
  ::cudasim::wmma_detail::memory_op<accumulator>("load_matrix_sync", ptr, ldm, layout,
                                                 layout == mem_row_major, site,
                                                 [&](int i, int64_t at) { f.x[i] = ptr[at]; });
}

template <class T>
void store_matrix_sync(T* ptr, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                       layout_t layout, std::source_location site = std::source_location::current()) {
  ::cudasim::wmma_detail::memory_op<accumulator>("store_matrix_sync", ptr, ldm, layout,
                                                 layout == mem_row_major, site,
                                                 [&](int i, int64_t at) { ptr[at] = f.x[i]; });
}

/// d = a · b + c. Each lane reads the other lanes' a and b elements it needs; c and d share
/// the accumulator mapping, so d may be c.
template <class T, class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c, bool satf = false,
              std::source_location site = std::source_location::current()) {
  namespace sim = ::cudasim::wmma_detail;
  using A = fragment<matrix_a, 16, 16, 16, T, LayoutA>;
  using B = fragment<matrix_b, 16, 16, 16, T, LayoutB>;
  if (satf) sim::fault("mma_sync", "satf (saturate to finite) is not simulated");
  const sim::Published* all = sim::exchange(sim::Published{&a, &b, 0, 0}, site);
  constexpr sim::Mapping ma = sim::mapping<matrix_a>(), mb = sim::mapping<matrix_b>(),
                         mc = sim::mapping<accumulator>();
  const unsigned lane = sim::warp_lane().lane;
  float out[8];
  for (int i = 0; i < 8; ++i) {
    const int p = mc.element_of[32 * i + lane], r = p / 16, col = p % 16;
    float sum = c.x[i];
    for (int k = 0; k < 16; ++k) {
      const int sa = ma.slot_of[16 * r + k], sb = mb.slot_of[16 * k + col];
      const float x = sim::to_float(static_cast<const A*>(all[sa % 32].p0)->x[sa / 32]);
      const float y = sim::to_float(static_cast<const B*>(all[sb % 32].p1)->x[sb / 32]);
      sum += x * y;  // exact: a product of two 16-bit floats fits in a float
    }
    out[i] = sum;
  }
  sim::warp_barrier(site);  // every lane has read a and b before any lane goes on
  for (int i = 0; i < 8; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma

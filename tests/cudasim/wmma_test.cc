// cudasim's nvcuda::wmma (cudasim/wmma.h) on the executor: one warp's d = a · b + c against a
// float64 reference for every operand layout, loads and stores of both memory layouts, and the
// faults for what the CUDA Programming Guide forbids.
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cudasim/executor.h"
#include "cudasim/sim_internal.h"

namespace {

namespace wmma = nvcuda::wmma;
using cudasim::KernelFault;

template <class F>
void run(dim3 block, F f) {
  static const cudasim::KernelInfo info{"wmma_test_kernel", __FILE__, __LINE__};
  cudasim::run_grid(info, dim3(1), block, [](const void* p) { (*static_cast<const F*>(p))(); },
                    &f);
}

std::string fault_of(dim3 block, const std::function<void()>& f) {
  try {
    run(block, f);
  } catch (const KernelFault& e) {
    return e.what();
  }
  return "";
}

/// 16 × 16 matrices of 16-bit values (exact in float) with a stride, 32-byte aligned.
struct Operands {
  alignas(32) __nv_bfloat16 a[16 * 24];
  alignas(32) __nv_bfloat16 b[16 * 24];
  alignas(32) float c[16 * 20];
  alignas(32) float d[16 * 20];
};

template <class LayoutA, class LayoutB>
void check_product(wmma::layout_t c_layout, wmma::layout_t d_layout) {
  constexpr unsigned lda = 24, ldc = 20;
  static Operands m;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2, 2);
  for (auto& x : m.a) x = __float2bfloat16(u(rng));
  for (auto& x : m.b) x = __float2bfloat16(u(rng));
  for (auto& x : m.c) x = u(rng);
  constexpr bool a_row = std::is_same_v<LayoutA, wmma::row_major>;
  constexpr bool b_row = std::is_same_v<LayoutB, wmma::row_major>;
  auto at = [](bool row, int r, int c, unsigned ld) { return row ? r * ld + c : c * ld + r; };
  run(dim3(32), [&] {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, m.a, lda);
    wmma::load_matrix_sync(fb, m.b, lda);
    wmma::load_matrix_sync(acc, m.c, ldc, c_layout);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(m.d, acc, ldc, d_layout);
  });
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      double want = m.c[at(c_layout == wmma::mem_row_major, r, c, ldc)];
      double magnitude = std::abs(want);
      for (int k = 0; k < 16; ++k) {
        const double p = double(__bfloat162float(m.a[at(a_row, r, k, lda)])) *
                         __bfloat162float(m.b[at(b_row, k, c, lda)]);
        want += p;
        magnitude += std::abs(p);
      }
      const float got = m.d[at(d_layout == wmma::mem_row_major, r, c, ldc)];
      INFO("row " << r << ", column " << c);
      // 17 float additions: each result within 17 float roundings of the terms' magnitude.
      CHECK(std::abs(got - want) <= 17 * 0x1p-24 * magnitude);
    }
  }
}

TEST_CASE("wmma mma_sync computes d = a b + c for every layout", "[wmma]") {
  check_product<wmma::row_major, wmma::row_major>(wmma::mem_row_major, wmma::mem_row_major);
  check_product<wmma::row_major, wmma::col_major>(wmma::mem_col_major, wmma::mem_row_major);
  check_product<wmma::col_major, wmma::row_major>(wmma::mem_row_major, wmma::mem_col_major);
  check_product<wmma::col_major, wmma::col_major>(wmma::mem_col_major, wmma::mem_col_major);
}

TEST_CASE("wmma fragments of one type map elements alike, and not row by row", "[wmma]") {
  // An element-wise product of two accumulators loaded from memory is the element-wise
  // product of the matrices, as on a GPU; the lanes' x[] do not follow rows in lane order
  // (a kernel that assumed so would fail here, not on the card).
  alignas(32) static float x[256], y[256], z[256];
  for (int i = 0; i < 256; ++i) x[i] = float(i), y[i] = float(1000 + i);
  int lane_order = 0;  // lanes whose x[0] is element 8 · lane
  run(dim3(64), [&] {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fx, fy;
    wmma::load_matrix_sync(fx, x, 16, wmma::mem_row_major);
    wmma::load_matrix_sync(fy, y, 16, wmma::mem_row_major);
    for (int i = 0; i < fx.num_elements; ++i) fx.x[i] *= fy.x[i];
    const int lane = threadIdx.x % 32;
    if (fx.x[0] == x[lane * 8] * y[lane * 8]) atomicAdd(&lane_order, 1);
    if (threadIdx.x < 32) wmma::store_matrix_sync(z, fx, 16, wmma::mem_row_major);
  });
  for (int i = 0; i < 256; ++i) CHECK(z[i] == x[i] * y[i]);
  CHECK(lane_order < 64);
}

TEST_CASE("wmma refuses what a GPU does not define", "[wmma]") {
  alignas(32) static __half h[16 * 40];
  alignas(32) static float f[16 * 40];
  using A = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
  using C = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  CHECK_THAT(fault_of(dim3(32), [&] { A a; wmma::load_matrix_sync(a, h + 8, 16); }),
             Catch::Contains("wmma::load_matrix_sync: the pointer is not 256-bit"));
  CHECK_THAT(fault_of(dim3(32), [&] { A a; wmma::load_matrix_sync(a, h, 20); }),
             Catch::Contains("ldm 20 is not a multiple of 8"));
  CHECK_THAT(fault_of(dim3(32), [&] { A a; wmma::load_matrix_sync(a, h, 8); }),
             Catch::Contains("ldm 8 is not a multiple of 8 elements of at least 16"));
  CHECK_THAT(fault_of(dim3(32),
                      [&] {
                        C c;
                        wmma::fill_fragment(c, 0.0f);
                        wmma::store_matrix_sync(f, c, 18, wmma::mem_col_major);
                      }),
             Catch::Contains("ldm 18 is not a multiple of 4"));
  CHECK_THAT(fault_of(dim3(32),
                      [&] {
                        A a;
                        wmma::load_matrix_sync(a, h + (threadIdx.x % 2) * 16 * 24, 24);
                      }),
             Catch::Contains("passed different pointers"));
  // Half a warp at an mma: the lanes that skip it leave it waiting (divergence).
  CHECK_THAT(fault_of(dim3(32),
                      [&] {
                        A a;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                        C c;
                        wmma::fill_fragment(a, 0.0f);
                        wmma::fill_fragment(b, 0.0f);
                        wmma::fill_fragment(c, 0.0f);
                        if (threadIdx.x < 16) wmma::mma_sync(c, a, b, c);
                      }),
             Catch::Contains("names lane 16, which has exited (divergent warp collective)"));
}

}  // namespace

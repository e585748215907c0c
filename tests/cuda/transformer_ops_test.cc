// The transformer kernels on CUDA against their CPU references: gemm_batched (strided-batched
// cuBLAS, shared operands, every transpose case), masked_fill, triangular, causal_softmax and
// its backward, erf, gelu and its backward, layer_norm (and RMSNorm) forward and backward,
// index_add (repeated rows, a bad index); the row kernels also under small launch caps; and a
// TransformerBlock on cuda:0 equal to the same block on the CPU, forward and gradients.
// Tolerances: float32 rtol 1e-5 / atol 1e-6 (a few ulp of exp, erf, tanh and reordered row
// sums), scaled by the summed length where a sum enters every entry; float64 1e-12.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/engine.h"
#include "autograd/precision.h"
#include "cuda_kernels/attention_mma.h"
#include "cuda_kernels/launch_limits.h"
#include "nn/transformer.h"
#include "tensor/generator.h"
#include "tensor/masking.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

const DType kDtypes[] = {DType::kFloat32, DType::kFloat64};

double rtol(DType dtype) { return tol(dtype, 1e-5, 1e-12); }
double atol(DType dtype) { return tol(dtype, 1e-6, 1e-13); }

Tensor empty_on(const Shape& shape, DType dtype, Device device) {
  return Tensor::empty(shape, {dtype, device});
}

TEST_CASE("cuda gemm_batched matches cpu: stacks, shared operands, transposes",
          "[cuda][gemm_batched]") {
  if (!gpu_available_or_skip()) return;
  struct Case {
    int64_t ba, bb, batch, m, k, n;
  };
  const Case cases[] = {{3, 3, 3, 5, 7, 4}, {1, 4, 4, 9, 3, 6}, {2, 1, 2, 17, 33, 9}};
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          INFO(dtype_name(dtype) << " batch " << c.batch << " (a " << c.ba << ", b " << c.bb
                                 << ") m " << c.m << " k " << c.k << " n " << c.n << " ta " << ta
                                 << " tb " << tb);
          const Tensor a = random_tensor(ta ? Shape{c.ba, c.k, c.m} : Shape{c.ba, c.m, c.k}, dtype, 1);
          const Tensor b = random_tensor(tb ? Shape{c.bb, c.n, c.k} : Shape{c.bb, c.k, c.n}, dtype, 2);
          Tensor expected = random_tensor({c.batch, c.m, c.n}, dtype, 3);
          Tensor actual = expected.to(gpu());
          cpu_kernels().gemm_batched(ta, tb, 0.5, a, b, -1.5, expected);
          gpu_kernels().gemm_batched(ta, tb, 0.5, a.to(gpu()), b.to(gpu()), -1.5, actual);
          check_close(actual, expected, rtol(dtype), atol(dtype) * static_cast<double>(c.k));
        }
      }
    }
  }
}

TEST_CASE("cuda masked_fill and triangular match cpu", "[cuda][masking]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kDtypes) {
    INFO(dtype_name(dtype));
    const Tensor x = random_tensor({3, 5, 7}, dtype, 4);
    for (DType mask_dtype : {DType::kInt64, dtype}) {
      const Tensor mask = ops::causal_mask(5, 7, {.dtype = mask_dtype});
      Tensor expected = empty_on(x.shape(), dtype, Device::cpu(0));
      Tensor actual = empty_on(x.shape(), dtype, gpu());
      cpu_kernels().masked_fill(x, mask, -3.25, expected);
      gpu_kernels().masked_fill(x.to(gpu()), mask.to(gpu()), -3.25, actual);
      check_bitwise_equal(actual, expected);
    }
    for (bool upper : {false, true}) {
      for (int64_t diagonal : {-2, 0, 3}) {
        Tensor expected = empty_on(x.shape(), dtype, Device::cpu(0));
        Tensor actual = empty_on(x.shape(), dtype, gpu());
        cpu_kernels().triangular(x, diagonal, upper, expected);
        gpu_kernels().triangular(x.to(gpu()), diagonal, upper, actual);
        check_bitwise_equal(actual, expected);
      }
    }
  }
}

/// causal_softmax and its backward on [batch, rows, cols] stacks.
void check_causal_softmax(const std::vector<Shape>& shapes) {
  for (DType dtype : kDtypes) {
    for (const Shape& s : shapes) {
      INFO(dtype_name(dtype) << " " << s);
      const Tensor x = random_tensor(s, dtype, 5, -6, 6);
      Tensor y_cpu = empty_on(s, dtype, Device::cpu(0)), y_gpu = empty_on(s, dtype, gpu());
      cpu_kernels().causal_softmax(x, 0.3, y_cpu);
      gpu_kernels().causal_softmax(x.to(gpu()), 0.3, y_gpu);
      check_close(y_gpu, y_cpu, rtol(dtype), atol(dtype));
      const Tensor g = random_tensor(s, dtype, 6);
      Tensor gx_cpu = empty_on(s, dtype, Device::cpu(0)), gx_gpu = empty_on(s, dtype, gpu());
      cpu_kernels().causal_softmax_backward(g, y_cpu, 0.3, gx_cpu);
      gpu_kernels().causal_softmax_backward(g.to(gpu()), y_cpu.to(gpu()), 0.3, gx_gpu);
      check_close(gx_gpu, gx_cpu, rtol(dtype), atol(dtype) * static_cast<double>(s[2]));
    }
  }
}

TEST_CASE("cuda causal_softmax matches cpu, forward and backward", "[cuda][masking]") {
  if (!gpu_available_or_skip()) return;
  check_causal_softmax({{2, 9, 9}, {1, 4, 37}, {3, 70, 70}});
}

TEST_CASE("cuda causal_softmax matches cpu past the grid (small launch caps)",
          "[cuda][masking][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_causal_softmax({{2, 7, 33}, {1, 5, 100}});
  }
}

TEST_CASE("cuda erf, gelu and gelu_backward match cpu", "[cuda][gelu]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kDtypes) {
    INFO(dtype_name(dtype));
    const Tensor x = random_tensor({1001}, dtype, 7, -5, 5), g = random_tensor({1001}, dtype, 8);
    Tensor expected = empty_on(x.shape(), dtype, Device::cpu(0));
    Tensor actual = empty_on(x.shape(), dtype, gpu());
    cpu_kernels().unary(UnaryOp::kErf, x, expected);
    gpu_kernels().unary(UnaryOp::kErf, x.to(gpu()), actual);
    check_close(actual, expected, rtol(dtype), atol(dtype));
    for (bool tanh_approximation : {false, true}) {
      INFO("tanh " << tanh_approximation);
      cpu_kernels().gelu(x, tanh_approximation, expected);
      gpu_kernels().gelu(x.to(gpu()), tanh_approximation, actual);
      check_close(actual, expected, rtol(dtype), atol(dtype));
      cpu_kernels().gelu_backward(g, x, tanh_approximation, expected);
      gpu_kernels().gelu_backward(g.to(gpu()), x.to(gpu()), tanh_approximation, actual);
      check_close(actual, expected, rtol(dtype), atol(dtype) * 4);
    }
  }
}

/// layer_norm (rms or not, with and without weight and bias) and its three gradients.
void check_layer_norm(const std::vector<Shape>& shapes) {
  for (DType dtype : kDtypes) {
    for (const Shape& s : shapes) {
      for (bool rms : {false, true}) {
        for (bool affine : {false, true}) {
          INFO(dtype_name(dtype) << " " << s << " rms " << rms << " affine " << affine);
          const int64_t rows = s[0], cols = s[1];
          const Tensor x = random_tensor(s, dtype, 9, -2, 3);
          const Tensor w = affine ? random_tensor({cols}, dtype, 10) : Tensor();
          const Tensor b = affine && !rms ? random_tensor({cols}, dtype, 11) : Tensor();
          auto on_gpu = [](const Tensor& t) { return t.defined() ? t.to(gpu()) : Tensor(); };
          Tensor y_cpu = empty_on(s, dtype, Device::cpu(0)), y_gpu = empty_on(s, dtype, gpu());
          Tensor mean_cpu = rms ? Tensor() : empty_on({rows}, dtype, Device::cpu(0));
          Tensor mean_gpu = rms ? Tensor() : empty_on({rows}, dtype, gpu());
          Tensor rstd_cpu = empty_on({rows}, dtype, Device::cpu(0)), rstd_gpu = empty_on({rows}, dtype, gpu());
          cpu_kernels().layer_norm(x, w, b, 1e-5, rms, y_cpu, mean_cpu, rstd_cpu);
          gpu_kernels().layer_norm(x.to(gpu()), on_gpu(w), on_gpu(b), 1e-5, rms, y_gpu, mean_gpu,
                                   rstd_gpu);
          check_close(y_gpu, y_cpu, rtol(dtype), atol(dtype));
          check_close(rstd_gpu, rstd_cpu, rtol(dtype), atol(dtype));

          const Tensor g = random_tensor(s, dtype, 12);
          Tensor gx_cpu = empty_on(s, dtype, Device::cpu(0)), gx_gpu = empty_on(s, dtype, gpu());
          Tensor gw_cpu = empty_on({cols}, dtype, Device::cpu(0)), gw_gpu = empty_on({cols}, dtype, gpu());
          Tensor gb_cpu = empty_on({cols}, dtype, Device::cpu(0)), gb_gpu = empty_on({cols}, dtype, gpu());
          cpu_kernels().layer_norm_backward(g, x, w, mean_cpu, rstd_cpu, rms, gx_cpu, gw_cpu, gb_cpu);
          gpu_kernels().layer_norm_backward(g.to(gpu()), x.to(gpu()), on_gpu(w), on_gpu(mean_cpu),
                                            rstd_cpu.to(gpu()), rms, gx_gpu, gw_gpu, gb_gpu);
          check_close(gx_gpu, gx_cpu, rtol(dtype), atol(dtype) * static_cast<double>(cols));
          check_close(gw_gpu, gw_cpu, rtol(dtype), atol(dtype) * static_cast<double>(rows));
          check_close(gb_gpu, gb_cpu, rtol(dtype), atol(dtype) * static_cast<double>(rows));
          // The W half alone (grad_x not wanted), as a deferred weight gradient asks for it.
          Tensor none;
          Tensor gw_only = empty_on({cols}, dtype, gpu());
          gpu_kernels().layer_norm_backward(g.to(gpu()), x.to(gpu()), on_gpu(w), on_gpu(mean_cpu),
                                            rstd_cpu.to(gpu()), rms, none, gw_only, none);
          check_bitwise_equal(gw_only, gw_gpu);
        }
      }
    }
  }
}

TEST_CASE("cuda layer_norm and rms_norm match cpu, forward and backward", "[cuda][layer_norm]") {
  if (!gpu_available_or_skip()) return;
  // The weight gradients' column sums split the rows over blocks (batch_norm_sums.cuh) once
  // there are enough of them: 2000 × 33 (one float per unit, 32 columns a tile) and
  // 1024 × 64 (four floats per unit) run in many splits, the small shapes in one.
  check_layer_norm({{7, 33}, {3, 600}, {40, 8}, {2000, 33}, {1024, 64}});
}

TEST_CASE("cuda layer_norm matches cpu past the grid (small launch caps)",
          "[cuda][layer_norm][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_layer_norm({{5, 100}, {7, 35}});
  }
}

TEST_CASE("cuda index_add matches cpu bit for bit and names a bad index", "[cuda][index_add]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kDtypes) {
    INFO(dtype_name(dtype));
    const Tensor index = Tensor::from_vector<int64_t>({4, 0, 4, 2, 4, 0});
    const Tensor src = random_tensor({6, 300}, dtype, 13);
    Tensor expected = random_tensor({5, 300}, dtype, 14);
    Tensor actual = expected.to(gpu());
    cpu_kernels().index_add(expected, index, src);
    gpu_kernels().index_add(actual, index.to(gpu()), src.to(gpu()));
    check_bitwise_equal(actual, expected);  // the same additions in the same order

    // A bad index: reported at the next read (Note [Deferred checks]); the good rows (row 1
    // here) are added, the bad ones skipped, nothing written outside dst.
    const Tensor bad = Tensor::from_vector<int64_t>({1, 5, -1});
    Tensor before = actual.to(Device::cpu(0));
    CHECK_THROWS_WITH(run_and_read([&] {
                        gpu_kernels().index_add(actual, bad.to(gpu()), src.slice(0, 3).to(gpu()));
                      }),
                      "index_add_: index 5 at position 1 is outside [0, 5) for dst of shape "
                      "[5, 300]");
    cpu_kernels().index_add(before, Tensor::from_vector<int64_t>({1}), src.slice(0, 1));
    check_bitwise_equal(actual, before);

    // The destination rows cut into ranges of one row (300 rows) and of several (3000 rows:
    // more than the GPU's 4 blocks per SM), each row named many times in a random order.
    for (const int64_t rows : {int64_t{300}, int64_t{3000}}) {
      INFO("rows " << rows);
      std::vector<int64_t> many(700);
      for (size_t i = 0; i < many.size(); ++i) {
        many[i] = static_cast<int64_t>((i * 7919 + i * i * 31) % static_cast<size_t>(rows / 10));
      }
      const Tensor idx = Tensor::from_vector<int64_t>(many);
      const Tensor rows_src = random_tensor({700, 33}, dtype, 15);
      Tensor want = random_tensor({rows, 33}, dtype, 16);
      Tensor got = want.to(gpu());
      cpu_kernels().index_add(want, idx, rows_src);
      gpu_kernels().index_add(got, idx.to(gpu()), rows_src.to(gpu()));
      check_bitwise_equal(got, want);
    }
  }
}

TEST_CASE("cuda flash_attention and its backward match cpu", "[cuda][attention]") {
  if (!gpu_available_or_skip()) return;
  cuda::ScopedAttentionTensorCores cuda_cores(false);  // tensor cores: the next test case
  struct Case {
    int64_t n, l, s, d;
    bool causal;
  };
  // Tiles are 32 rows (head dims up to 64, float) down to 4 (256, double): these shapes cross
  // them, with keys != queries both ways and every head-dim width.
  const Case cases[] = {{2, 33, 33, 8, true},  {1, 70, 40, 5, true}, {1, 40, 70, 5, true},
                        {1, 40, 70, 5, false}, {1, 9, 9, 40, true},  {1, 9, 11, 100, false},
                        {1, 6, 6, 200, true}};
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
  for (DType dtype : dtypes) {
    for (const Case& c : cases) {
      if (c.d > 64 && dtype == DType::kFloat64) continue;  // wide double tiles: slow to simulate
      INFO(dtype_name(dtype) << " N " << c.n << " L " << c.l << " S " << c.s << " D " << c.d
                             << " causal " << c.causal);
      const Tensor q = random_tensor({c.n, c.l, c.d}, DType::kFloat32, 21, -2, 2).to(dtype);
      const Tensor k = random_tensor({c.n, c.s, c.d}, DType::kFloat32, 22, -2, 2).to(dtype);
      const Tensor v = random_tensor({c.n, c.s, c.d}, DType::kFloat32, 23).to(dtype);
      const Tensor g = random_tensor({c.n, c.l, c.d}, DType::kFloat32, 24).to(dtype);
      const DType result = dtype == DType::kFloat64 ? dtype : DType::kFloat32;
      const double scale = 0.3;
      Tensor out = empty_on({c.n, c.l, c.d}, result, Device::cpu()),
             lse = empty_on({c.n, c.l}, result, Device::cpu());
      cpu_kernels().flash_attention(q, k, v, scale, c.causal, out, lse);
      Tensor out_gpu = empty_on(out.shape(), result, gpu()),
             lse_gpu = empty_on(lse.shape(), result, gpu());
      gpu_kernels().flash_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()), scale, c.causal, out_gpu,
                                    lse_gpu);
      const double sums = static_cast<double>(c.s * c.d);
      check_close(out_gpu, out, rtol(result), atol(result) * sums);
      check_close(lse_gpu, lse, rtol(result), atol(result) * sums);

      std::vector<Tensor> want, got;
      for (const Tensor& t : {q, k, v}) {
        want.push_back(empty_on(t.shape(), result, Device::cpu()));
        got.push_back(empty_on(t.shape(), result, gpu()));
      }
      cpu_kernels().flash_attention_backward(q, k, v, out, g, lse, scale, c.causal, want[0],
                                             want[1], want[2]);
      gpu_kernels().flash_attention_backward(q.to(gpu()), k.to(gpu()), v.to(gpu()), out.to(gpu()),
                                             g.to(gpu()), lse.to(gpu()), scale, c.causal, got[0],
                                             got[1], got[2]);
      const double grad_sums = static_cast<double>((c.l + c.s) * c.d);
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient "
             << "qkv"[i]);
        check_close(got[i], want[i], rtol(result) * 10, atol(result) * grad_sums);
      }
    }
  }
  // More tiles than blocks: the grid-stride loop over tiles.
  const Tensor q = random_tensor({3, 70, 8}, DType::kFloat32, 25);
  Tensor out = empty_on({3, 70, 8}, DType::kFloat32, Device::cpu()),
         lse = empty_on({3, 70}, DType::kFloat32, Device::cpu());
  cpu_kernels().flash_attention(q, q, q, 0.5, true, out, lse);
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    Tensor out_gpu = empty_on(out.shape(), DType::kFloat32, gpu()),
           lse_gpu = empty_on(lse.shape(), DType::kFloat32, gpu());
    gpu_kernels().flash_attention(q.to(gpu()), q.to(gpu()), q.to(gpu()), 0.5, true, out_gpu,
                                  lse_gpu);
    check_close(out_gpu, out, 1e-5, 1e-5);
  }
  // Head dims over 256 have no CUDA kernel.
  const Tensor wide = random_tensor({1, 2, 300}, DType::kFloat32, 26).to(gpu());
  Tensor wide_out = empty_on({1, 2, 300}, DType::kFloat32, gpu()),
         wide_lse = empty_on({1, 2}, DType::kFloat32, gpu());
  CHECK_THROWS_WITH(gpu_kernels().flash_attention(wide, wide, wide, 1.0, true, wide_out, wide_lse),
                    "cuda flash_attention: head dim D = 300 is over the kernels' 256");
}

/// Attention in float64 from the same inputs, with the magnitudes that bound the tensor-core
/// kernels' rounding: each result is a sum of terms, and rounding one factor of each term to
/// 16 bits (relative error at most u) moves the result by at most u · Σ |term|.
struct AttentionReference {
  std::vector<double> out, lse, grad[3];      // grad q, k, v
  std::vector<double> out_terms, grad_terms[3];  // Σ |term| of each
};

AttentionReference attention_reference(const Tensor& q16, const Tensor& k16, const Tensor& v16,
                                       const Tensor& g16, double scale, bool causal) {
  const Tensor q = q16.to(DType::kFloat64), k = k16.to(DType::kFloat64),
               v = v16.to(DType::kFloat64), g = g16.to(DType::kFloat64);
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2);
  const double *pq = q.data<double>(), *pk = k.data<double>(), *pv = v.data<double>(),
               *pg = g.data<double>();
  AttentionReference r;
  r.out.assign(n * l * d, 0);
  r.out_terms.assign(n * l * d, 0);
  r.lse.assign(n * l, 0);
  for (int i = 0; i < 3; ++i) {
    r.grad[i].assign(i == 0 ? n * l * d : n * s * d, 0);
    r.grad_terms[i].assign(r.grad[i].size(), 0);
  }
  std::vector<double> p(s), ds(s);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < l; ++i) {
      const double* qi = pq + (b * l + i) * d;
      const double* gi = pg + (b * l + i) * d;
      const int64_t seen = causal ? std::min(i + 1, s) : s;
      double m = -INFINITY;
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qi[c] * pk[(b * s + j) * d + c];
        p[j] = scale * dot;
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < seen; ++j) sum += (p[j] = std::exp(p[j] - m));
      r.lse[b * l + i] = m + std::log(sum);
      double* oi = r.out.data() + (b * l + i) * d;
      for (int64_t j = 0; j < seen; ++j) {
        p[j] /= sum;
        for (int64_t c = 0; c < d; ++c) {
          oi[c] += p[j] * pv[(b * s + j) * d + c];
          r.out_terms[(b * l + i) * d + c] += p[j] * std::abs(pv[(b * s + j) * d + c]);
        }
      }
      double delta = 0, delta_terms = 0;
      for (int64_t c = 0; c < d; ++c) {
        delta += gi[c] * oi[c];
        delta_terms += std::abs(gi[c] * oi[c]);
      }
      for (int64_t j = 0; j < seen; ++j) {
        double dp = 0, dp_terms = 0;
        for (int64_t c = 0; c < d; ++c) {
          dp += gi[c] * pv[(b * s + j) * d + c];
          dp_terms += std::abs(gi[c] * pv[(b * s + j) * d + c]);
        }
        ds[j] = p[j] * (dp - delta);
        // ds's terms are those of dp and delta, not |dp - delta|: the two cancel (exactly for a
        // row that sees one key), and the kernels' float32 sums of each, in whatever order the
        // hardware adds them, leave an error relative to the terms.
        const double ds_terms = p[j] * (dp_terms + delta_terms);
        for (int64_t c = 0; c < d; ++c) {
          const int64_t at_i = (b * l + i) * d + c, at_j = (b * s + j) * d + c;
          r.grad[0][at_i] += scale * ds[j] * pk[at_j];
          r.grad_terms[0][at_i] += scale * ds_terms * std::abs(pk[at_j]);
          r.grad[1][at_j] += scale * ds[j] * qi[c];
          r.grad_terms[1][at_j] += scale * ds_terms * std::abs(qi[c]);
          r.grad[2][at_j] += p[j] * gi[c];
          r.grad_terms[2][at_j] += p[j] * std::abs(gi[c]);
        }
      }
    }
  }
  return r;
}

/// Checks |actual - want| <= u · terms + 2^-14 · (terms + |want|) elementwise: the 16-bit
/// rounding of one factor per term, plus the float32 sums and exp (relative errors of a few
/// 2^-24 times the sums' lengths and the exponents' sizes, here well under 2^-14).
/// Breaking the forward's rescaling or the backward's lse per row fails it.
void check_within_rounding(const Tensor& actual, const std::vector<double>& want,
                           const std::vector<double>& terms, double u) {
  const Tensor a = actual.to(Device::cpu()).to(DType::kFloat64);
  const double* pa = a.data<double>();
  for (size_t e = 0; e < want.size(); ++e) {
    const double err = std::abs(pa[e] - want[e]);
    const double bound = u * terms[e] + 0x1p-14 * (terms[e] + std::abs(want[e]));
    if (!(err <= bound)) {
      FAIL_CHECK("element " << e << ": " << pa[e] << " against " << want[e] << ", error " << err
                            << " over the bound " << bound);
      return;
    }
  }
  SUCCEED();  // cudasim, 2026-12-07: the largest error 0.15–0.83 × u · Σ|term| per result
}

TEST_CASE("cuda flash_attention of 16-bit inputs on tensor cores within the rounding bound",
          "[cuda][attention]") {
  if (!gpu_available_or_skip()) return;
  REQUIRE(cuda::attention_tensor_cores());
  struct Case {
    int64_t n, l, s, d;
    bool causal;
  };
  // Forward tiles: 64 queries × 64 keys (D <= 64) or 32 (D <= 128); backward: 64 keys × 32
  // queries and 64 queries × 32 keys. The shapes cross them; D 36 and 100 are padded and
  // loaded element by element, 64 and 128 eight at a time.
  const Case cases[] = {{2, 80, 80, 64, true},  {1, 70, 40, 36, true},   {1, 40, 130, 100, false},
                        {1, 33, 33, 128, true}, {1, 130, 97, 64, false}, {1, 17, 17, 8, true},
                        {3, 1, 1, 64, true},    {1, 5, 200, 64, false}};
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const double u = dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;  // unit roundoff
    for (const Case& c : cases) {
      INFO(dtype_name(dtype) << " N " << c.n << " L " << c.l << " S " << c.s << " D " << c.d
                             << " causal " << c.causal);
      const Tensor q = random_tensor({c.n, c.l, c.d}, DType::kFloat32, 31, -2, 2).to(dtype);
      const Tensor k = random_tensor({c.n, c.s, c.d}, DType::kFloat32, 32, -2, 2).to(dtype);
      const Tensor v = random_tensor({c.n, c.s, c.d}, DType::kFloat32, 33).to(dtype);
      const Tensor g = random_tensor({c.n, c.l, c.d}, DType::kFloat32, 34).to(dtype);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const AttentionReference want = attention_reference(q, k, v, g, scale, c.causal);

      Tensor out = empty_on({c.n, c.l, c.d}, DType::kFloat32, gpu()),
             lse = empty_on({c.n, c.l}, DType::kFloat32, gpu());
      gpu_kernels().flash_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()), scale, c.causal, out,
                                    lse);
      check_within_rounding(out, want.out, want.out_terms, u);
      check_within_rounding(lse, want.lse, std::vector<double>(want.lse.size(), 1.0), 0x1p-20);

      // The backward from the reference's out and lse (as float32, what the forward returns).
      const Tensor ref_out =
          Tensor::from_vector(want.out, {c.n, c.l, c.d}).to(DType::kFloat32).to(gpu());
      const Tensor ref_lse =
          Tensor::from_vector(want.lse, {c.n, c.l}).to(DType::kFloat32).to(gpu());
      Tensor grads[3] = {empty_on(q.shape(), DType::kFloat32, gpu()),
                         empty_on(k.shape(), DType::kFloat32, gpu()),
                         empty_on(v.shape(), DType::kFloat32, gpu())};
      gpu_kernels().flash_attention_backward(q.to(gpu()), k.to(gpu()), v.to(gpu()), ref_out,
                                             g.to(gpu()), ref_lse, scale, c.causal, grads[0],
                                             grads[1], grads[2]);
      for (int i = 0; i < 3; ++i) {
        INFO("gradient " << "qkv"[i]);
        check_within_rounding(grads[i], want.grad[i], want.grad_terms[i], u);
      }

      // The CUDA-core kernels (float32 probabilities) give other bits: the tensor-core ones ran.
      Tensor cuda_core_out = empty_on(out.shape(), DType::kFloat32, gpu());
      {
        cuda::ScopedAttentionTensorCores cuda_cores(false);
        gpu_kernels().flash_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()), scale, c.causal,
                                      cuda_core_out, lse);
      }
      const Tensor a = cuda_core_out.to(Device::cpu()), b = out.to(Device::cpu());
      if (c.s > 1) {  // one key: p = 1 exactly, both kernels give v
        CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.numel() * sizeof(float)) != 0);
      }
    }
  }
  // More tiles than blocks (the grid-stride loops over tasks): the same bits.
  const Tensor q = random_tensor({3, 130, 64}, DType::kFloat32, 35).to(DType::kBFloat16).to(gpu());
  const Tensor g = random_tensor({3, 130, 64}, DType::kFloat32, 36).to(DType::kBFloat16).to(gpu());
  auto run = [&] {
    std::vector<Tensor> r = {empty_on({3, 130, 64}, DType::kFloat32, gpu()),
                             empty_on({3, 130}, DType::kFloat32, gpu())};
    gpu_kernels().flash_attention(q, q, q, 0.125, true, r[0], r[1]);
    for (int i = 0; i < 3; ++i) r.push_back(empty_on({3, 130, 64}, DType::kFloat32, gpu()));
    gpu_kernels().flash_attention_backward(q, q, q, r[0], g, r[1], 0.125, true, r[2], r[3], r[4]);
    return r;
  };
  const std::vector<Tensor> unlimited = run();
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    INFO(describe(limits));
    cuda::ScopedLaunchLimits scoped(limits);
    const std::vector<Tensor> limited = run();
    for (size_t i = 0; i < limited.size(); ++i) check_bitwise_equal(limited[i], unlimited[i]);
  }
}

TEST_CASE("a TransformerBlock on cuda:0 equals the same block on the CPU", "[cuda][transformer]") {
  if (!gpu_available_or_skip()) return;
  for (nn::AttentionKernel kernel : {nn::AttentionKernel::kFlash, nn::AttentionKernel::kFused,
                                     nn::AttentionKernel::kReference}) {
    INFO("kernel " << static_cast<int>(kernel));
    auto make = [&] {
      Generator generator(3);
      GeneratorGuard guard(generator);
      return nn::TransformerBlock(16, 4, {.mlp_ratio = 2, .kernel = kernel});
    };
    nn::TransformerBlock cpu_block = make(), gpu_block = make();
    gpu_block.to(gpu());
    const Tensor x = random_tensor({2, 6, 16}, DType::kFloat32, 15);
    const Tensor g = random_tensor({2, 6, 16}, DType::kFloat32, 16);
    Tensor x_cpu = x.clone(), x_gpu = x.to(gpu());
    x_cpu.set_requires_grad(true);
    x_gpu.set_requires_grad(true);
    const Tensor y_cpu = cpu_block.forward(x_cpu), y_gpu = gpu_block.forward(x_gpu);
    check_close(y_gpu, y_cpu, 1e-5, 1e-5);
    const Tensor dx_cpu = autograd::backward({y_cpu}, {g}, {x_cpu})[0];
    const Tensor dx_gpu = autograd::backward({y_gpu}, {g.to(gpu())}, {x_gpu})[0];
    check_close(dx_gpu, dx_cpu, 1e-5, 1e-5);
    const nn::NamedTensors p_cpu = cpu_block.named_parameters(), p_gpu = gpu_block.named_parameters();
    for (size_t i = 0; i < p_cpu.size(); ++i) {
      INFO(p_cpu[i].first);
      check_close(p_gpu[i].second.grad(), p_cpu[i].second.grad(), 1e-5, 1e-5);
    }
  }
}

TEST_CASE("a TransformerBlock under the bf16 policy on cuda:0 (tensor-core attention) is close "
          "to the CPU's", "[cuda][transformer]") {
  if (!gpu_available_or_skip()) return;
  // Both sides compute the products from the same bf16 operands in float32; the GPU's
  // attention also rounds its probabilities and score gradients to bf16 (u = 2^-8), which
  // moves results by about u of their size; everything else agrees to float32 rounding.
  auto make = [] {
    Generator generator(5);
    GeneratorGuard guard(generator);
    return nn::TransformerBlock(64, 2, {.mlp_ratio = 2, .kernel = nn::AttentionKernel::kFlash});
  };
  nn::TransformerBlock cpu_block = make(), gpu_block = make();
  gpu_block.to(gpu());
  const Tensor x = random_tensor({2, 70, 64}, DType::kFloat32, 17);
  const Tensor g = random_tensor({2, 70, 64}, DType::kFloat32, 18);
  Tensor x_cpu = x.clone(), x_gpu = x.to(gpu());
  x_cpu.set_requires_grad(true);
  x_gpu.set_requires_grad(true);
  autograd::PrecisionScope bf16(autograd::Precision::kBFloat16);
  const Tensor y_cpu = cpu_block.forward(x_cpu), y_gpu = gpu_block.forward(x_gpu);
  check_close(y_gpu, y_cpu, 2e-2, 2e-2);
  const Tensor dx_cpu = autograd::backward({y_cpu}, {g}, {x_cpu})[0];
  const Tensor dx_gpu = autograd::backward({y_gpu}, {g.to(gpu())}, {x_gpu})[0];
  check_close(dx_gpu, dx_cpu, 2e-2, 2e-2);
  const nn::NamedTensors p_cpu = cpu_block.named_parameters(), p_gpu = gpu_block.named_parameters();
  for (size_t i = 0; i < p_cpu.size(); ++i) {
    INFO(p_cpu[i].first);
    check_close(p_gpu[i].second.grad(), p_cpu[i].second.grad(), 2e-2, 2e-2);
  }
}

}  // namespace
}  // namespace pipewright::testing

// PIPEWRIGHT_CPU_BF16_GEMM chooses the CPU's bfloat16 kernel (tensor/cpu/gemm.h, bf16_gemm()).
// Its own binary: the variable is read by the process's first bf16_gemm(), which must be here.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "tensor/cpu/gemm.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace pipewright {
namespace {

using namespace pipewright::testing;

TEST_CASE("PIPEWRIGHT_CPU_BF16_GEMM names the kernel; a wrong name is refused, naming it") {
  ::setenv("PIPEWRIGHT_CPU_BF16_GEMM", "tiles", 1);
  REQUIRE_THROWS_WITH(cpu::bf16_gemm(), Catch::Contains("PIPEWRIGHT_CPU_BF16_GEMM") &&
                                            Catch::Contains("'tiles'") &&
                                            Catch::Contains("avx512-bf16"));
  // A bfloat16 product reads it too, and refuses the same way (no silent fallback).
  const Tensor a = random_tensor<float>({4, 8}, 1).to(DType::kBFloat16);
  const Tensor b = random_tensor<float>({8, 3}, 2).to(DType::kBFloat16);
  REQUIRE_THROWS_WITH(ops::matmul(a, b), Catch::Contains("'tiles'"));

  // Read again while unset by a valid value: the widened path, whatever the CPU has.
  ::setenv("PIPEWRIGHT_CPU_BF16_GEMM", "widened", 1);
  CHECK(cpu::bf16_gemm() == cpu::Bf16Gemm::kWidened);
  // Which is the float32 product of the widened operands, bit for bit.
  const Tensor widened = ops::matmul(a.to(DType::kFloat32), b.to(DType::kFloat32));
  CHECK(ops::equal(ops::matmul(a, b), widened));
}

}  // namespace
}  // namespace pipewright

// Comparisons of large data in tests that fail fast and read fast: equal_values, bitwise_equal
// and all_close over std::vector<T>, Tensors and lists of Tensors (state dicts, gradients).
// Each returns a Comparison, true when the data agree, whose report is what Catch2 prints under
// "with expansion:" (StringMaker below) when CHECK/REQUIRE fails:
//
//   CHECK(equal_values(got, want));
//
//   float32 [5, 70000]: 1234 of 350000 elements differ (==)
//     first at 17 = [0, 17]: a 0.123456791, b 0.123456784
//     largest |a - b| 3.5 at 20001 = [0, 20001]: a 1.5, b -2
//     12 of the mismatches involve NaN, the first at 40 = [0, 40]: a nan, b 1
//
// A report never holds the contents: it gives the mismatch count, the first mismatching index
// with both values there, the largest |a - b| and where (NaN left out), and how many
// mismatches involve NaN. Limits: one pair's report is at most 10 lines (a value pair too wide
// for one line takes three), each kept within 72 columns where it can be, so that Catch2's
// 80-column wrapping leaves it whole; values print with max_digits10 digits. A list's report
// is its first differing entry's (indented), a line naming at most 4 more, names cut to 40
// characters. Either way a few hundred bytes and under 2 KB, for any size of data. A passing
// all_close reports its largest |a - b| too (Catch prints passing expansions with -s).
//
// Bring the names in with using-declarations (using pipewright::testing::bitwise_equal;): in
// a file that also uses pipeline::testing, an unqualified testing:: is ambiguous.
//
// Semantics (choose the one the assertion had; none of them rounds):
//   equal_values   a_i == b_i, the element type's ==: NaN never equals anything, -0 == +0;
//                  exactly what std::vector's operator== does.
//   bitwise_equal  the same bits (floats compared as bit patterns): a NaN equals a NaN of the
//                  same bits, -0 != +0; exactly what ops::equal and byte comparisons do. Float
//                  values in its report carry their bits: "0 (0x0)", "-0 (0x80000000)".
//   all_close      a_i == b_i, or |a_i - b_i| <= tol.abs + tol.rel * |b_i| (numpy.isclose with
//                  b the reference); NaN on either side is a mismatch, an infinity agrees
//                  with itself alone.
// Sizes must match (vectors: size; tensors: dtype and shape; lists: length and, for named
// lists, each name): otherwise the report names both and nothing else is compared.
// Tensors: any dtype, device and strides (values are copied to the host and compared as the
// dtype's C++ type, float, double or int64_t; 16-bit floats as double, widened exactly, so
// bitwise_equal compares and prints the widened bits); an undefined tensor on either side is
// a mismatch, as ops::equal throws on one. Lists: two undefined entries agree (a parameter without a
// gradient on both sides).
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tests/compare_elements.h"

namespace pipewright::testing {

/// nn::NamedTensors (a state dict, named_parameters()), without depending on nn/.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

namespace compare_detail {

template <class T>
Comparison compare_vectors(const std::vector<T>& a, const std::vector<T>& b, Mode mode,
                           Tolerance tol) {
  const std::string what = "std::vector<" + type_name<T>() + ">";
  if (a.size() != b.size()) {
    return {false, what + ": sizes differ: " + std::to_string(a.size()) + " vs " +
                       std::to_string(b.size()) + " elements"};
  }
  return compare_elements<T>(what, a, b, a.size(), {}, mode, tol);
}

}  // namespace compare_detail

// ---- std::vector<T>, T arithmetic (not long double) ----

/// a == b element by element (NaN != NaN, -0 == +0), sizes equal.
template <class T>
  requires std::is_arithmetic_v<T>
Comparison equal_values(const std::vector<T>& a, const std::vector<T>& b) {
  return compare_detail::compare_vectors(a, b, compare_detail::Mode::kValues, {});
}

/// The same bits element by element (NaN of the same bits equal, -0 != +0), sizes equal.
template <class T>
  requires std::is_arithmetic_v<T>
Comparison bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return compare_detail::compare_vectors(a, b, compare_detail::Mode::kBits, {});
}

/// |a - b| <= tol.abs + tol.rel * |b| element by element (NaN never close), sizes equal.
template <class T>
  requires std::is_arithmetic_v<T>
Comparison all_close(const std::vector<T>& a, const std::vector<T>& b, Tolerance tol) {
  return compare_detail::compare_vectors(a, b, compare_detail::Mode::kClose, tol);
}

// ---- Tensors (dtype and shape must match; undefined is a mismatch) ----

Comparison equal_values(const Tensor& a, const Tensor& b);
Comparison bitwise_equal(const Tensor& a, const Tensor& b);
Comparison all_close(const Tensor& a, const Tensor& b, Tolerance tol);

// ---- lists: entry by entry, lengths (and names) must match; undefined == undefined ----

Comparison equal_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b);
Comparison bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b);
Comparison all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, Tolerance tol);
Comparison equal_values(const NamedTensors& a, const NamedTensors& b);
Comparison bitwise_equal(const NamedTensors& a, const NamedTensors& b);
Comparison all_close(const NamedTensors& a, const NamedTensors& b, Tolerance tol);

}  // namespace pipewright::testing

// Catch2 v2 prints the operand of a unary CHECK/REQUIRE with StringMaker: the report.
namespace Catch {
template <>
struct StringMaker<pipewright::testing::Comparison> {
  static std::string convert(const pipewright::testing::Comparison& c) { return c.report; }
};
}  // namespace Catch

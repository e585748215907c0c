// The element loop behind tests/compare.h (read that header first): one pass over a[0, n) and
// b[0, n) that counts mismatches and keeps the first one, the largest |a - b| and the first
// mismatch involving NaN, then a report of at most 10 lines. No Tensor here: plain elements.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace pipewright::testing {

/// What a comparison found: true when the data agree; `report` says how they differ.
struct Comparison {
  bool ok = true;
  std::string report;
  explicit operator bool() const { return ok; }
};

/// all_close's bound: |a - b| <= abs + rel * |b|.
struct Tolerance {
  double abs = 0.0;
  double rel = 0.0;
};

namespace compare_detail {

enum class Mode { kValues, kBits, kClose };

/// "(==)", "(bitwise)" or "(|a - b| <= 1e-06 + 1e-05 * |b|)".
inline std::string criterion(Mode mode, Tolerance tol) {
  if (mode == Mode::kValues) return "(==)";
  if (mode == Mode::kBits) return "(bitwise)";
  std::ostringstream os;
  os << "(|a - b| <= " << tol.abs << " + " << tol.rel << " * |b|)";
  return os.str();
}

/// "float", "double", "int64", ... (the report's first word for a std::vector).
template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  if constexpr (std::is_same_v<T, double>) return "double";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_integral_v<T>) {
    return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
  }
  return "T";
}

/// One value, exactly: max_digits10 digits for floats (plus the bits in bitwise mode),
/// numbers for one-byte integers.
template <class T>
std::string show(T v, Mode mode) {
  std::ostringstream os;
  if constexpr (std::is_floating_point_v<T>) {
    os << std::setprecision(std::numeric_limits<T>::max_digits10) << v;
    if (mode == Mode::kBits) {
      std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> bits;
      std::memcpy(&bits, &v, sizeof v);
      os << " (0x" << std::hex << bits << ")";
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else {
    os << +v;  // promotes char types to a number
  }
  return os.str();
}

/// "17" or, for rank >= 2, "17 = [0, 17]".
inline std::string where(size_t i, const std::vector<int64_t>& dims) {
  std::string out = std::to_string(i);
  if (dims.size() < 2) return out;
  std::vector<int64_t> at(dims.size());
  size_t rest = i;
  for (size_t d = dims.size(); d-- > 0;) {
    const size_t size = static_cast<size_t>(dims[d]);
    at[d] = static_cast<int64_t>(size == 0 ? 0 : rest % size);
    rest = size == 0 ? 0 : rest / size;
  }
  out += " = [";
  for (size_t d = 0; d < at.size(); ++d) out += (d ? ", " : "") + std::to_string(at[d]);
  return out + "]";
}

/// Report lines stay within this many columns where they can (Catch2 wraps its output at 80
/// and indents it by 2; a list's entries add 2 more), so that each line reads whole.
inline constexpr size_t kWidth = 72;

/// `line` + " " + `rest` when that fits the last line of `line` within kWidth, else
/// `line` + `otherwise` (by default `rest` on a line of its own, indented by 2).
inline std::string joined(const std::string& line, const std::string& rest,
                          std::string otherwise = "") {
  const size_t start = line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1;
  if (line.size() - start + 1 + rest.size() <= kWidth) return line + " " + rest;
  return line + (otherwise.empty() ? "\n  " + rest : otherwise);
}

template <class T>
bool agree(T a, T b, Mode mode, Tolerance tol) {
  if constexpr (std::is_floating_point_v<T>) {
    if (mode == Mode::kBits) return std::memcmp(&a, &b, sizeof(T)) == 0;
  }
  if (a == b) return true;
  if (mode != Mode::kClose) return false;
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isinf(a) || std::isinf(b)) return false;  // inf is close to itself alone
  }
  const double d = std::fabs(static_cast<double>(a) - static_cast<double>(b));
  return d <= tol.abs + tol.rel * std::fabs(static_cast<double>(b));  // false for NaN
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

/// Compares a[0, n) with b[0, n) (elements of T, read as a[i]) under `mode`; `what` opens
/// the report ("float32 [5, 70000]") and `dims`, when of rank >= 2, gives each index's
/// coordinates.
template <class T, class Seq>
Comparison compare_elements(const std::string& what, const Seq& a, const Seq& b, size_t n,
                            const std::vector<int64_t>& dims, Mode mode, Tolerance tol) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, long double>,
                "compare: elements must be bool, integers, float or double");
  size_t mismatches = 0, nan_mismatches = 0, first = n, first_nan = n, largest = n;
  double largest_diff = -1.0;
  for (size_t i = 0; i < n; ++i) {
    const T x = a[i], y = b[i];
    const double d = std::fabs(static_cast<double>(x) - static_cast<double>(y));
    if (!std::isnan(d) && d > largest_diff) {
      largest_diff = d;
      largest = i;
    }
    if (agree(x, y, mode, tol)) continue;
    if (mismatches++ == 0) first = i;
    if (is_nan(x) || is_nan(y)) {
      if (nan_mismatches++ == 0) first_nan = i;
    }
  }
  // "<label> <where>: a X, b Y", or a and b on lines of their own where that is too wide.
  auto pair_at = [&](const std::string& label, size_t i) {
    const std::string head = "\n  " + label + " " + where(i, dims) + ":";
    const std::string x = "a " + show<T>(a[i], mode), y = "b " + show<T>(b[i], mode);
    return joined(head, x + ", " + y, "\n    " + x + "\n    " + y);
  };
  std::string largest_line;
  if (largest < n) {
    std::ostringstream d;
    d << std::setprecision(6) << largest_diff;
    largest_line = pair_at("largest |a - b| " + d.str() + " at", largest);
  }
  const std::string count = std::to_string(n);
  if (mismatches == 0) {
    return {true, joined(what + ": all " + count + " elements agree", criterion(mode, tol)) +
                      (mode == Mode::kClose ? largest_line : "")};
  }
  std::string report = joined(what + ": " + std::to_string(mismatches) + " of " + count +
                                  " elements differ",
                              criterion(mode, tol)) +
                       pair_at("first at", first) + largest_line;
  if (nan_mismatches > 0) {
    report += pair_at(std::to_string(nan_mismatches) +
                          " of the mismatches involve NaN, the first at",
                      first_nan);
  }
  return {false, report};
}

}  // namespace compare_detail
}  // namespace pipewright::testing

// Tensors and lists of tensors for tests/compare.h: dtype, shape and names checked here, the
// elements by compare_elements.
#include "tests/compare.h"

#include <algorithm>

namespace pipewright::testing {
namespace {

using compare_detail::compare_elements;
using compare_detail::criterion;
using compare_detail::Mode;

/// "float32 [5, 70000]" or "undefined".
std::string describe(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str() : "undefined";
}

template <class T>
Comparison typed(const Tensor& a, const Tensor& b, Mode mode, Tolerance tol) {
  const std::vector<T> x = a.to_vector<T>(), y = b.to_vector<T>();  // host, row-major
  return compare_elements<T>(describe(a), x, y, x.size(), a.shape().dims(), mode, tol);
}

Comparison tensors(const Tensor& a, const Tensor& b, Mode mode, Tolerance tol) {
  if (!a.defined() || !b.defined()) {
    return {false, "a is " + describe(a) + ", b is " + describe(b)};
  }
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    return {false, std::string(a.dtype() != b.dtype() ? "dtypes" : "shapes") +
                       " differ: a is " + describe(a) + ", b is " + describe(b)};
  }
  switch (a.dtype()) {
    case DType::kFloat32: return typed<float>(a, b, mode, tol);
    case DType::kInt64: return typed<int64_t>(a, b, mode, tol);
    default: return typed<double>(a, b, mode, tol);  // float64; 16-bit floats widened exactly
  }
}

/// 'name' cut to 40 characters.
std::string quoted(const std::string& name) {
  return "'" + (name.size() > 40 ? name.substr(0, 37) + "..." : name) + "'";
}

/// Every line after the first indented by 4 more spaces.
std::string indented(std::string text) {
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) {
    text.insert(at + 1, "    ");
  }
  return text;
}

Comparison lists(const NamedTensors& a, const NamedTensors& b, bool named, Mode mode,
                 Tolerance tol) {
  const std::string what = named ? "named tensors" : "tensors";
  auto label = [&](size_t i) {
    std::string out = "entry " + std::to_string(i);
    if (named) out += " " + quoted(a[i].first);
    return out;
  };
  if (a.size() != b.size()) {
    return {false, "lists of " + what + " differ in length: " + std::to_string(a.size()) +
                       " vs " + std::to_string(b.size()) + " entries"};
  }
  size_t differing = 0;
  std::string first;
  std::vector<std::string> others;
  for (size_t i = 0; i < a.size(); ++i) {
    Comparison c;
    if (named && a[i].first != b[i].first) {
      c = {false, "names differ: " + quoted(a[i].first) + " vs " + quoted(b[i].first)};
    } else if (a[i].second.defined() || b[i].second.defined()) {
      c = tensors(a[i].second, b[i].second, mode, tol);
    }
    if (c.ok) continue;
    if (differing++ == 0) {
      first = "\n  first: " + label(i) + ":\n    " + indented(c.report);
    } else if (others.size() < 4) {
      others.push_back(label(i));
    }
  }
  const std::string count = std::to_string(a.size());
  if (differing == 0) {
    return {true, compare_detail::joined("all " + count + " " + what + " agree",
                                         criterion(mode, tol))};
  }
  std::string report = compare_detail::joined(
                           std::to_string(differing) + " of " + count + " " + what + " differ",
                           criterion(mode, tol)) +
                       first;
  if (!others.empty()) {
    std::string line = "\n  also:";
    for (size_t k = 0; k < others.size(); ++k) {
      line = compare_detail::joined(line, others[k] + (k + 1 < others.size() ? "," : ""),
                                    "\n    " + others[k] + (k + 1 < others.size() ? "," : ""));
    }
    if (differing > 1 + others.size()) {
      line = compare_detail::joined(
          line, "and " + std::to_string(differing - 1 - others.size()) + " more",
          "\n    and " + std::to_string(differing - 1 - others.size()) + " more");
    }
    report += line;
  }
  return {false, report};
}

NamedTensors unnamed(const std::vector<Tensor>& tensors) {
  NamedTensors out;
  for (const Tensor& t : tensors) out.emplace_back("", t);
  return out;
}

}  // namespace

Comparison equal_values(const Tensor& a, const Tensor& b) {
  return tensors(a, b, Mode::kValues, {});
}
Comparison bitwise_equal(const Tensor& a, const Tensor& b) {
  return tensors(a, b, Mode::kBits, {});
}
Comparison all_close(const Tensor& a, const Tensor& b, Tolerance tol) {
  return tensors(a, b, Mode::kClose, tol);
}

Comparison equal_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  return lists(unnamed(a), unnamed(b), false, Mode::kValues, {});
}
Comparison bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  return lists(unnamed(a), unnamed(b), false, Mode::kBits, {});
}
Comparison all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, Tolerance tol) {
  return lists(unnamed(a), unnamed(b), false, Mode::kClose, tol);
}

Comparison equal_values(const NamedTensors& a, const NamedTensors& b) {
  return lists(a, b, true, Mode::kValues, {});
}
Comparison bitwise_equal(const NamedTensors& a, const NamedTensors& b) {
  return lists(a, b, true, Mode::kBits, {});
}
Comparison all_close(const NamedTensors& a, const NamedTensors& b, Tolerance tol) {
  return lists(a, b, true, Mode::kClose, tol);
}

}  // namespace pipewright::testing

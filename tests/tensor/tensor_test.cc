#include <catch2/catch.hpp>
#include <sstream>

#include "tensor/allocator.h"
#include "tensor/tensor.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using testing::transposed_view;

namespace {
std::vector<int64_t> chunk_rows(int64_t rows, int64_t n) {
  std::vector<int64_t> sizes;
  for (const Tensor& c : Tensor::zeros({rows, 2}).chunk(n)) sizes.push_back(c.size(0));
  return sizes;
}
}  // namespace

TEST_CASE("factories fill, type and place their tensors") {
  const Tensor z = Tensor::zeros({2, 3});
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.dtype() == DType::kFloat32);
  REQUIRE(z.device() == Device::cpu(0));
  REQUIRE(z.is_contiguous());
  REQUIRE(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  REQUIRE(Tensor::ones({4}, {DType::kFloat64}).to_vector<double>() == std::vector<double>(4, 1.0));
  REQUIRE(Tensor::full({2}, -2.5, {DType::kFloat64, Device::cpu(3)}).to_vector<double>() ==
          std::vector<double>{-2.5, -2.5});
  REQUIRE(Tensor::full({2}, 7, {DType::kInt64}).to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  REQUIRE(Tensor::arange(4, {DType::kInt64}).to_vector<int64_t>() ==
          std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE(Tensor::arange(3).to_vector<float>() == std::vector<float>{0, 1, 2});
  const Tensor s = Tensor::scalar(3.5, {DType::kFloat64});
  REQUIRE(s.dim() == 0);
  REQUIRE(s.item() == 3.5);
  const Tensor v = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}, Device::cpu(2));
  REQUIRE(v.dtype() == DType::kInt64);
  REQUIRE(v.device() == Device::cpu(2));
  REQUIRE(v.nbytes() == 48);
  REQUIRE(Tensor::empty({0, 4}).numel() == 0);
}

TEST_CASE("from_vector checks the element count") {
  REQUIRE_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                      Catch::Contains("3 values") && Catch::Contains("[2, 2]"));
}

TEST_CASE("data<T> checks the dtype") {
  const Tensor t = Tensor::zeros({2});
  REQUIRE(t.data<float>() != nullptr);
  REQUIRE_THROWS_AS(t.data<double>(), std::invalid_argument);
  REQUIRE_THROWS_WITH(t.data<int64_t>(), Catch::Contains("int64") && Catch::Contains("float32"));
}

TEST_CASE("slices are views of dim 0 sharing storage") {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor s = t.slice(1, 3);
  REQUIRE(s.shape() == Shape{2, 2});
  REQUIRE(s.shares_storage(t));
  REQUIRE(s.offset() == 2);
  REQUIRE(s.is_contiguous());
  REQUIRE(s.to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  s.data<float>()[0] = 42;  // writes through to the parent
  REQUIRE(t.to_vector<float>()[2] == 42);
  REQUIRE(t.slice(4, 4).numel() == 0);
  REQUIRE(t.slice(1, 3).slice(1, 2).to_vector<float>() == std::vector<float>{4, 5});
}

TEST_CASE("slice names start, end and the size when out of range") {
  const Tensor t = Tensor::zeros({8});
  REQUIRE_THROWS_AS(t.slice(3, 9), std::out_of_range);
  REQUIRE_THROWS_WITH(t.slice(3, 9),
                      "slice: [start, end) = [3, 9) out of range for dim 0 of size 8");
  REQUIRE_THROWS_AS(t.slice(-1, 2), std::out_of_range);
  REQUIRE_THROWS_AS(t.slice(5, 4), std::out_of_range);
  REQUIRE_THROWS_AS(Tensor::scalar(1).slice(0, 0), std::invalid_argument);
}

TEST_CASE("chunk follows torch.chunk") {
  REQUIRE(chunk_rows(7, 4) == std::vector<int64_t>{2, 2, 2, 1});
  REQUIRE(chunk_rows(2, 4) == std::vector<int64_t>{1, 1});
  REQUIRE(chunk_rows(5, 4) == std::vector<int64_t>{2, 2, 1});
  REQUIRE(chunk_rows(8, 4) == std::vector<int64_t>{2, 2, 2, 2});
  REQUIRE(chunk_rows(6, 4) == std::vector<int64_t>{2, 2, 2});
  REQUIRE(chunk_rows(3, 1) == std::vector<int64_t>{3});
  REQUIRE(chunk_rows(1, 3) == std::vector<int64_t>{1});
  REQUIRE(chunk_rows(0, 3) == std::vector<int64_t>{0});

  const Tensor t = Tensor::arange(7, {DType::kInt64});
  std::vector<int64_t> joined;
  for (const Tensor& c : t.chunk(4)) {
    REQUIRE(c.shares_storage(t));
    for (int64_t v : c.to_vector<int64_t>()) joined.push_back(v);
  }
  REQUIRE(joined == t.to_vector<int64_t>());

  REQUIRE_THROWS_WITH(t.chunk(0), Catch::Contains("got 0"));
  REQUIRE_THROWS_AS(t.chunk(-2), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::scalar(1).chunk(2), std::invalid_argument);
}

TEST_CASE("reshape: views of contiguous tensors, copies otherwise") {
  const Tensor t = Tensor::arange(6);
  const Tensor r = t.reshape({2, -1});
  REQUIRE(r.shape() == Shape{2, 3});
  REQUIRE(r.shares_storage(t));
  REQUIRE(t.reshape({-1}).shape() == Shape{6});
  REQUIRE(t.reshape({1, 2, 3}).strides() == std::vector<int64_t>{6, 3, 1});
  REQUIRE(Tensor::scalar(2).reshape({1, 1}).shape() == Shape{1, 1});

  const Tensor tt = transposed_view(r);  // [3, 2], not contiguous
  REQUIRE_FALSE(tt.is_contiguous());
  const Tensor flat = tt.reshape({6});
  REQUIRE_FALSE(flat.shares_storage(t));
  REQUIRE(flat.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});

  REQUIRE_THROWS_WITH(t.reshape({4, 2}), Catch::Contains("[6]") && Catch::Contains("[4, 2]"));
  REQUIRE_THROWS_AS(t.reshape({-1, -1}), std::invalid_argument);
  REQUIRE_THROWS_AS(t.reshape({4, -1}), std::invalid_argument);
}

TEST_CASE("flatten_from keeps the leading dims") {
  const Tensor t = Tensor::zeros({2, 3, 4, 5});
  REQUIRE(t.flatten_from().shape() == Shape{2, 60});
  REQUIRE(t.flatten_from(2).shape() == Shape{2, 3, 20});
  REQUIRE(t.flatten_from(0).shape() == Shape{120});
  REQUIRE(t.flatten_from(-1).shape() == Shape{2, 3, 4, 5});
  REQUIRE_THROWS_AS(t.flatten_from(4), std::out_of_range);
}

TEST_CASE("contiguous and clone") {
  const Tensor t = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(t.contiguous().is_same(t));
  const Tensor c = t.clone();
  REQUIRE_FALSE(c.shares_storage(t));
  REQUIRE(c.to_vector<double>() == t.to_vector<double>());
  const Tensor tt = transposed_view(t);
  const Tensor tc = tt.contiguous();
  REQUIRE(tc.is_contiguous());
  REQUIRE(tc.shape() == Shape{3, 2});
  REQUIRE(tc.to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  REQUIRE(tt.to_vector<double>() == tc.to_vector<double>());  // to_vector reads strides too
  REQUIRE(tt.clone().to_vector<double>() == tc.to_vector<double>());
}

TEST_CASE("to(Device) copies between virtual CPU devices into the other allocator") {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3}, Device::cpu(0));
  REQUIRE(t.to(Device::cpu(0)).is_same(t));
  Allocator& dst = allocator_for(Device::cpu(31));
  const int64_t before = dst.allocated();
  const Tensor u = t.to(Device::cpu(31));
  REQUIRE(u.device() == Device::cpu(31));
  REQUIRE_FALSE(u.shares_storage(t));
  REQUIRE(dst.allocated() == before + 12);
  REQUIRE(u.to_vector<float>() == t.to_vector<float>());
  REQUIRE(transposed_view(t.reshape({1, 3})).to(Device::cpu(31)).to_vector<float>() ==
          std::vector<float>{1, 2, 3});
}

TEST_CASE("to(DType) converts with C++ conversion semantics") {
  const Tensor t = Tensor::from_vector<double>({2.7, -2.7, 0.5, 1e10});
  REQUIRE(t.to(DType::kFloat64).is_same(t));
  REQUIRE(t.to(DType::kInt64).to_vector<int64_t>() ==
          std::vector<int64_t>{2, -2, 0, 10000000000});
  REQUIRE(t.to(DType::kFloat32).to_vector<float>() == std::vector<float>{2.7f, -2.7f, 0.5f, 1e10f});
  const Tensor i = Tensor::from_vector<int64_t>({-3, 4});
  REQUIRE(i.to(DType::kFloat32).to_vector<float>() == std::vector<float>{-3, 4});
  REQUIRE(i.to(DType::kFloat64).dtype() == DType::kFloat64);
}

TEST_CASE("copy_from copies values into existing memory") {
  Tensor dst = Tensor::zeros({2, 2}, {DType::kFloat32, Device::cpu(1)});
  const Tensor src = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  float* before = dst.data<float>();
  dst.copy_from(src);
  REQUIRE(dst.data<float>() == before);
  REQUIRE(dst.to_vector<float>() == src.to_vector<float>());
  dst.copy_from(transposed_view(src));
  REQUIRE(dst.to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  Tensor row = dst.slice(1, 2);
  row.copy_from(Tensor::from_vector<float>({9, 8}, {1, 2}));
  REQUIRE(dst.to_vector<float>() == std::vector<float>{1, 3, 9, 8});
  REQUIRE_THROWS_WITH(dst.copy_from(Tensor::zeros({4})),
                      Catch::Contains("[4]") && Catch::Contains("[2, 2]"));
  REQUIRE_THROWS_WITH(dst.copy_from(Tensor::zeros({2, 2}, {DType::kFloat64})),
                      Catch::Contains("float64") && Catch::Contains("float32"));
}

TEST_CASE("item and to_vector") {
  REQUIRE(Tensor::from_vector<int64_t>({5}).item() == 5.0);
  REQUIRE(Tensor::full({1, 1}, 0.25).item() == 0.25);
  REQUIRE_THROWS_WITH(Tensor::zeros({2, 3}).item(), Catch::Contains("[2, 3]"));
  REQUIRE(Tensor::from_vector<float>({1.5f, -2.5f}).to_vector<int64_t>() ==
          std::vector<int64_t>{1, -2});
  REQUIRE(Tensor::from_vector<int64_t>({1, 2}).to_vector<double>() == std::vector<double>{1, 2});
}

TEST_CASE("str prints like PyTorch, abbreviating large tensors") {
  REQUIRE(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).str() ==
          "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=float32, device=cpu:0)");
  REQUIRE(Tensor::from_vector<double>({0.5, -1.25}, Device::cpu(1)).str() ==
          "tensor([0.5, -1.25], shape=[2], dtype=float64, device=cpu:1)");
  REQUIRE(Tensor::scalar(3).str() == "tensor(3, shape=[], dtype=float32, device=cpu:0)");
  REQUIRE(Tensor::zeros({0}).str() == "tensor([], shape=[0], dtype=float32, device=cpu:0)");
  REQUIRE(Tensor().str() == "tensor(undefined)");
  const std::string big = Tensor::arange(2000, {DType::kInt64}).str();
  REQUIRE(big == "tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000], dtype=int64, "
                 "device=cpu:0)");
  const std::string big2 = Tensor::zeros({100, 100}).str();
  REQUIRE(big2.rfind("tensor([[0, 0, 0, ..., 0, 0, 0], [", 0) == 0);
  REQUIRE(big2.find("0, 0, 0], ..., [0, 0, 0") != std::string::npos);
  REQUIRE(big2.size() < 400);
  std::ostringstream os;
  os << Tensor::ones({1});
  REQUIRE(os.str() == "tensor([1], shape=[1], dtype=float32, device=cpu:0)");
}

TEST_CASE("cat concatenates along dim 0 and names the mismatching pair") {
  const Tensor a = Tensor::from_vector<float>({1, 2}, {1, 2});
  const Tensor b = Tensor::from_vector<float>({3, 4, 5, 6}, {2, 2});
  const Tensor c = cat({a, b, a.slice(0, 0)});
  REQUIRE(c.shape() == Shape{3, 2});
  REQUIRE(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE_THROWS_WITH(cat({a, Tensor::zeros({1, 3})}),
                      Catch::Contains("tensor 1") && Catch::Contains("[1, 3]") &&
                          Catch::Contains("[1, 2]"));
  REQUIRE_THROWS_WITH(cat({a, Tensor::zeros({1, 2}, {DType::kFloat64})}),
                      Catch::Contains("float64"));
  REQUIRE_THROWS_WITH(cat({a, Tensor::zeros({1, 2}, {DType::kFloat32, Device::cpu(1)})}),
                      Catch::Contains("cpu:1") && Catch::Contains("cpu:0"));
  REQUIRE_THROWS_AS(cat({}), std::invalid_argument);
}

TEST_CASE("autograd fields are plain accessors") {
  Tensor w = Tensor::zeros({2});
  REQUIRE_FALSE(w.requires_grad());
  REQUIRE(&w.set_requires_grad() == &w);
  REQUIRE(w.requires_grad());
  REQUIRE_FALSE(w.grad().defined());
  const Tensor g = Tensor::ones({2});
  w.set_grad(g);
  REQUIRE(w.grad().is_same(g));
  w.set_grad(Tensor());
  REQUIRE_FALSE(w.grad().defined());
  const Tensor d = w.detach();
  REQUIRE(d.shares_storage(w));
  REQUIRE_FALSE(d.is_same(w));
  REQUIRE_FALSE(d.requires_grad());
  REQUIRE(d.grad_fn() == nullptr);
  Tensor labels = Tensor::zeros({2}, {DType::kInt64});
  REQUIRE_THROWS_WITH(labels.set_requires_grad(), Catch::Contains("int64"));
}

TEST_CASE("an undefined tensor throws std::logic_error") {
  const Tensor t;
  REQUIRE_FALSE(t.defined());
  REQUIRE_THROWS_AS(t.shape(), std::logic_error);
  REQUIRE_THROWS_AS(t.clone(), std::logic_error);
}

TEST_CASE("CUDA tensors need a CUDA build") {
  REQUIRE_THROWS_WITH(Tensor::zeros({2}, {DType::kFloat32, Device::cuda(0)}),
                      Catch::Contains("CUDA is not available"));
  REQUIRE_THROWS_WITH(Tensor::zeros({2}).to(Device::cuda(0)),
                      Catch::Contains("CUDA is not available"));
}

TEST_CASE("a moved-from tensor is undefined: using it throws std::logic_error saying so") {
  Tensor t = Tensor::ones({2});
  const Tensor owner = std::move(t);
  REQUIRE(owner.numel() == 2);
  REQUIRE_FALSE(t.defined());
  REQUIRE_THROWS_MATCHES(t.numel(), std::logic_error,
                         Catch::Message("operation on an undefined Tensor (default-constructed, "
                                        "or moved from with std::move)"));
  REQUIRE_THROWS_AS(t.to(Device::cpu(1)), std::logic_error);
  REQUIRE_THROWS_AS(t.to_vector<float>(), std::logic_error);
  REQUIRE_THROWS_AS(t.slice(0, 1), std::logic_error);
}

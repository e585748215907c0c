#include <catch2/catch.hpp>
#include <sstream>
#include <unordered_set>

#include "tensor/device.h"
#include "tensor/dtype.h"

using namespace pipewright;

TEST_CASE("Device::str names type and index") {
  REQUIRE(Device::cpu(1).str() == "cpu:1");
  REQUIRE(Device::cpu().str() == "cpu:0");
  REQUIRE(Device::cuda(3).str() == "cuda:3");
  std::ostringstream os;
  os << Device::cuda(0);
  REQUIRE(os.str() == "cuda:0");
  REQUIRE(std::string(device_type_name(DeviceType::kCPU)) == "cpu");
}

TEST_CASE("Device::parse accepts the documented spellings") {
  REQUIRE(Device::parse("cpu") == Device::cpu(0));
  REQUIRE(Device::parse("cpu:1") == Device::cpu(1));
  REQUIRE(Device::parse("cuda") == Device::cuda(0));
  REQUIRE(Device::parse("cuda:12") == Device::cuda(12));
  for (Device d : {Device::cpu(0), Device::cpu(63), Device::cuda(7)}) {
    REQUIRE(Device::parse(d.str()) == d);
  }
}

TEST_CASE("Device::parse rejects anything else, naming the text") {
  for (const char* bad : {"gpu:0", "", "cpu:", "cpu:-1", "cpu:1x", "cuda:abc", "CPU", "cpu:+1",
                          "cpu:99999999999"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(Device::parse(bad), std::invalid_argument);
    REQUIRE_THROWS_WITH(Device::parse(bad), Catch::Contains(std::string("\"") + bad + "\""));
  }
}

TEST_CASE("Devices compare, order and hash by type then index") {
  REQUIRE(Device::cpu(0) != Device::cpu(1));
  REQUIRE(Device::cpu(0) != Device::cuda(0));
  REQUIRE(Device::cpu(5) < Device::cuda(0));
  REQUIRE(Device::cpu(0) < Device::cpu(1));
  std::unordered_set<Device> set{Device::cpu(0), Device::cpu(1), Device::cuda(0), Device::cpu(0)};
  REQUIRE(set.size() == 3);
}

TEST_CASE("DType names and sizes") {
  REQUIRE(std::string(dtype_name(DType::kFloat32)) == "float32");
  REQUIRE(std::string(dtype_name(DType::kFloat64)) == "float64");
  REQUIRE(std::string(dtype_name(DType::kInt64)) == "int64");
  REQUIRE(element_size(DType::kFloat32) == 4);
  REQUIRE(element_size(DType::kFloat64) == 8);
  REQUIRE(element_size(DType::kInt64) == 8);
  REQUIRE(std::string(dtype_name(DType::kBFloat16)) == "bfloat16");
  REQUIRE(std::string(dtype_name(DType::kFloat16)) == "float16");
  REQUIRE(element_size(DType::kBFloat16) == 2);
  REQUIRE(element_size(DType::kFloat16) == 2);
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16,
                  DType::kFloat16}) {
    REQUIRE(dtype_from_safetensors_name(dtype_safetensors_name(t)) == t);
  }
  REQUIRE(std::string(dtype_safetensors_name(DType::kBFloat16)) == "BF16");
  REQUIRE(std::string(dtype_safetensors_name(DType::kFloat16)) == "F16");
  REQUIRE_THROWS_WITH(dtype_from_safetensors_name("F8_E4M3"),
                      "unsupported safetensors dtype \"F8_E4M3\" (supported: F32, F64, I64, "
                      "BF16, F16)");
  REQUIRE(is_floating(DType::kFloat64));
  REQUIRE(is_floating(DType::kBFloat16));
  REQUIRE(is_16_bit(DType::kFloat16));
  REQUIRE_FALSE(is_16_bit(DType::kFloat32));
  REQUIRE_FALSE(is_floating(DType::kInt64));
}

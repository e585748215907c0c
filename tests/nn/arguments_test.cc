// nn::Arguments and the per-thread current arguments: typed reads, errors that name the
// argument, guards that nest and restore, one thread's arguments invisible to another.
#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "nn/arguments.h"

using namespace pipewright;

TEST_CASE("arguments are read by type; an integer also reads as a real number") {
  const nn::Arguments a = {{"train", true}, {"len", int64_t{12}}, {"scale", 0.25},
                           {"mode", std::string("causal")}};
  REQUIRE(a.get<bool>("train"));
  REQUIRE(a.get<int64_t>("len") == 12);
  REQUIRE(a.get<double>("len") == 12.0);
  REQUIRE(a.get<double>("scale") == 0.25);
  REQUIRE(a.get<std::string>("mode") == "causal");
  REQUIRE(a.get_or<int64_t>("absent", 7) == 7);
  REQUIRE(a.get_or("scale", 1.0) == 0.25);
  REQUIRE_THROWS_WITH(a.get<int64_t>("scale"), "argument 'scale' is a double, read as int64");
  REQUIRE_THROWS_WITH(a.get_or("mode", false), "argument 'mode' is a string, read as bool");
  REQUIRE_THROWS_AS(a.get<bool>("absent"), std::out_of_range);
  REQUIRE_THROWS_WITH(a.get<bool>("absent"),
                      "no argument 'absent' in this call (arguments: len, mode, scale, train)");
  REQUIRE_THROWS_WITH(nn::Arguments().get<double>("x"),
                      "no argument 'x' in this call (arguments: none)");
}

TEST_CASE("guards install arguments for this thread, nest, and restore") {
  REQUIRE(nn::current_arguments().empty());
  const nn::Arguments outer = {{"k", int64_t{1}}};
  const nn::Arguments inner = {{"k", int64_t{2}}};
  {
    nn::ArgumentsGuard a(outer);
    REQUIRE(nn::current_arguments().get<int64_t>("k") == 1);
    {
      nn::ArgumentsGuard b(inner);
      REQUIRE(nn::current_arguments().get<int64_t>("k") == 2);
      bool other_thread_empty = false;
      std::thread t([&] { other_thread_empty = nn::current_arguments().empty(); });
      t.join();
      REQUIRE(other_thread_empty);
    }
    REQUIRE(nn::current_arguments().get<int64_t>("k") == 1);
  }
  REQUIRE(nn::current_arguments().empty());
}

// CharCorpus (data/char_corpus.h): vocabulary, split by position, windows keyed by
// (seed, step, i), the same starts the PyTorch peer computes, and the corpus files read.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "data/char_corpus.h"
#include "tensor/allocator.h"

using namespace pipewright;
using data::CharCorpus;
using data::TextSplit;

TEST_CASE("the vocabulary is the sorted distinct bytes; 90 % of the text trains") {
  CharCorpus corpus("hello world, hello corpus");  // 25 bytes
  CHECK(corpus.vocabulary() == " ,cdehloprsuw");
  CHECK(corpus.size(TextSplit::kTrain) == 22);  // int(25 * 0.9)
  CHECK(corpus.size(TextSplit::kValidation) == 3);
  CHECK(corpus.decode(corpus.encode("hello")) == "hello");
  CHECK(corpus.tokens(TextSplit::kTrain).data<int64_t>()[0] == 5);  // 'h'
  CHECK_THROWS_AS(corpus.encode("x"), std::invalid_argument);
  CHECK_THROWS_AS(CharCorpus("ab"), std::invalid_argument);
}

TEST_CASE("the tokens live on the device given, counted by its allocator alone") {
  // A device no pipeline stage uses keeps the corpus out of the stages' peaks (char_gpt).
  Allocator& host = allocator_for(Device::cpu(7));
  Allocator& stage = allocator_for(Device::cpu(0));
  const int64_t host_before = host.allocated();
  const int64_t stage_before = stage.allocated();
  {
    CharCorpus corpus("hello world, hello corpus", 0.9, Device::cpu(7));  // 25 tokens
    CHECK(corpus.tokens(TextSplit::kTrain).device() == Device::cpu(7));
    CHECK(host.allocated() - host_before == 25 * 8);
    stage.reset_peak();
    auto [x, y] = corpus.window_batch(TextSplit::kTrain, 0, 2, 4, 1, Device::cpu(7));
    CHECK(x.device() == Device::cpu(7));
    CHECK(stage.peak() == stage_before);  // not even the gathering's buffers on cpu:0
  }
  CHECK(host.allocated() == host_before);
  CHECK_THROWS_WITH(CharCorpus("hello world", 0.9, Device::cuda(0)),
                    Catch::Contains("CPU device, got cuda:0"));
}

TEST_CASE("window starts are splitmix64 of (seed, step, i), as the peer computes them") {
  std::string text(1000 * 10 / 9 + 1, 'a');  // a training split of exactly 1000 tokens
  text[0] = 'b';
  CharCorpus corpus(text);
  REQUIRE(corpus.size(TextSplit::kTrain) == 1000);
  // bench/peers/torch_char_gpt.py's window_batch for seed 7, step 3, context 10.
  const int64_t expected[] = {51, 660, 209, 211};
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(corpus.window_start(TextSplit::kTrain, 3, i, 10, 7) == expected[i]);
  }
  auto [x, y] = corpus.window_batch(TextSplit::kTrain, 3, 4, 10, 7);
  CHECK(x.shape() == Shape{4, 10});
  CHECK(y.shape() == Shape{4, 10});
  CHECK_THROWS_AS(corpus.window_start(TextSplit::kValidation, 0, 0, 200, 0),
                  std::invalid_argument);
}

TEST_CASE("the targets are the inputs shifted by one character") {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);
  CharCorpus corpus(text);
  auto [x, y] = corpus.window_batch(TextSplit::kTrain, 5, 3, 16, 1);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t t = 0; t + 1 < 16; ++t) {
      CHECK(y.data<int64_t>()[r * 16 + t] == x.data<int64_t>()[r * 16 + t + 1]);
    }
  }
}

TEST_CASE("read_text_files takes the files without '.', in name order") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/char_corpus_files";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/b") << "second";
  std::ofstream(dir + "/a") << "first ";
  std::ofstream(dir + "/a.dat") << "index";
  CHECK(data::read_text_files(dir) == "first second");
  CHECK_THROWS_WITH(data::read_text_files(dir + "/none"),
                    Catch::Contains("no text files in") && Catch::Contains("fortunes"));
}

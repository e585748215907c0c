// scatter / gather / split_rows / gather_input_grads: torch.chunk semantics and errors.
#include "pipeline/microbatch.h"

#include <catch2/catch.hpp>

#include "tensor/ops.h"

using namespace pipewright;
using namespace pipewright::pipeline;

namespace {
Tensor rows(int64_t n, int64_t cols = 3) {
  std::vector<float> v(static_cast<size_t>(n * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, {n, cols});
}
}  // namespace

TEST_CASE("scatter follows torch.chunk: uneven and small batches") {
  auto sizes = [](int64_t n, int chunks) { return scatter({rows(n)}, {}, chunks).sizes; };
  REQUIRE(sizes(8, 4) == std::vector<int64_t>{2, 2, 2, 2});
  REQUIRE(sizes(7, 4) == std::vector<int64_t>{2, 2, 2, 1});
  REQUIRE(sizes(5, 4) == std::vector<int64_t>{2, 2, 1});
  REQUIRE(sizes(2, 4) == std::vector<int64_t>{1, 1});
  REQUIRE(sizes(1, 1) == std::vector<int64_t>{1});
}

TEST_CASE("micro-batches are views of the input") {
  Tensor x = rows(6);
  MicroBatches mb = scatter({x}, {}, 3);
  REQUIRE(mb.count() == 3);
  REQUIRE(mb.batch_size == 6);
  for (const nn::Tensors& b : mb.batches) REQUIRE(b[0].shares_storage(x));
  REQUIRE(ops::equal(mb.batches[1][0], x.slice(2, 4)));
}

TEST_CASE("replicated inputs (torchgpipe's NoChunk) go whole to every micro-batch") {
  Tensor x = rows(4), w = rows(2, 2);
  MicroBatches mb = scatter({x, w}, {ChunkSpec::split(), ChunkSpec::replicate()}, 2);
  REQUIRE(mb.count() == 2);
  for (const nn::Tensors& b : mb.batches) REQUIRE(b[1].is_same(w));
}

TEST_CASE("scatter errors name the values") {
  REQUIRE_THROWS_WITH(scatter({rows(4)}, {}, 0), Catch::Contains("chunks: 0"));
  REQUIRE_THROWS_AS(scatter({}, {}, 2), std::invalid_argument);
  REQUIRE_THROWS_WITH(scatter({rows(4), rows(5)}, {}, 2),
                      Catch::Contains("[4, 3]") && Catch::Contains("[5, 3]"));
  REQUIRE_THROWS_WITH(chunk_specs({ChunkSpec::replicate(), ChunkSpec()}, 1, "input"),
                      "2 chunk specs for 1 inputs");
  REQUIRE_THROWS_WITH(scatter({rows(4)}, {ChunkSpec(), ChunkSpec()}, 2),
                      "2 chunk specs for 1 inputs");
  REQUIRE_THROWS_WITH(scatter({Tensor::scalar(1.0)}, {}, 2), Catch::Contains("scalar"));
  REQUIRE_THROWS_WITH(
      scatter({rows(4)}, {ChunkSpec::replicate()}, 2),
      "every pipeline input is replicated (ChunkSpec::replicate): nothing to split");
  REQUIRE_THROWS_WITH(scatter({rows(4)}, {ChunkSpec::split(2)}, 2),
                      "pipeline input 0 of shape [4, 3] has no dim 2 to split on");
  REQUIRE_THROWS_WITH(scatter({rows(4)}, {ChunkSpec::split(-3)}, 2),
                      "pipeline input 0 of shape [4, 3] has no dim -3 to split on");
}

TEST_CASE("gather concatenates each output position") {
  Tensor x = rows(7);
  MicroBatches mb = scatter({x, rows(7, 1)}, {}, 4);
  nn::Tensors out = gather(mb.batches);
  REQUIRE(out.size() == 2);
  REQUIRE(ops::equal(out[0], x));
  REQUIRE_FALSE(out[0].shares_storage(x));
  REQUIRE_THROWS_AS(gather({{Tensor::scalar(1.0)}}), std::invalid_argument);
  REQUIRE_THROWS_AS(gather({{rows(1)}, {rows(1), rows(1)}}), std::invalid_argument);
}

TEST_CASE("split_sections cuts a gradient like the micro-batches, on any dim") {
  Tensor g = rows(7);
  std::vector<Tensor> parts = split_sections(g, {2, 2, 2, 1});
  REQUIRE(parts.size() == 4);
  REQUIRE(ops::equal(parts[3], g.slice(6, 7)));
  REQUIRE(parts[0].shares_storage(g));  // dim 0: views
  REQUIRE_FALSE(split_sections(Tensor(), {2, 2})[0].defined());
  REQUIRE_THROWS_WITH(split_sections(g, {2, 2}),
                      "cannot split a gradient of shape [7, 3] on dim 0 into micro-batches of "
                      "4 entries");
  // [2, 5] on dim 1 (and -1) into 3 + 2 columns: copies.
  const Tensor w = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  for (int dim : {1, -1}) {
    const std::vector<Tensor> cols = split_sections(w, {3, 2}, dim);
    REQUIRE(cols[0].to_vector<float>() == std::vector<float>{0, 1, 2, 5, 6, 7});
    REQUIRE(cols[1].to_vector<float>() == std::vector<float>{3, 4, 8, 9});
  }
  REQUIRE_THROWS_WITH(split_sections(w, {3, 2}, 2), Catch::Contains("on dim 2"));
}

TEST_CASE("input gradients: cat for chunked, sum for replicated, zeros for gaps") {
  Tensor x = rows(3, 2), w = rows(1, 2);
  std::vector<InputInfo> info = describe_inputs({x, w}, {ChunkSpec::split(), ChunkSpec::replicate()});
  std::vector<nn::Tensors> grads = {
      {Tensor::ones({2, 2}), Tensor::ones({1, 2})},
      {Tensor(), Tensor::full({1, 2}, 2.0)},
  };
  nn::Tensors g = gather_input_grads(grads, info, {2, 1});
  REQUIRE(g[0].shape() == Shape{3, 2});
  REQUIRE(g[0].to_vector<float>() == std::vector<float>{1, 1, 1, 1, 0, 0});
  REQUIRE(g[1].to_vector<float>() == std::vector<float>{3, 3});
  nn::Tensors none = gather_input_grads({{Tensor()}, {Tensor()}}, describe_inputs({x}, {}), {2, 1});
  REQUIRE_FALSE(none[0].defined());
}

TEST_CASE("split on dim 1 (and -1): torch.chunk's sizes, copies, gathered back in order") {
  // x [2, 7, 3]: x[a][i][c] = 100a + 10i + c.
  std::vector<float> v;
  for (int a = 0; a < 2; ++a) {
    for (int i = 0; i < 7; ++i) {
      for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(100 * a + 10 * i + c));
    }
  }
  Tensor x = Tensor::from_vector(v, {2, 7, 3});
  for (int dim : {1, -2}) {
    MicroBatches mb = scatter({x, rows(7)}, {ChunkSpec::split(dim), ChunkSpec::split(0)}, 3);
    REQUIRE(mb.sizes == std::vector<int64_t>{3, 3, 1});
    REQUIRE(mb.batch_size == 7);
    REQUIRE(mb.batches[2][0].shape() == Shape{2, 1, 3});
    REQUIRE(mb.batches[2][0].to_vector<float>() == std::vector<float>{60, 61, 62, 160, 161, 162});
    REQUIRE(mb.batches[1][0].to_vector<float>()[0] == 30);  // rows 3..5 of dim 1, a = 0
    std::vector<nn::Tensors> firsts;
    for (const nn::Tensors& b : mb.batches) firsts.push_back({b[0], b[1]});
    nn::Tensors back = gather(firsts, {dim, 0});
    REQUIRE(ops::equal(back[0], x));
    REQUIRE(ops::equal(back[1], rows(7)));
  }
  REQUIRE_THROWS_WITH(gather({{x}}, {3}), "output 0 of micro-batch 0 of shape [2, 7, 3] has no dim 3 to split on");
  REQUIRE_THROWS_WITH(gather({{x}}, {0, 1}), "2 output dims for 1 outputs");
}

TEST_CASE("split_to cuts targets to the inputs' sizes and names what does not fit") {
  Tensor t = rows(5, 2);
  std::vector<nn::Tensors> pieces = split_to({t, rows(1)}, {ChunkSpec(), ChunkSpec::replicate()},
                                         {2, 3}, "target");
  REQUIRE(pieces.size() == 2);
  REQUIRE(ops::equal(pieces[1][0], t.slice(2, 5)));
  REQUIRE(pieces[0][1].is_same(pieces[1][1]));
  REQUIRE_THROWS_WITH(split_to({t}, {}, {2, 2}, "target"),
                      "target 0 of shape [5, 2] has 5 entries on dim 0, the batch has 4");
  REQUIRE_THROWS_WITH(split_to({Tensor()}, {}, {2, 2}, "target"),
                      "target 0 is undefined: cannot split it");
}

TEST_CASE("input gradients of an input split on dim 1 are concatenated on dim 1") {
  Tensor z = rows(2, 3);  // [2, 3], split on dim 1 into 2 + 1 columns
  std::vector<InputInfo> info = describe_inputs({z}, {ChunkSpec::split(-1)});
  REQUIRE(info[0].chunk.dim == 1);
  std::vector<nn::Tensors> grads = {{Tensor::ones({2, 2})}, {Tensor()}};
  nn::Tensors g = gather_input_grads(grads, info, {2, 1});
  REQUIRE(g[0].shape() == Shape{2, 3});
  REQUIRE(g[0].to_vector<float>() == std::vector<float>{1, 1, 0, 1, 1, 0});
}

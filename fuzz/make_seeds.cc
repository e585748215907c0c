// Writes the seed corpora of the fuzz targets (fuzz/corpus/) with the library's own writers,
// so every seed is a real file: safetensors files and checkpoints of the model the
// state_dict_load fuzzer uses, small IDX files (plain and gzip), the CSV of every
// built-in schedule, and packed pipeline messages (distributed/wire_format.h). Run once after
// changing a format:
//   tools/bazel run //fuzz:make_seeds -- $PWD/fuzz/corpus
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/functions.h"
#include "distributed/wire_format.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/generators.h"
#include "tensor/generator.h"

namespace {

namespace nn = pipewright::nn;
namespace fs = std::filesystem;
using pipewright::Shape;
using pipewright::Tensor;

void write(const fs::path& path, const std::string& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  }
}

std::string idx(uint8_t rank, const std::vector<uint32_t>& dims, int modulo) {
  std::string out = {0, 0, 8, static_cast<char>(rank)};
  uint64_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((d >> s) & 0xff);
    n *= d;
  }
  for (uint64_t i = 0; i < n; ++i) out += static_cast<char>(i % modulo);
  return out;
}

nn::Sequential fuzz_model(uint64_t seed) {  // the state_dict_load fuzzer's model
  pipewright::default_generator().set_state(seed, 0);
  return nn::Sequential{nn::Linear(3, 4), nn::BatchNorm1d(4), nn::ReLU(), nn::Linear(4, 2)};
}

void train(nn::Sequential& model, nn::Optimizer& opt) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, -1, 0, 4}, Shape{2, 3});
  const Tensor y = Tensor::from_vector(std::vector<float>{0.5f, -1, 2, 0}, Shape{2, 2});
  opt.zero_grad();
  nn::mse_loss(model.forward(x), y).backward();
  opt.step();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <fuzz/corpus directory>\n");
    return 2;
  }
  namespace pl = pipewright::pipeline;
  const fs::path root = argv[1];
  const fs::path st = root / "safetensors", sd = root / "state_dict_load";
  const fs::path ix = root / "idx", csv = root / "schedule_csv", wire = root / "wire_format";
  for (const fs::path& d : {st, sd, ix, csv, wire}) fs::create_directories(d);

  // safetensors: every dtype, ranks 0..3, an empty tensor, metadata, no tensors.
  nn::save_safetensors((st / "dtypes.safetensors").string(),
                       {{"f", Tensor::from_vector(std::vector<float>{1.5f, -2}, Shape{2})},
                        {"d", Tensor::from_vector(std::vector<double>{0.1}, Shape{1, 1})},
                        {"i", Tensor::from_vector(std::vector<int64_t>{7}, Shape{})},
                        {"e", Tensor::zeros({0, 3})},
                        {"r3", Tensor::zeros({2, 1, 2})}},
                       {{"format", "pt"}});
  nn::save_safetensors((st / "empty.safetensors").string(), {});
  // A file another tool would write: no checksum, unpadded header.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string plain(8, '\0');
  plain[0] = static_cast<char>(header.size());
  write(st / "no_checksum.safetensors", plain + header + std::string(8, '\x3f'));

  // state_dict_load: the fuzz model's state dict and checkpoints with SGD and AdamW.
  nn::Sequential m = fuzz_model(3);
  nn::SGD sgd(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  train(m, sgd);
  nn::save_state_dict((sd / "state_dict.safetensors").string(), m);
  nn::save_checkpoint((sd / "checkpoint_sgd.safetensors").string(), m, sgd, {{"epoch", "1"}});
  nn::Sequential a = fuzz_model(4);
  nn::AdamW adam(a.parameters(), {.lr = 0.01});
  train(a, adam);
  nn::save_checkpoint((sd / "checkpoint_adamw.safetensors").string(), a, adam);
  nn::save_checkpoint((st / "checkpoint_adamw.safetensors").string(), a, adam);

  // IDX: images [3, 4, 4] and labels [5], plain and gzip.
  write(ix / "images.idx", idx(3, {3, 4, 4}, 256));
  write(ix / "images.idx.gz", idx(3, {3, 4, 4}, 256), true);
  write(ix / "labels.idx", idx(1, {5}, 10));
  write(ix / "labels.idx.gz", idx(1, {5}, 10), true);

  // Schedule CSV: every built-in schedule at a small size.
  for (const std::string& name : pl::schedule_names()) {
    for (auto [p, m, v] : {std::tuple{2, 2, 1}, std::tuple{3, 4, 1}, std::tuple{2, 4, 2}}) {
      try {
        const pl::Schedule s = pl::make_schedule(name, p, m, v);
        write(csv / (name + "_p" + std::to_string(p) + "_m" + std::to_string(m) + "_v" +
                     std::to_string(v) + ".csv"),
              pl::to_csv(s));
      } catch (const std::invalid_argument&) {  // e.g. v > 1 for a non-interleaved schedule
      }
    }
  }
  // Wire format: an activation, a gradient with every dtype, a scalar and an undefined entry,
  // a skip portal's message to another CPU device, an empty message.
  namespace dist = pipewright::distributed;
  const auto message = [](int64_t step, const pl::MessageKey& key,
                          const std::vector<Tensor>& tensors, pipewright::Device destination) {
    std::vector<int64_t> id = {step};
    for (int64_t word : dist::encode_key(key)) id.push_back(word);
    const std::vector<char> bytes = dist::pack_message(id, tensors, destination);
    return std::string(bytes.begin(), bytes.end());
  };
  const Tensor act = Tensor::from_vector(std::vector<float>{1, -2, 3.5f, 0, 5, 6}, Shape{2, 3});
  write(wire / "activation.bin", message(1, {0, 1, pl::Direction::kActivation}, {act},
                                         pipewright::Device::cpu(0)));
  write(wire / "gradient_dtypes.bin",
        message(3, {1, 0, pl::Direction::kGradient},
                {Tensor::from_vector(std::vector<double>{0.25, -1}, Shape{2, 1}), Tensor(),
                 Tensor::from_vector(std::vector<int64_t>{7, -8, 9}, Shape{3}),
                 Tensor::scalar(2.5)},
                pipewright::Device::cpu(0)));
  write(wire / "skip_portal.bin", message(2, {2, 3, pl::Direction::kActivation, 1},
                                          {act, act.slice(1, 2)}, pipewright::Device::cpu(1)));
  const std::vector<char> empty = dist::pack_message({1}, {}, pipewright::Device::cpu(0));
  write(wire / "empty.bin", std::string(empty.begin(), empty.end()));

  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}

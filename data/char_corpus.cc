#include "data/char_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pipewright::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

Tensor to_tokens(const std::string& text, const int64_t* index_of, Device device) {
  Tensor t = Tensor::empty({static_cast<int64_t>(text.size())},
                           {.dtype = DType::kInt64, .device = device});
  int64_t* out = t.data<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) out[i] = index_of[static_cast<unsigned char>(text[i])];
  return t;
}

}  // namespace

CharCorpus::CharCorpus(std::string text, double train_fraction, Device device) {
  if (!device.is_cpu()) {
    throw std::invalid_argument("CharCorpus: the tokens live on a CPU device, got " +
                                device.str());
  }
  const auto n = static_cast<int64_t>(text.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * train_fraction);
  if (n_train < 2 || n - n_train < 2) {
    throw std::invalid_argument("CharCorpus: " + std::to_string(n) + " bytes split at " +
                                std::to_string(train_fraction) +
                                " leave a split of fewer than 2 tokens");
  }
  bool present[256] = {};
  for (char c : text) present[static_cast<unsigned char>(c)] = true;
  std::fill(std::begin(index_of_), std::end(index_of_), -1);
  for (int b = 0; b < 256; ++b) {
    if (!present[b]) continue;
    index_of_[b] = static_cast<int64_t>(vocabulary_.size());
    vocabulary_ += static_cast<char>(b);
  }
  train_ = to_tokens(text.substr(0, static_cast<size_t>(n_train)), index_of_, device);
  val_ = to_tokens(text.substr(static_cast<size_t>(n_train)), index_of_, device);
}

int64_t CharCorpus::window_start(TextSplit split, int64_t step, int64_t i, int64_t context,
                                 uint64_t seed) const {
  const int64_t n = size(split);
  if (context < 1 || n <= context) {
    throw std::invalid_argument("CharCorpus: a window of " + std::to_string(context) +
                                " tokens does not fit a split of " + std::to_string(n));
  }
  const uint64_t counter = static_cast<uint64_t>(step) * (uint64_t{1} << 20) +
                           static_cast<uint64_t>(i) + 1;
  const uint64_t h = splitmix64(seed + 0x9E3779B97F4A7C15ULL * counter);
  return static_cast<int64_t>(h % static_cast<uint64_t>(n - context));
}

std::pair<Tensor, Tensor> CharCorpus::window_batch(TextSplit split, int64_t step, int64_t batch,
                                                   int64_t context, uint64_t seed,
                                                   Device device) const {
  const TensorOptions on_tokens{.dtype = DType::kInt64, .device = train_.device()};
  Tensor x = Tensor::empty({batch, context}, on_tokens);
  Tensor y = Tensor::empty({batch, context}, on_tokens);
  const int64_t* src = tokens(split).data<int64_t>();
  int64_t* xs = x.data<int64_t>();
  int64_t* ys = y.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t start = window_start(split, step, i, context, seed);
    std::copy(src + start, src + start + context, xs + i * context);
    std::copy(src + start + 1, src + start + context + 1, ys + i * context);
  }
  return {x.to(device), y.to(device)};
}

std::vector<int64_t> CharCorpus::encode(const std::string& text) const {
  std::vector<int64_t> out;
  for (char c : text) {
    const int64_t t = index_of_[static_cast<unsigned char>(c)];
    if (t < 0) {
      throw std::invalid_argument("CharCorpus::encode: byte " +
                                  std::to_string(static_cast<unsigned char>(c)) +
                                  " is not in the corpus's vocabulary");
    }
    out.push_back(t);
  }
  return out;
}

std::string CharCorpus::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t t : tokens) out += vocabulary_.at(static_cast<size_t>(t));
  return out;
}

std::string read_text_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !entry.is_symlink() && name.find('.') == std::string::npos) {
      files.push_back(entry.path());
    }
  }
  if (error || files.empty()) {
    throw std::runtime_error("no text files in " + dir +
                             (error ? " (" + error.message() + ")" : std::string()) +
                             "; Debian's fortunes package puts its corpus in " +
                             kDefaultFortunesDir + " (tools/bazel installs it)");
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text += buffer.str();
  }
  return text;
}

CharCorpus load_char_corpus(const std::string& dir, Device device) {
  return CharCorpus(read_text_files(dir), 0.9, device);
}

}  // namespace pipewright::data

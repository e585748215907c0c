// CharCorpus: a text corpus as character tokens, for a character-level language model
// (Karpathy's char-rnn / nanoGPT's shakespeare_char, on bytes).
//
//   data::CharCorpus corpus = data::load_char_corpus(data::kDefaultFortunesDir);
//   auto [x, y] = corpus.window_batch(data::TextSplit::kTrain, /*step=*/12, /*batch=*/32,
//                                     /*context=*/128, /*seed=*/0);   // int64 [32, 128] each
//
// The vocabulary is the set of distinct bytes of the text, sorted; token i is its i-th byte.
// The first 90 % of the text (by position) is the training split, the rest the validation
// split. A batch is `batch` windows of `context` tokens, the targets the same windows shifted
// by one; window i of step s starts at
//
//   start(s, i) = splitmix64(seed + 0x9E3779B97F4A7C15 · (s · 2^20 + i + 1)) mod (n − context)
//
// in the split's n tokens (splitmix64's finaliser: Steele et al., "Fast splittable
// pseudorandom number generators", 2014). A function of (seed, step, i) alone, so the data
// position of a run is its step count and a peer in another language draws the same windows
// (bench/peers/torch_char_gpt.py).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::data {

enum class TextSplit { kTrain, kValidation };

/// Debian's `fortunes` package: ~2.6 MB of English quotes, jokes and verse.
inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";

class CharCorpus {
 public:
  /// `text`: the corpus's bytes; `train_fraction`: the share of the training split;
  /// `device`: the CPU device whose allocator holds the tokens (a device no stage uses keeps
  /// them out of the stages' memory counts). Throws std::invalid_argument when either split
  /// would have fewer than 2 tokens, or for a device that is not a CPU device.
  explicit CharCorpus(std::string text, double train_fraction = 0.9,
                      Device device = Device::cpu(0));

  /// The distinct bytes, sorted: vocabulary()[token] is the byte of `token`.
  const std::string& vocabulary() const { return vocabulary_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  /// Tokens of a split, int64 [n] on the constructor's device.
  const Tensor& tokens(TextSplit split) const { return split == TextSplit::kTrain ? train_ : val_; }
  int64_t size(TextSplit split) const { return tokens(split).numel(); }

  /// Window i of step `step` (above): its first token's index in the split. Throws
  /// std::invalid_argument when the split has no more than `context` tokens.
  int64_t window_start(TextSplit split, int64_t step, int64_t i, int64_t context,
                       uint64_t seed) const;
  /// (inputs, targets), each int64 [batch, context] on `device`: the windows of `step`,
  /// gathered on the tokens' device.
  std::pair<Tensor, Tensor> window_batch(TextSplit split, int64_t step, int64_t batch,
                                         int64_t context, uint64_t seed,
                                         Device device = Device::cpu(0)) const;

  /// Tokens of `text` (std::invalid_argument naming a byte outside the vocabulary), and back.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& tokens) const;

 private:
  std::string vocabulary_;
  int64_t index_of_[256];
  Tensor train_, val_;
};

/// The text of every regular file in `dir` whose name has no '.' (fortunes' text files; not
/// their .dat indices or .u8 links), in name order, concatenated. Throws std::runtime_error
/// naming the directory when it cannot be read or holds no such file, suggesting the package.
std::string read_text_files(const std::string& dir);

/// CharCorpus(read_text_files(dir), 0.9, device): tokens on `device`, a CPU device.
CharCorpus load_char_corpus(const std::string& dir, Device device = Device::cpu(0));

}  // namespace pipewright::data

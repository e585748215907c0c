// A one-line progress bar per epoch and the number formats of the example's output.
//
//   epoch 3/10 [############--------]  281/469 | 10,512 samples/s | loss 0.3127
//
// On a terminal the line is redrawn in place (carriage return); when the output is not a
// terminal (a log file, CI) nothing is drawn, so logs hold only the per-epoch summaries.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace pipewright::examples {

class Progress {
 public:
  /// `enabled` false draws nothing; so does an `out` that is not a terminal's std::cout.
  Progress(std::ostream& out, int epoch, int epochs, int64_t total_steps, bool enabled);
  /// After `step` of total_steps steps, `samples` samples in `seconds`, running mean `loss`.
  void update(int64_t step, int64_t samples, double seconds, double loss);
  /// Clears the bar's line.
  void finish();

 private:
  std::ostream& out_;
  int epoch_;
  int epochs_;
  int64_t total_;
  bool enabled_;
  double last_draw_ = -1;
};

/// 12345.6 -> "12,346".
std::string format_count(double value);
/// 3.14159, 2 -> "3.14".
std::string format_fixed(double value, int decimals);
/// 12,582,912 -> "12.0 MiB".
std::string format_bytes(int64_t bytes);

}  // namespace pipewright::examples

#include "examples/common/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace pipewright::examples {
namespace {
constexpr int kBarWidth = 20;
constexpr double kRedrawSeconds = 0.1;
}  // namespace

Progress::Progress(std::ostream& out, int epoch, int epochs, int64_t total_steps, bool enabled)
    : out_(out),
      epoch_(epoch),
      epochs_(epochs),
      total_(total_steps),
      enabled_(enabled && &out == &std::cout && isatty(STDOUT_FILENO)) {}

void Progress::update(int64_t step, int64_t samples, double seconds, double loss) {
  if (!enabled_ || (seconds - last_draw_ < kRedrawSeconds && step < total_)) return;
  last_draw_ = seconds;
  const int filled = total_ > 0 ? static_cast<int>(kBarWidth * step / total_) : kBarWidth;
  out_ << "\repoch " << epoch_ << "/" << epochs_ << " [" << std::string(filled, '#')
       << std::string(kBarWidth - filled, '-') << "] " << step << "/" << total_ << " | "
       << format_count(seconds > 0 ? static_cast<double>(samples) / seconds : 0) << " samples/s | loss "
       << format_fixed(loss, 4) << std::flush;
}

void Progress::finish() {
  if (enabled_) out_ << "\r\033[K" << std::flush;
}

std::string format_count(double value) {
  std::string digits = std::to_string(static_cast<long long>(std::llround(value)));
  std::string out;
  const size_t first = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return format_fixed(v, u == 0 ? 0 : 1) + " " + units[u];
}

}  // namespace pipewright::examples

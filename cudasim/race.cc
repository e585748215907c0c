#include "cudasim/race.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace cudasim::detail {

void VectorClock::set(size_t stream, uint64_t value) {
  if (stream >= c_.size()) c_.resize(stream + 1, 0);
  c_[stream] = value;
}

void VectorClock::join(const VectorClock& other) {
  if (other.c_.size() > c_.size()) c_.resize(other.c_.size(), 0);
  for (size_t i = 0; i < other.c_.size(); ++i) c_[i] = std::max(c_[i], other.c_[i]);
}

bool VectorClock::leq(const VectorClock& other) const {
  for (size_t i = 0; i < c_.size(); ++i) {
    if (c_[i] > other.get(i)) return false;
  }
  return true;
}

Backtrace Backtrace::capture() {
  Backtrace b;
  b.size = ::backtrace(b.frames, static_cast<int>(sizeof(b.frames) / sizeof(b.frames[0])));
  return b;
}

namespace {

// "binary(mangled+0x1f) [0x...]" -> "demangled+0x1f (binary)".
std::string pretty_frame(const char* raw) {
  std::string line(raw);
  const size_t open = line.find('(');
  const size_t plus = line.find('+', open == std::string::npos ? 0 : open);
  const size_t close = line.find(')', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || close == std::string::npos ||
      plus > close || plus == open + 1) {
    return line;
  }
  const std::string mangled = line.substr(open + 1, plus - open - 1);
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return name + line.substr(plus, close - plus) + "  (" + line.substr(0, open) + ")";
}

}  // namespace

std::string Backtrace::symbolise(int skip) const {
  std::ostringstream out;
  char** symbols = ::backtrace_symbols(frames, size);
  for (int i = skip; i < size; ++i) {
    out << "      #" << (i - skip) << " " << (symbols ? pretty_frame(symbols[i]) : "?") << "\n";
  }
  std::free(symbols);
  return out.str();
}

std::string OpInfo::describe() const {
  std::ostringstream out;
  out << what << "\n    on " << (legacy ? "the legacy default stream" : "stream")
      << " #" << stream_id << " of device " << device << "; issued from:\n"
      << backtrace.symbolise(/*skip=*/3);
  return out.str();
}

namespace {

bool overlaps(const AccessRecord& a, const AccessRecord& b) {
  return a.begin < b.end && b.begin < a.end;
}

std::string range_text(const AccessRecord& a) {
  std::ostringstream out;
  out << (a.write ? "write" : "read") << " of bytes [" << a.begin << ", " << a.end << ")";
  if (a.arg >= 0) out << " (argument " << a.arg << ")";
  return out.str();
}

}  // namespace

std::vector<std::string> RaceDetector::check(uint64_t alloc_id, const std::string& alloc_desc,
                                             const AccessRecord& access,
                                             const VectorClock& vc) const {
  std::vector<std::string> reports;
  auto it = shadow_.find(alloc_id);
  if (it == shadow_.end()) return reports;
  for (const AccessRecord& old : it->second) {
    if (!(old.write || access.write) || !overlaps(old, access)) continue;
    if (old.clock <= vc.get(static_cast<size_t>(old.stream_id))) continue;  // ordered
    std::ostringstream out;
    out << "cudasim: stream race on " << alloc_desc << "\n  this "
        << range_text(access) << " by " << access.op->describe() << "  is not ordered after the "
        << range_text(old) << " by " << old.op->describe()
        << "  (no event wait, legacy-stream barrier or host synchronisation orders them)";
    reports.push_back(out.str());
  }
  return reports;
}

void RaceDetector::record(uint64_t alloc_id, AccessRecord access, const VectorClock& vc) {
  std::vector<AccessRecord>& list = shadow_[alloc_id];
  std::erase_if(list, [&](const AccessRecord& old) {
    const bool ordered = old.clock <= vc.get(static_cast<size_t>(old.stream_id));
    const bool covered = access.begin <= old.begin && old.end <= access.end;
    return ordered && covered && (access.write || !old.write);
  });
  list.push_back(std::move(access));
  if (list.size() > kMaxAccesses) list.erase(list.begin());
}

}  // namespace cudasim::detail

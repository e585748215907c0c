// The stream race detector: vector clocks over streams, shadow state per device allocation.
//
// Note [Race detection]
// ~~~~~~~~~~~~~~~~~~~~~
// A GPU runs the operations of one stream in order and those of different streams in any
// order unless something orders them: an event wait, the legacy default stream's implicit
// barrier, or the host waiting for one stream before it issues work on another. A missing
// order is a bug even when the timing of one run happens to hide it, so the detector does not
// look at timing at all. It works on the *issue order* the host produces, AT ENQUEUE TIME:
//
//   every stream s has a vector clock VC_s, every host thread h has one, VC_h.
//   an op issued on s by h:  VC_s := VC_s ⊔ VC_h ⊔ (barrier clocks) ⊔ (waited event clocks)
//                            VC_s[s] += 1           the op's epoch is (s, VC_s[s])
//   cudaEventRecord(e, s):   e.vc := VC_s (a snapshot; re-recording replaces it)
//   cudaStreamWaitEvent(t,e):the next op of t joins e.vc
//   legacy stream op on d:   joins VC of every blocking stream of d     (and vice versa)
//   host sync on s / e / d:  VC_h := VC_h ⊔ VC_s  (what the host waited for is done)
//
//         stream A:  write X (A,1) ── record e ──────────────────────────────────────
//                                          ╲ e.vc = {A:2}
//         stream B:  ─────────────── wait e ─ read X: VC_B ⊒ {A:2}, (A,1) ≤ VC_B[A] → ordered
//         stream C:  ─────────────────────────── read X: VC_C[A] = 0 < 1 → RACE with (A,1)
//
// Each allocation keeps its recent accesses {epoch, byte range, read/write, site}. A new
// access conflicts with an earlier one when the ranges overlap, at least one writes, and the
// earlier epoch (s', c') is not ordered before the new op: c' > VC_new[s']. Earlier accesses
// dominated by a new one (ordered before it, range covered, and the new one writes or the old
// one only reads) are pruned: any future access racing with the old one races with the new
// one too. A list is bounded (kMaxAccesses per allocation, oldest dropped), which can only
// miss races, never invent them. A fresh cudaMalloc starts with an empty shadow.
//
// Because clocks advance when work is *issued*, a report is deterministic: the same program
// gives the same reports whatever the threads' timing (chaos mode changes nothing here).
// Limits: host threads are ordered with each other only through CUDA (events, syncs); a
// hand-off between host threads through a mutex or queue after a stream sync is not seen, so
// the receiving thread must order its stream itself (event wait) — which real code needs
// anyway to be correct without that sync. Accesses inside one kernel are not checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cudasim::detail {

/// Stream ids are dense small integers; component i is stream i's clock.
class VectorClock {
 public:
  uint64_t get(size_t stream) const { return stream < c_.size() ? c_[stream] : 0; }
  void set(size_t stream, uint64_t value);
  void join(const VectorClock& other);
  /// True when every component of *this is <= other's.
  bool leq(const VectorClock& other) const;

 private:
  std::vector<uint64_t> c_;
};

/// A host backtrace captured cheaply at enqueue; symbolised only when a report needs it.
struct Backtrace {
  void* frames[24];
  int size = 0;
  static Backtrace capture();
  std::string symbolise(int skip) const;
};

/// What an access came from, for reports: "kernel foo<<<...>>> at a.cu:12", stream, device.
struct OpInfo {
  std::string what;  // includes file:line when known
  int stream_id = 0;
  int device = 0;
  bool legacy = false;
  Backtrace backtrace;
  std::string describe() const;  // multi-line, with the symbolised backtrace
};

struct AccessRecord {
  int stream_id;
  uint64_t clock;
  size_t begin, end;  // byte offsets inside the allocation
  bool write;
  int arg;  // kernel argument index or -1
  std::shared_ptr<const OpInfo> op;
};

/// The shadow state of all allocations. Not thread-safe: the runtime holds its lock.
class RaceDetector {
 public:
  static constexpr size_t kMaxAccesses = 64;

  /// Returns a report per earlier access of allocation `alloc_id` that the access
  /// [begin, end) on `stream_id` with clock `vc` conflicts with (empty: no race). Changes
  /// nothing.
  std::vector<std::string> check(uint64_t alloc_id, const std::string& alloc_desc,
                                 const AccessRecord& access, const VectorClock& vc) const;

  /// Adds the access to the allocation's shadow and prunes what it dominates.
  void record(uint64_t alloc_id, AccessRecord access, const VectorClock& vc);

  /// Forgets an allocation (freed or fresh).
  void forget(uint64_t alloc_id) { shadow_.erase(alloc_id); }

 private:
  std::map<uint64_t, std::vector<AccessRecord>> shadow_;
};

}  // namespace cudasim::detail

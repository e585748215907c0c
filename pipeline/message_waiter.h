// MessageWaiter: how a pipeline worker waits for its messages, in one place for the runtime
// (Runtime::receive) and the planner's wake-up probe (planner/runtime_overhead.cc), so that the
// probe measures the waits a step makes.
//
// Note [Waiting for a message due soon] (channel.h) says why a receiver waits for a message
// as for one due at a time it knows, and how (Channel::pop(expected, lead)). The waiter's half:
// it remembers, per message key, how long after its call the message came the last time, and
// waits for the next one under that key as due that long after the call, spinning kDueLead on
// each side; an unknown key, a core shared with other work (Note [A core shared with other
// work], tensor/threads.h: SharedCoreWatch) or PIPEWRIGHT_SPIN_US=0 (Note [Waiting without
// burning a core], tensor/parallel.h) makes it sleep instead. The first step sleeps in every
// wait; a schedule that changes between steps finds some keys unknown or mistimed, which
// costs a spin of at most 2 x kDueLead. A worker whose core is shared (its thread waited for a
// CPU over 10 % of the time it was runnable in its last 50 ms window) sleeps in every wait
// until a later window finds the core free: spinning beside a busy process spends the
// worker's share of the core, and the main job ran 8 % slower beside one with it
// (docs/BENCHMARKS.md, "Waiting for a message due soon"). One per waiting thread, touched
// only there.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>

#include "pipeline/channel.h"
#include "tensor/parallel.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {

template <class Key>
class MessageWaiter {
 public:
  using Duration = std::chrono::steady_clock::duration;

  /// How to wait for one message: due `expected` after the call (negative: unknown), spinning
  /// `lead` on each side of that (zero: sleep until it comes). Channel::pop(expected, lead)'s
  /// arguments; RecvTiming's inputs. `last` is the key's slot, for arrived().
  struct Wait {
    Duration expected = Duration(-1);
    Duration lead = Duration::zero();
    Duration* last = nullptr;
  };

  /// How to wait for the next message under `key` (file comment): one map lookup per message.
  Wait wait_for(const Key& key) {
    Duration& last = last_.try_emplace(key, Duration(-1)).first->second;  // -1: none came yet
    Wait wait{.last = &last};
    if (!core_.shared() && spin_microseconds() > 0) {
      wait.expected = last;
      wait.lead = kDueLead;
    }
    return wait;
  }

  /// The message `wait` was for came `after_call` after the call (zero or less: it was there).
  void arrived(const Wait& wait, Duration after_call) {
    *wait.last = std::max(after_call, Duration::zero());
  }

  /// Whether the waiting thread's core is shared, from its scheduler times
  /// (SharedCoreWatch::update): call from that thread between waits, e.g. after each step.
  void watch_core() { core_.update(); }

 private:
  std::map<Key, Duration> last_;
  SharedCoreWatch core_;
};

}  // namespace pipewright::pipeline

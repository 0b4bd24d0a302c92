// A team: the threads of one OpenMP parallel region that work through a
// whole decode step together, synchronising with a spin barrier instead of
// opening a region (or an OpenMP barrier) per operation.
//
// Why: under OMP_WAIT_POLICY=passive (kvserve's default, right for shared
// machines) every region start and every OpenMP barrier puts the other
// threads to sleep on a futex and wakes them again. A decode step of a
// quantized model opened 41 regions and ran 2.9x slower passive than
// spinning (bench/decode_bench). With one region per step the threads wake
// once per step, and between the step's operations they spin briefly
// (yielding the core if a peer is descheduled), so the passive default
// costs what spinning costs within a step and nothing between steps.
//
// Thread-safety: a Team is shared by the threads of one region; Sync is
// called by every member the same number of times.
#ifndef KVSERVE_CORE_UTIL_TEAM_H_
#define KVSERVE_CORE_UTIL_TEAM_H_

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace kvserve {

class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}

  // Returns when all n threads have called Wait (the i-th time).
  void Wait() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int i = 0; generation_.load(std::memory_order_acquire) == gen; ++i) {
      if (i < kSpins) {
        __builtin_ia32_pause();
      } else {
        sched_yield();  // a peer may be descheduled: give it the core
      }
    }
  }

 private:
  // ~10-50 µs of pause before yielding.
  static constexpr int kSpins = 4096;
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
};

struct Team {
  int tid = 0;
  int size = 1;
  SpinBarrier* barrier = nullptr;

  void Sync() const {
    if (size > 1) barrier->Wait();
  }
  bool leader() const { return tid == 0; }
  // This member's share [begin, end) of n items, in multiples of `align`.
  void Share(int64_t n, int64_t align, int64_t* begin, int64_t* end) const {
    const int64_t per = (n + size - 1) / size;
    const int64_t step = (per + align - 1) / align * align;
    *begin = tid * step < n ? tid * step : n;
    *end = *begin + step < n ? *begin + step : n;
  }
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_TEAM_H_

// EngineObserver: how the engine reports what it does (the server turns it
// into Prometheus metrics). Called on the engine thread; must not block.
#ifndef KVSERVE_CORE_ENGINE_ENGINE_OBSERVER_H_
#define KVSERVE_CORE_ENGINE_ENGINE_OBSERVER_H_

#include <cstdint>
#include <string_view>

namespace kvserve {

// A snapshot of the engine's state. KV blocks are used, cached or free
// (BlockPool): used + cached + free is the pool's block count.
struct EngineStats {
  int64_t kv_used_bytes = 0;      // of the used blocks
  int64_t kv_capacity_bytes = 0;  // of all blocks
  int64_t kv_blocks_used = 0;     // held by sequences (refcount > 0)
  int64_t kv_blocks_free = 0;     // holding nothing
  int64_t kv_blocks_cached = 0;   // unheld, kept for prefix reuse; reclaimable
  int64_t kv_blocks_shared = 0;   // used by more than one sequence
  // Cumulative since start, in tokens: prompt positions looked up in the
  // prefix cache, and those whose blocks it had (PrefixCache).
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t sessions_ram = 0;     // KV held in the pool
  int64_t sessions_disk = 0;    // KV in a snapshot file; restored on use
  int64_t sessions_tokens = 0;  // tokens only; re-prefilled on next use
  int64_t running = 0;
  int64_t waiting = 0;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(int64_t batch_tokens, int64_t batch_sequences,
                      double seconds) = 0;
  virtual void OnQueueWait(double seconds) = 0;
  virtual void OnFirstToken(double seconds_since_submit) = 0;
  virtual void OnInterToken(double seconds) = 0;
  virtual void OnPrompt(int64_t prompt_tokens, int64_t cached_tokens) = 0;
  virtual void OnGenerated(int64_t tokens) = 0;
  // reason: "ttl", "memory", "deleted".
  virtual void OnEviction(std::string_view reason) = 0;
  // A running sequence gave up its KV blocks to make room; it will be
  // recomputed from its tokens.
  virtual void OnPreemption() = 0;
  // A session log read from disk was damaged (a torn or corrupt record or
  // header); what could be replayed was kept and the log is rewritten.
  virtual void OnSessionLogRecovered() = 0;
  virtual void OnStats(const EngineStats& stats) = 0;
  // Something went wrong that no request is waiting to hear about (a
  // session file that could not be written or read).
  virtual void OnWarning(std::string_view message) = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_ENGINE_OBSERVER_H_

// The KV cache budget when --kv_cache_bytes is not given, and the warnings
// for one that is.
//
// Default rule, in bytes (bytes_per_token = 2 * n_layers * n_kv_heads *
// head_dim * sizeof(kv dtype)):
//
//   budget = max(min(8 full contexts, free memory / 2),
//                max_running blocks)
//
// - 8 full contexts (8 * max_context tokens): several long conversations
//   keep their KV between turns. Enough for a small model; for a large one
//   (Llama-3.1-8B at 128k tokens: 256 GiB in f32) more than most machines.
// - free memory / 2: `free` is MemAvailable (/proc/meminfo), or, when the
//   process's cgroup has a memory limit, the limit minus the cgroup's usage
//   if that is less. Read after the weights are loaded, so they are already
//   counted; the other half is left for activations, page cache, snapshot
//   writes and the rest of the machine.
// - never below one block per sequence that may run at once
//   (--max_running), so every admitted sequence can start even on a
//   machine with very little memory.
// When the memory cannot be read the budget is 8 full contexts.
#ifndef KVSERVE_SERVER_KV_BUDGET_H_
#define KVSERVE_SERVER_KV_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvserve {

// What the machine lets this process still allocate.
struct MachineMemory {
  std::optional<int64_t> available_bytes;     // MemAvailable; empty: unknown
  std::optional<int64_t> cgroup_limit_bytes;  // empty: no limit (or unknown)
  int64_t cgroup_usage_bytes = 0;             // with a limit: memory charged
  std::string cgroup_limit_file;              // where the limit was read

  // min(available, limit - usage) of the values known; empty: none known.
  std::optional<int64_t> FreeBytes() const;
  // "MemAvailable" or "the cgroup limit in FILE minus its usage".
  std::string FreeSource() const;
};

// Reads <root>/proc/meminfo and the process's cgroup memory limit: cgroup
// v2 memory.max and memory.current, or v1 memory.limit_in_bytes and
// memory.usage_in_bytes; the process's own cgroup (/proc/self/cgroup) when
// its directory is visible, else the hierarchy's root (which is the
// container's own cgroup inside a container). `root` is empty in
// production; tests point it at a fake tree.
MachineMemory ReadMachineMemory(const std::string& root = "");

// The KV geometry the budget is sized for.
struct KvCacheShape {
  int64_t bytes_per_token = 0;  // K+V, all layers
  int64_t max_context = 0;      // tokens of the longest session
  int64_t block_tokens = 0;     // tokens per KV block
  int64_t max_running = 0;      // sequences decoding together
};

struct KvCacheBudget {
  int64_t bytes = 0;
  std::string explanation;  // how it was chosen, one line for the log
};

// The default budget (rule above). REQUIRES: every field of `shape` > 0.
KvCacheBudget DefaultKvCacheBudget(const KvCacheShape& shape,
                                   const MachineMemory& memory);

// An explicit --kv_cache_bytes=`bytes`, described for the log.
KvCacheBudget ExplicitKvCacheBudget(int64_t bytes, const KvCacheShape& shape);

// Warnings for a budget (explicit or default): less than one full context
// (sessions longer than the budget cannot be served), or more than the free
// memory. Empty when neither applies.
std::vector<std::string> KvCacheBudgetWarnings(int64_t bytes,
                                               const KvCacheShape& shape,
                                               const MachineMemory& memory);

// "16.0 GiB", "512.0 MiB", "4.0 KiB", "100 bytes".
std::string HumanBytes(int64_t bytes);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_KV_BUDGET_H_

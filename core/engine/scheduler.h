// Scheduler: decides what each engine step computes; the engine executes.
//
// Sequences wait in `waiting_` (queued order) until Admit() moves them into
// `running_` (at most max_running), where each step carries one decode
// token of every decoding sequence plus prefill chunks in admission order,
// up to max_batch_tokens. While sequences decode, prefill chunks are sized
// from measured step costs so that a step takes at most max_step_slowdown
// times a decode-only step while one prompt waits, and each further waiting
// prompt adds as much again (PrefillBudget). Before a sequence computes
// anything its history is matched against the prefix cache (and, for a spilled
// session, its KV snapshot), so only the uncached tail is prefilled.
//
// KV for a chunk is reserved when it is planned. When the pool is full,
// cached-but-unused blocks go first (the pool hands them out), then the
// least recently used idle session is spilled, and only then the most
// recently admitted running sequence is preempted: it gives up its blocks
// and waits again, to be recomputed from its tokens.
//
// A step is: Plan() -> Model::Forward(plan.batch) -> the engine samples and
// emits, marking the sequences that finish -> Retire(plan, result), which
// hands back every sequence that is done.
//
// Thread-safety: not thread-safe; owned by the engine thread.
#ifndef KVSERVE_CORE_ENGINE_SCHEDULER_H_
#define KVSERVE_CORE_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/engine/engine_observer.h"
#include "core/engine/sequence.h"
#include "core/kv/block_pool.h"
#include "core/kv/prefix_cache.h"
#include "core/model/model.h"
#include "core/session/session_tiers.h"

namespace kvserve {

struct SchedulerOptions {
  int max_batch_tokens = 512;
  int max_running = 64;
  // 0: prefill always fills max_batch_tokens.
  double max_step_slowdown = 2.0;
};

// The next step: batch[i] is a chunk of seqs[i]. Decode tokens come first.
struct StepPlan {
  std::vector<SeqChunk> batch;
  std::vector<Sequence*> seqs;
  int64_t decode_tokens = 0;  // chunks of one token of a decoding sequence
  int64_t tokens = 0;         // all positions in the batch
};

struct StepResult {
  absl::Status forward;  // OK, or why Model::Forward failed
  double seconds = 0;    // the forward pass's wall time
};

class Scheduler {
 public:
  // REQUIRES: every pointer outlives the scheduler; observer may be null.
  Scheduler(const SchedulerOptions& options, BlockPool* pool,
            PrefixCache* prefix_cache, SessionTiers* tiers,
            EngineObserver* observer);

  // Queues a sequence; nothing is reserved or computed yet.
  void Enqueue(std::unique_ptr<Sequence> seq);
  // Queues a sequence that started elsewhere (a choice forked from one that
  // runs) ahead of those not admitted yet.
  void EnqueueStarted(std::unique_ptr<Sequence> seq);

  // Admission: moves waiting sequences into the running set while there is
  // room; a sequence admitted for the first time gets its cached prefix
  // (prefix cache, KV snapshot) and its usage's prompt counts, and its call
  // leaves the request queue (GenerateCall::LeaveQueue).
  void Admit();

  // Removes cancelled sequences (marking them finished) and plans the next
  // step, reserving its KV. A context the whole pool cannot hold is marked
  // failed. An empty batch means nothing can run now.
  StepPlan Plan();

  // Applies what happened: on success registers the computed blocks with
  // the prefix cache and learns the step's cost; on failure every sequence
  // of the batch fails with the forward's status and keeps only KV that was
  // valid before the step. Returns the sequences that are done (finished()
  // is true; an Append that prefilled all of its input finishes with
  // kLength); preempted ones wait again.
  std::vector<std::unique_ptr<Sequence>> Retire(const StepPlan& plan,
                                                const StepResult& result);

  // Every sequence, running first, for a shutdown; the scheduler is empty
  // afterwards.
  std::vector<std::unique_ptr<Sequence>> TakeAll();

  int64_t num_waiting() const { return waiting_.size(); }
  int64_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }

  // Prefill tokens a step may carry beside `decode_tokens` decode tokens
  // while `prefilling` sequences wait for their prompts: each of them is
  // allowed the slowdown one long prompt is (max_step_slowdown − 1 decode
  // steps' time), so a burst of prompts is not prefilled one small chunk
  // at a time while the first of them decodes.
  int64_t PrefillBudget(int64_t decode_tokens, int64_t prefilling = 1) const;

 private:
  // Adopts cached blocks holding the sequence's next tokens; returns how
  // many positions it adopted. `retry`: the prompt was looked up before.
  int64_t MatchPrefix(Sequence& seq, bool retry);
  // Brings a spilled session's KV back from its snapshot, if it matches:
  // the positions past the blocks MatchPrefix adopted.
  void RestoreSnapshot(Sequence& seq);
  // Makes KV positions [.., end) of seq writable, spilling idle sessions
  // and then preempting running sequences as needed. ABORTED when seq
  // itself was preempted; RESOURCE_EXHAUSTED when nothing could be freed.
  absl::Status ReserveKv(Sequence& seq, int64_t end);
  void LearnStepCost(int64_t decode_tokens, int64_t tokens, double seconds);

  const SchedulerOptions options_;
  BlockPool* const pool_;
  PrefixCache* const prefix_cache_;
  SessionTiers* const tiers_;
  EngineObserver* const observer_;

  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::deque<std::unique_ptr<Sequence>> running_;  // admission order
  static constexpr int64_t kProbePrefillChunk = 8;
  double decode_step_seconds_ = 0;    // moving average, decode-only steps
  double prefill_token_seconds_ = 0;  // moving average, per prefill token
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_SCHEDULER_H_

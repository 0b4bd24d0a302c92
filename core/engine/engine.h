// Engine: the one thread that owns the model, the KV pool, the session store
// and the running batch.
//
// RPC threads call the public methods, which only enqueue (bounded) and
// return; results come back through callbacks and TokenSinks on the engine
// thread. Each step the engine runs queued commands, admits waiting
// requests, builds one batch (a decode token from every running sequence
// plus prefill chunks up to max_batch_tokens), runs one forward pass,
// samples and streams.
//
// Thread-safety: public methods are thread-safe. Callbacks run on the engine
// thread and must not block.
#ifndef KVSERVE_CORE_ENGINE_ENGINE_H_
#define KVSERVE_CORE_ENGINE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/engine/engine_observer.h"
#include "core/engine/requests.h"
#include "core/kv/block_pool.h"
#include "core/kv/prefix_cache.h"
#include "core/model/model.h"
#include "core/session/kv_snapshot.h"
#include "core/session/session_dir.h"
#include "core/session/session_store.h"
#include "core/tokenizer/tokenizer.h"

namespace kvserve {

struct EngineOptions {
  int64_t kv_cache_bytes = 0;  // 0: room for 8 full contexts
  DType kv_dtype = DType::kF32;
  int kv_block_tokens = BlockPoolOptions().block_tokens;
  int max_context = 0;  // 0: the model's context length
  int max_batch_tokens = 512;
  // While sequences decode, prefill chunks are sized (from measured step
  // costs) so that a step takes at most this many times a decode-only step;
  // 0: prefill always fills max_batch_tokens.
  double max_step_slowdown = 2.0;
  int max_running = 64;
  int max_queued_requests = 256;
  int threads = 0;  // OpenMP threads of the engine thread; 0: all cores
  int default_max_tokens = 256;
  // Sessions' histories and KV snapshots are kept here (created if
  // missing); empty: sessions live in memory only.
  std::string session_dir;
};

template <typename T>
using Callback = absl::AnyInvocable<void(absl::StatusOr<T>) &&>;

struct CreateSessionParams {
  // The new session's id: 32 lowercase hex digits; empty: one is made up.
  std::string id;
  std::string owner;
  std::optional<absl::Duration> ttl;
  Input initial;  // prefilled after BOS; empty text: nothing
};

class Engine {
 public:
  // REQUIRES: weights, tokenizer and observer (may be null) outlive the
  // engine. Starts the engine thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const EngineOptions& options, const ModelWeights* weights,
      const Tokenizer* tokenizer, EngineObserver* observer);
  // Stops the thread; pending requests finish with UNAVAILABLE.
  ~Engine();

  // Generate or Append. The call's sink receives the output. Fails at once
  // (through the sink) with RESOURCE_EXHAUSTED when the queue is full.
  void Submit(std::shared_ptr<GenerateCall> call);

  void CreateSession(CreateSessionParams params, Callback<SessionInfo> done);
  void GetSession(std::string id, std::string owner, bool include_tokens,
                  Callback<SessionInfo> done);
  void ListSessions(std::string owner, std::string page_token, int page_size,
                    Callback<SessionList> done);
  void DeleteSession(std::string id, std::string owner, Callback<bool> done);
  void ForkSession(std::string id, std::string owner,
                   std::optional<absl::Duration> ttl,
                   Callback<SessionInfo> done);
  void TruncateSession(std::string id, std::string owner, int64_t tokens,
                       Callback<SessionInfo> done);

  // Stops admitting work: later calls fail with UNAVAILABLE; running and
  // queued requests go on to the end.
  void Drain();

  const ModelConfig& config() const { return weights_->config; }
  int max_context() const { return max_context_; }
  int64_t kv_bytes_per_token() const;
  int64_t kv_capacity_bytes() const;
  const EngineOptions& options() const { return options_; }

 private:
  struct Sequence;
  Engine(const EngineOptions& options, const ModelWeights* weights,
         const Tokenizer* tokenizer, EngineObserver* observer);

  // Runs `command` with OK on the engine thread, or at once with
  // UNAVAILABLE when the engine no longer accepts work.
  void Post(absl::AnyInvocable<void(absl::Status) &&> command);
  // Runs `body` on the engine thread and hands its result to `done`.
  template <typename T, typename Body>
  void Reply(Callback<T> done, Body body) {
    Post([done = std::move(done),
          body = std::move(body)](absl::Status accepted) mutable {
      if (!accepted.ok()) return std::move(done)(accepted);
      std::move(done)(body());
    });
  }

  void Loop();
  void Admit(std::shared_ptr<GenerateCall> call, absl::Time submitted);
  void StartWaiting();
  void Step();
  // Adopts cached blocks holding the sequence's next tokens; returns how
  // many positions it adopted.
  int64_t MatchPrefix(Sequence& seq);
  // Prefill tokens a step may carry beside `decode_tokens` decode tokens.
  int64_t PrefillBudget(int64_t decode_tokens) const;
  // Updates the step-cost averages PrefillBudget uses.
  void LearnStepCost(int64_t decode_tokens, int64_t tokens, double seconds);
  // As FindSession; FAILED_PRECONDITION while a request runs on it.
  absl::StatusOr<Session*> FindIdleSession(std::string_view id,
                                           std::string_view owner);
  // A session in memory, or loaded from the session directory.
  absl::StatusOr<Session*> FindSession(std::string_view id,
                                       std::string_view owner);
  static std::string_view TierOf(const Session& s);
  // Re-reads a session's log that another process appended to.
  void Reload(Session& s);
  void Warn(std::string_view message);
  // Session files (no-ops without a session directory).
  absl::Status StartLog(Session& s);
  void SyncLog(Session& s);
  absl::Status TruncateLog(Session& s);
  void RemoveFiles(std::string_view id);
  void WriteSnapshot(Session& s);
  // Frees an idle session's blocks, snapshotting them first when durable.
  void Spill(Session& s);
  // Brings a spilled session's KV back from its snapshot, if it matches.
  void RestoreSnapshot(Sequence& seq);
  absl::Status ReserveKv(Sequence& seq, int64_t end);
  void EmitToken(Sequence& seq, int32_t token, absl::Span<const float> logits);
  void Finish(Sequence& seq, absl::StatusOr<FinishReason> reason);
  void ReportStats();
  SessionInfo Describe(const Session& s, bool include_tokens) const;

  const EngineOptions options_;
  const ModelWeights* const weights_;
  const Tokenizer* const tokenizer_;
  EngineObserver* const observer_;
  int max_context_ = 0;

  // Owned by the engine thread.
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::unique_ptr<SessionDir> session_dir_;  // null without --session_dir
  KvSnapshotKey snapshot_key_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::deque<std::unique_ptr<Sequence>> running_;  // admission order
  absl::Time next_expiry_check_;
  absl::Time next_stats_;
  static constexpr int64_t kProbePrefillChunk = 8;
  double decode_step_seconds_ = 0;    // moving average, decode-only steps
  double prefill_token_seconds_ = 0;  // moving average, per prefill token

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> commands_ ABSL_GUARDED_BY(mu_);
  int queued_requests_ ABSL_GUARDED_BY(mu_) = 0;  // Submit()s not yet run
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool has_work_ ABSL_GUARDED_BY(mu_) = false;  // sequences to step

  std::thread thread_;
};

std::string_view FinishReasonName(FinishReason reason);

// INVALID_ARGUMENT naming the field for a Generate's max_tokens, sampling or
// logprobs out of range (an Append has none to check).
absl::Status ValidateGenerateParams(const GenerateParams& params);

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_ENGINE_H_

// Engine: the one thread that owns the model, the KV pool, the session store
// and the running batch.
//
// RPC threads call the public methods, which only enqueue (bounded) and
// return; results come back through callbacks and TokenSinks on the engine
// thread. Each turn of the loop runs queued commands, hands new requests to
// the Scheduler, which admits and plans a step; the engine runs the step's
// forward pass, samples and streams, and the scheduler retires the step.
// Session files are written by SessionTiers' writer thread; replies that
// depend on a write wait for it, the engine thread never does.
//
// Thread-safety: public methods are thread-safe. Callbacks run on the engine
// thread and must not block.
#ifndef KVSERVE_CORE_ENGINE_ENGINE_H_
#define KVSERVE_CORE_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/chat/chat_prompt.h"
#include "core/chat/chat_template.h"
#include "core/constrain/tool_calls.h"
#include "core/engine/engine_observer.h"
#include "core/engine/prep_worker.h"
#include "core/engine/requests.h"
#include "core/engine/scheduler.h"
#include "core/engine/sequence.h"
#include "core/kv/block_pool.h"
#include "core/kv/prefix_cache.h"
#include "core/model/model.h"
#include "core/session/session_store.h"
#include "core/session/session_tiers.h"
#include "core/tokenizer/tokenizer.h"

namespace kvserve {

struct EngineOptions {
  int64_t kv_cache_bytes = 0;  // 0: room for 8 full contexts
  DType kv_dtype = DType::kF32;
  int kv_block_tokens = BlockPoolOptions().block_tokens;
  int max_context = 0;  // 0: the model's context length
  int max_batch_tokens = 512;
  // ModelOptions::llama_order (llama.cpp's values to the bit; f32 KV
  // caches only).
  bool llama_order = false;
  // While sequences decode, prefill chunks are sized (from measured step
  // costs) so that a step takes at most this many times a decode-only step;
  // 0: prefill always fills max_batch_tokens.
  double max_step_slowdown = 2.0;
  int max_running = 64;
  int max_queued_requests = 256;
  int threads = 0;  // OpenMP threads of the engine thread; 0: all cores
  int default_max_tokens = 256;
  // Text bytes of a request's prompt (text, or a chat turn's messages and
  // tools); 0: kPromptBytesPerToken per token of the context.
  int64_t max_prompt_bytes = 0;
  // Sessions (ephemeral ones not counted), in all and per owner; 0: no
  // limit of its own (max_sessions_per_owner is then max_sessions).
  int max_sessions = 10000;
  int max_sessions_per_owner = 0;
  // A session created without a TTL gets this one; unset: none.
  std::optional<absl::Duration> default_ttl;
  // Quota on the session directory's bytes (SessionTiersOptions); 0: none.
  int64_t session_dir_max_bytes = 0;
  // Sessions' histories and KV snapshots are kept here (created if
  // missing); empty: sessions live in memory only.
  std::string session_dir;
  // Renders chat turns (must outlive the engine); null: ChatML.
  const ChatTemplate* chat_template = nullptr;
};

// The default --max_prompt_bytes: no tokenizer makes tokens of fewer than
// a byte, so this holds any prompt that fits the context four times over.
inline constexpr int64_t kPromptBytesPerToken = 32;

template <typename T>
using Callback = absl::AnyInvocable<void(absl::StatusOr<T>) &&>;

struct CreateSessionParams {
  // The new session's id: 32 lowercase hex digits; empty: one is made up.
  std::string id;
  std::string owner;
  std::optional<absl::Duration> ttl;
  Input initial;               // prefilled after BOS; empty text: nothing
  bool parse_special = false;  // text only (GenerateParams::parse_special)
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
  // Sessions of `owner`; of every owner when all_owners (an admin).
  void ListSessions(std::string owner, bool all_owners, std::string page_token,
                    int page_size, Callback<SessionList> done);
  void DeleteSession(std::string id, std::string owner, Callback<bool> done);
  void ForkSession(std::string id, std::string owner,
                   std::optional<absl::Duration> ttl,
                   Callback<SessionInfo> done);
  void TruncateSession(std::string id, std::string owner, int64_t tokens,
                       Callback<SessionInfo> done);

  // Stops admitting work: later calls fail with UNAVAILABLE; running and
  // queued requests go on to the end.
  void Drain();

  // The served chat template's rendering of `input` and its tokens, as a
  // chat turn would be rendered, after the --max_prompt_bytes check a turn
  // gets (gRPC ApplyChatTemplate, HTTP /apply-template). Thread-safe.
  absl::StatusOr<ChatPrompt> ApplyChatTemplate(
      const ChatTemplateInput& input) const;

  const ModelConfig& config() const { return weights_->config; }
  int max_context() const { return max_context_; }
  int64_t kv_bytes_per_token() const;
  int64_t kv_capacity_bytes() const;
  const EngineOptions& options() const { return options_; }
  // How the chat template's replies carry tool calls and reasoning.
  const constrain::ReplyFormat& reply_format() const { return reply_format_; }
  // `input` as rendered: with tools that the template does not show the
  // model, they are shown in a system message (constrain::
  // GenericToolPrompt; the first user message's start for a template that
  // refuses system messages). Thread-safe.
  ChatTemplateInput WithToolPrompt(ChatTemplateInput input) const;

 private:
  Engine(const EngineOptions& options, const ModelWeights* weights,
         const Tokenizer* tokenizer, EngineObserver* observer);

  // Runs `command` with OK on the engine thread, or at once with
  // UNAVAILABLE when the engine no longer accepts work.
  void Post(absl::AnyInvocable<void(absl::Status) &&> command);
  // Runs `task` on the engine thread: now when called there, else queued
  // (also while draining: it finishes work already accepted).
  void RunOnEngineThread(absl::AnyInvocable<void() &&> task);
  // Runs `body` on the engine thread and hands its result to `done`.
  template <typename T, typename Body>
  void Reply(Callback<T> done, Body body) {
    Post([done = std::move(done),
          body = std::move(body)](absl::Status accepted) mutable {
      if (!accepted.ok()) return std::move(done)(accepted);
      std::move(done)(body());
    });
  }

  // Starts a new session's log (SessionTiers::StartLog) and replies with
  // the session once it is on disk; a session whose log cannot be written
  // is deleted (UNAVAILABLE naming why).
  void StartSessionLog(Session& s, Callback<SessionInfo> done);
  // A tiers' Done that runs `then` on the engine thread.
  SessionTiers::Done OnEngineThread(
      absl::AnyInvocable<void(absl::Status) &&> then);

  void Loop();
  // Runs the commands queued (without waiting for more).
  void RunQueuedCommands();
  // RESOURCE_EXHAUSTED when --max_queued_requests wait; UNAVAILABLE when
  // draining. REQUIRES: mu_ held.
  absl::Status QueueStatusLocked() const;
  // INVALID_ARGUMENT naming --max_prompt_bytes for a prompt above it: its
  // text, or a conversation's (every message's fields and the tools).
  // Thread-safe: the limit is constant after construction.
  absl::Status CheckPromptBytes(const Input& input) const;
  absl::Status CheckChatBytes(const std::vector<ChatMessage>& messages,
                              std::string_view tools_json) const;
  // RESOURCE_EXHAUSTED when a new session of `owner` would pass
  // --max_sessions or --max_sessions_per_owner.
  absl::Status CheckSessionLimits(std::string_view owner);

  // A place in the request queue (--max_queued_requests): taken when a
  // request is accepted, held by its GenerateCall (HoldQueuePlace) wherever
  // it is (submitted_, the prep thread, the scheduler's queue) and given
  // back when it is first admitted or ends. The queue's length is the
  // number of places held (queued_). REQUIRES: mu_ held and
  // QueueStatusLocked() ok.
  std::shared_ptr<void> TakeQueuePlaceLocked();

  // A Submit() the engine thread has not taken yet.
  struct Submitted {
    std::shared_ptr<GenerateCall> call;
    absl::Time time;
  };
  // A request's input on its way to the prep thread.
  struct PrepTask {
    std::shared_ptr<GenerateCall> call;
    std::string session_id;
    absl::Time submitted;
    bool fresh = false;          // the session is empty: BOS, dummy prefix
    ChatTemplateInput render{};  // a chat turn: the whole conversation
  };
  // Resolves the call's session and marks it busy; its text is tokenized
  // (or its conversation rendered) on the prep thread, then Continue runs.
  void Enqueue(Submitted submitted);
  // On the prep thread: the text's tokens, or the whole rendering's.
  absl::StatusOr<std::vector<int32_t>> Prepare(const PrepTask& task) const;
  // Appends the turn's input to the session's history and queues it with
  // the scheduler (or finishes it with the reason it cannot run).
  void Continue(std::shared_ptr<GenerateCall> call,
                const std::string& session_id, absl::Time submitted,
                absl::StatusOr<std::vector<int32_t>> prepared);
  // One step: plan, forward, sample and emit, retire.
  void Step();
  // Forks the choices of `first` (GenerateCall::AddChoice) from its session
  // once its prompt's last `logits` are computed, and samples each one's
  // first token from them (engine_choices.cc).
  void ForkChoices(Sequence& first, absl::Span<const float> logits);
  // Appends a sampled token to the history and streams it; returns how the
  // sequence ends, if this token ends it.
  std::optional<FinishReason> EmitToken(Sequence& seq, int32_t token,
                                        absl::Span<const float> logits);
  // Logs the turn, then (once it is on disk) tells the sink. A turn that
  // failed, or whose log write failed, is rolled back first.
  void Finish(std::unique_ptr<Sequence> seq);
  // Keeps the first n tokens of the history and their KV.
  static void RollBack(Session& s, int64_t n);
  // Puts the session back as it was before the sequence's turn: history
  // (the tokens a chat turn replaced included) and conversation.
  static void Undo(Session& s, const Sequence& seq);
  // Marks the session idle and makes the sequence's result.
  absl::StatusOr<GenerateResult> Result(const Sequence& seq, Session& s);
  void ReportStats();
  SessionInfo Describe(const Session& s, bool include_tokens) const;
  void Warn(std::string_view message);

  const EngineOptions options_;
  const ModelWeights* const weights_;
  const Tokenizer* const tokenizer_;
  EngineObserver* const observer_;
  // Queue places held (TakeQueuePlaceLocked); first, so that it outlives
  // every member that may hold a place.
  std::atomic<int64_t> queued_{0};
  int max_context_ = 0;
  int64_t max_prompt_bytes_ = 0;
  std::unique_ptr<PrepWorker> prep_;
  bool stopped_ = false;                  // the loop ended (engine thread)
  std::unique_ptr<ChatTemplate> chatml_;  // when options_ has no template
  const ChatTemplate* chat_template_ = nullptr;
  constrain::ReplyFormat reply_format_;
  bool template_takes_system_ = true;  // renders a system message
  // Constrained decoding's vocabulary (built once) and grammars in use.
  std::unique_ptr<constrain::MatcherCache> matchers_;

  // Owned by the engine thread (declared in destruction order: the tiers
  // finish their writes before the store and the pool go).
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::unique_ptr<SessionTiers> tiers_;
  std::unique_ptr<Scheduler> scheduler_;
  absl::Time next_expiry_check_;
  absl::Time next_stats_;

  // std::mutex, not absl::Mutex: ThreadSanitizer sees these (Debian's
  // Abseil is not instrumented). Guards the four members below it.
  std::mutex mu_;
  std::condition_variable wake_;  // the engine thread waits for work here
  std::deque<absl::AnyInvocable<void() &&>> commands_;
  std::deque<Submitted> submitted_;
  bool draining_ = false;
  bool stopping_ = false;

  std::atomic<std::thread::id> engine_thread_;  // set first thing in Loop()
  std::thread thread_;
};

std::string_view FinishReasonName(FinishReason reason);

// INVALID_ARGUMENT naming the field for a Generate's max_tokens, sampling,
// penalties (logit_bias ids within the vocabulary) or logprobs out of range
// (an Append has none to check).
absl::Status ValidateGenerateParams(const GenerateParams& params,
                                    int vocab_size);
// ValidateGenerateParams of the call and of each of its choices; and at most
// kMaxChoices, of a Generate.
absl::Status ValidateGenerateCall(const GenerateCall& call, int vocab_size);

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_ENGINE_H_

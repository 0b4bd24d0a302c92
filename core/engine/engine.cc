#include "core/engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/session/kv_snapshot.h"
#include "core/session/session_dir.h"
#include "core/text/stop_matcher.h"
#include "core/text/utf8_stream_decoder.h"
#include "core/util/check.h"

namespace kvserve {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kContextFull:
      return "context_full";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

struct Engine::Sequence {
  Sequence(std::shared_ptr<GenerateCall> c, Session* s, absl::Time t)
      : call(std::move(c)),
        session(s),
        sampler(call->params().sampling),
        stop(call->params().stop),
        submitted(t) {}

  const GenerateParams& params() const { return call->params(); }
  bool generate() const { return params().generate; }
  // Tokens of the history whose KV is not computed yet.
  int64_t pending() const {
    return session->tokens.size() - session->kv.table.num_tokens();
  }

  std::shared_ptr<GenerateCall> call;
  Session* session;
  Sampler sampler;
  Utf8StreamDecoder utf8;
  StopMatcher stop;
  absl::Time submitted, admitted, first_token, last_token;
  bool started = false;    // usage.prompt_tokens and cached are set
  bool preempted = false;  // its KV was taken; back to waiting after the step
  bool scheduled = false;  // in the batch being built
  int32_t prev_token = -1;
  Usage usage;
};

namespace {

// Calls back with the session once an initial prefill finishes.
class CreateSessionSink : public TokenSink {
 public:
  CreateSessionSink(absl::AnyInvocable<void(absl::Status) &&> done)
      : done_(std::move(done)) {}
  void OnToken(GeneratedToken) override {}
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    std::move(done_)(result.status());
    delete this;
  }

 private:
  absl::AnyInvocable<void(absl::Status) &&> done_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineOptions& options, const ModelWeights* weights,
    const Tokenizer* tokenizer, EngineObserver* observer) {
  const ModelConfig& c = weights->config;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  if (options.max_context < 0 || options.max_context > c.context_length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max_context=%d must be in [1, %d] (the model's context length)",
        options.max_context, c.context_length));
  }
  if (options.max_batch_tokens < 1 || options.max_running < 1 ||
      options.max_queued_requests < 0 || options.kv_block_tokens < 1 ||
      options.default_max_tokens < 1 || options.kv_cache_bytes < 0 ||
      !(options.max_step_slowdown == 0 || options.max_step_slowdown >= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "engine limits must be positive: max_batch_tokens=%d max_running=%d "
        "max_queued_requests=%d kv_block_tokens=%d kv_cache_bytes=%d "
        "(and max_step_slowdown=%g must be 0 or at least 1)",
        options.max_batch_tokens, options.max_running,
        options.max_queued_requests, options.kv_block_tokens,
        options.kv_cache_bytes, options.max_step_slowdown));
  }
  std::unique_ptr<Engine> engine(
      new Engine(options, weights, tokenizer, observer));
  const int64_t per_token = c.KvBytesPerToken(options.kv_dtype);
  BlockPoolOptions pool_options;
  pool_options.n_layers = c.n_layers;
  pool_options.n_kv_heads = c.n_kv_heads;
  pool_options.head_dim = c.head_dim;
  pool_options.block_tokens = options.kv_block_tokens;
  pool_options.dtype = options.kv_dtype;
  pool_options.capacity_bytes = options.kv_cache_bytes > 0
                                    ? options.kv_cache_bytes
                                    : 8 * engine->max_context_ * per_token;
  auto pool = BlockPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  engine->pool_ = *std::move(pool);
  auto model = Model::Create(weights, engine->pool_.get(),
                             {.max_batch_tokens = options.max_batch_tokens});
  if (!model.ok()) return model.status();
  engine->model_ = *std::move(model);
  engine->sessions_ = std::make_unique<SessionStore>(engine->pool_.get());
  engine->prefix_cache_ = std::make_unique<PrefixCache>(engine->pool_.get());
  engine->snapshot_key_ =
      KvSnapshotKey{.model_fingerprint = weights->fingerprint,
                    .dtype = options.kv_dtype,
                    .n_layers = c.n_layers,
                    .n_kv_heads = c.n_kv_heads,
                    .head_dim = c.head_dim};
  if (!options.session_dir.empty()) {
    auto dir = SessionDir::Open(options.session_dir);
    if (!dir.ok()) return dir.status();
    engine->session_dir_ = *std::move(dir);
    for (const std::string& id : engine->session_dir_->List()) {
      (void)engine->FindSession(id, "");
    }
  }
  engine->ReportStats();
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(const EngineOptions& options, const ModelWeights* weights,
               const Tokenizer* tokenizer, EngineObserver* observer)
    : options_(options),
      weights_(weights),
      tokenizer_(tokenizer),
      observer_(observer),
      max_context_(options.max_context > 0 ? options.max_context
                                           : weights->config.context_length) {}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t Engine::kv_bytes_per_token() const { return pool_->bytes_per_token(); }
int64_t Engine::kv_capacity_bytes() const { return pool_->capacity_bytes(); }

void Engine::Drain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void Engine::Post(absl::AnyInvocable<void(absl::Status) &&> command) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_ && !stopping_) {
      commands_.push_back([command = std::move(command)]() mutable {
        std::move(command)(absl::OkStatus());
      });
      return;
    }
  }
  std::move(command)(absl::UnavailableError("the server is shutting down"));
}

absl::Status ValidateGenerateParams(const GenerateParams& p) {
  if (!p.generate) return absl::OkStatus();
  if (p.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be positive, got %d", p.max_tokens));
  }
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "logprobs must be in [0, %d], got %d", kMaxTopLogprobs, p.logprobs));
  }
  return ValidateSamplingOptions(p.sampling);
}

void Engine::Submit(std::shared_ptr<GenerateCall> call) {
  // Bad arguments are reported as such, even when the queue is full.
  absl::Status rejected = ValidateGenerateParams(call->params());
  if (rejected.ok()) {
    absl::MutexLock lock(&mu_);
    if (draining_ || stopping_) {
      rejected = absl::UnavailableError("the server is shutting down");
    } else if (queued_requests_ >= options_.max_queued_requests) {
      rejected = absl::ResourceExhaustedError(absl::StrFormat(
          "request queue is full: %d requests wait (--max_queued_requests=%d) "
          "behind at most %d running (--max_running=%d)",
          queued_requests_, options_.max_queued_requests, options_.max_running,
          options_.max_running));
    } else {
      ++queued_requests_;
      const absl::Time now = absl::Now();
      commands_.push_back(
          [this, call, now]() mutable { Admit(std::move(call), now); });
      return;
    }
  }
  call->sink()->OnFinish(rejected);
}

void Engine::Loop() {
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  while (true) {
    std::deque<absl::AnyInvocable<void() &&>> commands;
    bool stop;
    {
      const bool idle = running_.empty() && waiting_.empty();
      auto ready = [this, idle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !commands_.empty() || !idle;
      };
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      commands.swap(commands_);
      stop = stopping_;
    }
    for (auto& command : commands) std::move(command)();
    if (stop) break;
    const absl::Time now = absl::Now();
    if (now >= next_expiry_check_) {
      for (const std::string& id : sessions_->ExpireIdle(now)) {
        RemoveFiles(id);
        if (observer_) observer_->OnEviction("ttl");
      }
      next_expiry_check_ = now + absl::Seconds(1);
    }
    StartWaiting();
    if (!running_.empty()) Step();
    // Counting sessions by tier walks the store: not on every decode step.
    if (running_.empty() || now >= next_stats_) {
      ReportStats();
      next_stats_ = now + absl::Milliseconds(50);
    }
  }
  const absl::Status shutdown =
      absl::UnavailableError("the server is shutting down");
  for (auto* queue : {&running_, &waiting_}) {
    while (!queue->empty()) {
      Finish(*queue->front(), shutdown);
      queue->pop_front();
    }
  }
  // Lazily written KV snapshots are brought up to date on the way out.
  sessions_->ForEach([this](Session& s) {
    if (s.durable && s.kv.table.num_tokens() > 0) WriteSnapshot(s);
  });
}

void Engine::Admit(std::shared_ptr<GenerateCall> call, absl::Time submitted) {
  const GenerateParams& p = call->params();
  auto fail = [&](absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      --queued_requests_;
    }
    call->sink()->OnFinish(std::move(status));
  };
  const absl::Time now = absl::Now();
  Session* session;
  if (p.session_id.empty()) {
    session = sessions_->Create(p.owner, std::nullopt, now);
    session->ephemeral = true;
  } else {
    absl::StatusOr<Session*> found = FindSession(p.session_id, p.owner);
    if (!found.ok()) return fail(found.status());
    session = *found;
    if (session->busy) {
      return fail(absl::FailedPreconditionError(absl::StrFormat(
          "session %s is busy with another Generate or Append", session->id)));
    }
  }
  auto drop_ephemeral = [&] {
    if (session->ephemeral) sessions_->Delete(session->id);
  };

  // The turn's new tokens: an empty session starts with BOS.
  std::vector<int32_t> input;
  const bool fresh = session->tokens.empty();
  if (const auto* text = std::get_if<std::string>(&p.prompt)) {
    if (!text->empty()) {
      input = tokenizer_->Encode(
          *text, EncodeOptions{.add_bos = fresh, .add_dummy_prefix = fresh});
    }
  } else {
    input = std::get<std::vector<int32_t>>(p.prompt);
    for (int32_t id : input) {
      if (id < 0 || id >= config().vocab_size) {
        drop_ephemeral();
        return fail(absl::InvalidArgumentError(
            absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id,
                            config().vocab_size)));
      }
    }
  }
  const int32_t bos = tokenizer_->bos_id();
  if (fresh && bos >= 0 && (input.empty() || input.front() != bos)) {
    input.insert(input.begin(), bos);
  }
  // Generating needs room for at least one more token.
  const int64_t total = session->tokens.size() + input.size();
  if (total > max_context_ || (p.generate && total == max_context_)) {
    drop_ephemeral();
    return fail(absl::OutOfRangeError(absl::StrFormat(
        "the context is full: %d tokens in the session plus %d new %s the "
        "maximum of %d",
        session->tokens.size(), input.size(),
        total > max_context_ ? "exceed" : "leave no room to generate within",
        max_context_)));
  }
  session->tokens.insert(session->tokens.end(), input.begin(), input.end());
  session->busy = true;
  session->last_used = now;
  auto seq = std::make_unique<Sequence>(std::move(call), session, submitted);
  if (!session->tokens.empty()) seq->prev_token = session->tokens.back();
  waiting_.push_back(std::move(seq));
}

void Engine::StartWaiting() {
  while (!waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_running) {
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    const absl::Time now = absl::Now();
    if (!seq->started) {
      {
        absl::MutexLock lock(&mu_);
        --queued_requests_;
      }
      seq->admitted = now;
      if (observer_) {
        observer_->OnQueueWait(absl::ToDoubleSeconds(now - seq->submitted));
      }
      Session& s = *seq->session;
      // Logits come from the last token's forward pass: recompute it when
      // its KV is already held.
      if (seq->generate() && !s.tokens.empty() &&
          s.kv.table.num_tokens() == static_cast<int64_t>(s.tokens.size())) {
        s.kv.Truncate(s.tokens.size() - 1);
      }
      RestoreSnapshot(*seq);
      MatchPrefix(*seq);
      seq->usage.prompt_tokens = s.tokens.size();
      seq->usage.cached_prompt_tokens = s.kv.table.num_tokens();
      seq->started = true;
      if (observer_) {
        observer_->OnPrompt(seq->usage.prompt_tokens,
                            seq->usage.cached_prompt_tokens);
      }
    }
    running_.push_back(std::move(seq));
  }
}

std::string_view Engine::TierOf(const Session& s) {
  if (s.kv.table.num_tokens() > 0 || s.tokens.empty()) return "ram";
  return s.has_snapshot ? "disk" : "tokens";
}

void Engine::Warn(std::string_view message) {
  if (observer_) observer_->OnWarning(message);
}

absl::StatusOr<Session*> Engine::FindSession(std::string_view id,
                                             std::string_view owner) {
  absl::StatusOr<Session*> found = sessions_->Lookup(id, owner);
  if (found.ok() && (*found)->durable && !(*found)->busy) {
    // Replicas may share the directory: another one may have continued or
    // deleted this session since this process last touched it.
    const int64_t size = session_dir_->LogSize(id);
    if (size < 0) {
      sessions_->Delete(id);
      return absl::NotFoundError(absl::StrFormat("session %s not found", id));
    }
    if (size != (*found)->log_bytes) Reload(**found);
    return found;
  }
  if (found.ok() || session_dir_ == nullptr ||
      !absl::IsNotFound(found.status())) {
    return found;
  }
  // Not in memory: a session of an earlier run (or of a replica that died)
  // whose files are in the session directory.
  absl::StatusOr<StoredSession> stored = session_dir_->Load(id);
  if (!stored.ok()) {
    if (!absl::IsNotFound(stored.status()))
      Warn(std::string(stored.status().message()));
    return found;
  }
  for (int32_t t : stored->tokens) {
    if (t < 0 || t >= config().vocab_size) {
      Warn(
          absl::StrFormat("session %s on disk has token %d outside this "
                          "model's vocabulary; not loaded",
                          id, t));
      return found;
    }
  }
  if (static_cast<int64_t>(stored->tokens.size()) > max_context_) {
    Warn(
        absl::StrFormat("session %s on disk is longer than --max_context", id));
    return found;
  }
  Session* s = sessions_->Insert(stored->id, stored->owner, stored->ttl,
                                 stored->create_time, absl::Now());
  s->tokens = std::move(stored->tokens);
  s->durable = true;
  s->logged_tokens = s->tokens.size();
  s->log_bytes = stored->log_bytes;
  s->has_snapshot =
      ReadFile(session_dir_->SnapshotPath(s->id)).status().code() !=
      absl::StatusCode::kNotFound;
  return sessions_->Lookup(id, owner);
}

void Engine::Reload(Session& s) {
  absl::StatusOr<StoredSession> stored = session_dir_->Load(s.id);
  if (!stored.ok()) {
    Warn(std::string(stored.status().message()));
    return;
  }
  // KV stays valid for the common prefix of the two histories.
  const auto diverge =
      std::mismatch(s.tokens.begin(), s.tokens.end(), stored->tokens.begin(),
                    stored->tokens.end());
  const int64_t common = diverge.first - s.tokens.begin();
  if (s.kv.table.num_tokens() > common) s.kv.Truncate(common);
  s.tokens = std::move(stored->tokens);
  s.logged_tokens = s.tokens.size();
  s.log_bytes = stored->log_bytes;
  s.has_snapshot = true;  // checked against the tokens when used
}

absl::Status Engine::StartLog(Session& s) {
  if (session_dir_ == nullptr) return absl::OkStatus();
  s.durable = true;
  s.logged_tokens = s.tokens.size();
  absl::StatusOr<int64_t> size =
      session_dir_->Create(StoredSession{.id = s.id,
                                         .owner = s.owner,
                                         .ttl = s.ttl,
                                         .create_time = s.create_time,
                                         .tokens = s.tokens});
  if (!size.ok()) return size.status();
  s.log_bytes = *size;
  return absl::OkStatus();
}

void Engine::SyncLog(Session& s) {
  if (!s.durable || s.logged_tokens == static_cast<int64_t>(s.tokens.size())) {
    return;
  }
  const int64_t base = std::min<int64_t>(s.logged_tokens, s.tokens.size());
  absl::StatusOr<int64_t> size = session_dir_->Append(
      s.id, base, absl::MakeConstSpan(s.tokens).subspan(base));
  if (!size.ok()) {
    Warn(std::string(size.status().message()));
    return;
  }
  s.logged_tokens = s.tokens.size();
  s.log_bytes = *size;
}

absl::Status Engine::TruncateLog(Session& s) {
  if (!s.durable) return absl::OkStatus();
  if (s.has_snapshot) {
    // It may hold positions past the new end; it is rewritten when needed.
    s.has_snapshot = false;
    session_dir_->RemoveSnapshot(s.id);
  }
  absl::StatusOr<int64_t> size =
      session_dir_->Append(s.id, s.tokens.size(), {});
  if (!size.ok()) return size.status();
  s.logged_tokens = s.tokens.size();
  s.log_bytes = *size;
  return absl::OkStatus();
}

void Engine::RemoveFiles(std::string_view id) {
  if (session_dir_ == nullptr) return;
  if (absl::Status s = session_dir_->Remove(id); !s.ok())
    Warn(std::string(s.message()));
}

void Engine::WriteSnapshot(Session& s) {
  const int64_t n = s.kv.table.num_tokens();
  absl::Status st = WriteFileAtomically(
      session_dir_->SnapshotPath(s.id),
      EncodeKvSnapshot(snapshot_key_,
                       absl::MakeConstSpan(s.tokens).subspan(0, n),
                       s.kv.table));
  if (!st.ok()) {
    Warn(std::string(st.message()));
    return;
  }
  s.has_snapshot = true;
}

void Engine::Spill(Session& s) {
  if (s.durable) WriteSnapshot(s);
  s.kv.Clear();
}

void Engine::RestoreSnapshot(Sequence& seq) {
  Session& s = *seq.session;
  if (!s.has_snapshot || s.kv.table.num_tokens() > 0) return;
  const std::string path = session_dir_->SnapshotPath(s.id);
  absl::StatusOr<std::string> bytes = ReadFile(path);
  absl::StatusOr<int64_t> n =
      bytes.ok() ? CheckKvSnapshot(*bytes, snapshot_key_, s.tokens)
                 : absl::StatusOr<int64_t>(bytes.status());
  if (!n.ok()) {
    Warn(absl::StrFormat("session %s: KV snapshot ignored, re-prefilling: %s",
                         s.id, n.status().message()));
    s.has_snapshot = false;
    session_dir_->RemoveSnapshot(s.id);
    return;
  }
  int64_t restore = *n;
  // A generating sequence needs the last token's logits: leave it pending.
  if (seq.generate()) {
    restore = std::min<int64_t>(restore, s.tokens.size() - 1);
  }
  if (restore <= 0 || !ReserveKv(seq, restore).ok()) return;
  RestoreKvSnapshot(*bytes, restore, &s.kv.table);
  prefix_cache_->Register(s.tokens, s.kv);
}

int64_t Engine::PrefillBudget(int64_t decode_tokens) const {
  const int64_t room = options_.max_batch_tokens - decode_tokens;
  if (decode_tokens == 0 || options_.max_step_slowdown <= 0) return room;
  // Until a prefill step has been timed, probe with a small chunk.
  if (decode_step_seconds_ <= 0 || prefill_token_seconds_ <= 0) {
    return std::min<int64_t>(room, kProbePrefillChunk);
  }
  const double allowed = (options_.max_step_slowdown - 1) *
                         decode_step_seconds_ / prefill_token_seconds_;
  // At least one token, so that a prompt always makes progress.
  return std::clamp<int64_t>(static_cast<int64_t>(allowed), 1,
                             std::max<int64_t>(room, 1));
}

void Engine::LearnStepCost(int64_t decode_tokens, int64_t tokens,
                           double seconds) {
  constexpr double kWeight = 0.2;  // of the newest step in the averages
  auto update = [](double& average, double sample) {
    average =
        average <= 0 ? sample : (1 - kWeight) * average + kWeight * sample;
  };
  const int64_t prefill_tokens = tokens - decode_tokens;
  if (prefill_tokens == 0) {
    update(decode_step_seconds_, seconds);
  } else {
    const double extra =
        seconds - (decode_tokens > 0 ? decode_step_seconds_ : 0.0);
    update(prefill_token_seconds_, std::max(extra, 0.0) / prefill_tokens);
  }
}

int64_t Engine::MatchPrefix(Sequence& seq) {
  Session& s = *seq.session;
  absl::Span<const int32_t> tokens = s.tokens;
  // A generating sequence needs the last token's logits: leave it pending.
  if (seq.generate() && !tokens.empty()) tokens.remove_suffix(1);
  return prefix_cache_->Match(tokens, s.kv);
}

absl::Status Engine::ReserveKv(Sequence& seq, int64_t end) {
  while (true) {
    absl::Status s = prefix_cache_->Extend(seq.session->kv, end);
    if (!absl::IsResourceExhausted(s)) return s;
    if (Session* idle = sessions_->LeastRecentlyUsedIdleWithKv()) {
      Spill(*idle);
      if (observer_) observer_->OnEviction("memory");
      continue;
    }
    // Preempt the most recently admitted sequence that holds blocks and is
    // not in this step's batch yet: possibly `seq` itself.
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      Sequence* candidate = it->get();
      if (!candidate->preempted && !candidate->scheduled &&
          !candidate->session->kv.table.blocks().empty()) {
        victim = candidate;
        break;
      }
    }
    if (victim == nullptr) return s;
    victim->session->kv.Clear();
    victim->preempted = true;
    if (observer_) observer_->OnPreemption();
    if (victim == &seq) {
      return absl::AbortedError("preempted to make room for older sequences");
    }
  }
}

void Engine::Step() {
  // Cancelled requests leave first.
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->call->cancelled()) {
      Finish(**it, FinishReason::kCancelled);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  // Decode tokens first, then prefill chunks, each in admission order.
  std::vector<Sequence*> order;
  for (auto& seq : running_) {
    if (seq->pending() == 1) order.push_back(seq.get());
  }
  for (auto& seq : running_) {
    if (seq->pending() != 1) order.push_back(seq.get());
  }
  std::vector<SeqChunk> chunks;
  std::vector<Sequence*> chunk_seqs;
  std::vector<Sequence*> failed;
  int64_t budget = options_.max_batch_tokens;
  int64_t decode_tokens = 0;
  for (Sequence* seq : order) decode_tokens += seq->pending() == 1 ? 1 : 0;
  int64_t prefill_budget = PrefillBudget(decode_tokens);
  int64_t scheduled_decode = 0;
  for (Sequence* seq : order) seq->scheduled = false;
  for (Sequence* seq : order) {
    if (seq->preempted || budget == 0) continue;
    Session& s = *seq->session;
    if (seq->usage.generated_tokens == 0) {
      const int64_t adopted = MatchPrefix(*seq);
      seq->usage.cached_prompt_tokens += adopted;
      if (observer_ && adopted > 0) observer_->OnPrompt(0, adopted);
    }
    const int64_t start = s.kv.table.num_tokens();
    const bool decode = seq->pending() == 1;
    const int64_t n = std::min<int64_t>(
        {seq->pending(), budget, decode ? budget : prefill_budget});
    if (n == 0) continue;
    // A context that cannot fit even in the whole pool fails; any other
    // waits (or is preempted) until older sequences make room.
    const int64_t bt = pool_->options().block_tokens;
    if ((static_cast<int64_t>(s.tokens.size()) + bt - 1) / bt >
        pool_->num_blocks()) {
      failed.push_back(seq);
      seq->call->Cancel();
      continue;
    }
    if (!ReserveKv(*seq, start + n).ok()) continue;
    seq->scheduled = true;
    budget -= n;
    if (decode) {
      ++scheduled_decode;
    } else {
      prefill_budget -= n;
    }
    const bool last = start + n == static_cast<int64_t>(s.tokens.size());
    chunks.push_back(
        SeqChunk{.kv = &s.kv.table,
                 .start_pos = start,
                 .tokens = absl::MakeConstSpan(s.tokens).subspan(start, n),
                 .want_logits = last && seq->generate()});
    chunk_seqs.push_back(seq);
  }

  const absl::Time start_time = absl::Now();
  absl::StatusOr<absl::Span<const float>> logits =
      chunks.empty() ? absl::Span<const float>() : model_->Forward(chunks);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_time);
  if (!chunks.empty()) {
    int64_t tokens = 0;
    for (const SeqChunk& c : chunks) tokens += c.tokens.size();
    LearnStepCost(scheduled_decode, tokens, seconds);
    if (observer_) observer_->OnStep(tokens, chunks.size(), seconds);
  }
  int logit_row = 0;
  const int vocab = config().vocab_size;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Sequence& seq = *chunk_seqs[i];
    if (!logits.ok()) {
      seq.call->Cancel();
      continue;
    }
    prefix_cache_->Register(seq.session->tokens, seq.session->kv);
    if (chunks[i].want_logits) {
      absl::Span<const float> row = logits->subspan(logit_row * vocab, vocab);
      ++logit_row;
      EmitToken(seq, seq.sampler.Sample(row), row);
    }
  }

  // Retire finished, failed and preempted sequences.
  std::deque<std::unique_ptr<Sequence>> still_running;
  for (auto& seq : running_) {
    const bool failed_here =
        std::find(failed.begin(), failed.end(), seq.get()) != failed.end();
    if (failed_here) {
      Finish(*seq, absl::ResourceExhaustedError(absl::StrFormat(
                       "the KV cache (%d bytes) cannot hold a context of %d "
                       "tokens; raise --kv_cache_bytes",
                       pool_->capacity_bytes(), seq->session->tokens.size())));
    } else if (!logits.ok() && seq->call->cancelled()) {
      Finish(*seq, logits.status());
    } else if (seq->session == nullptr) {
      // Finished by EmitToken.
    } else if (!seq->generate() && seq->pending() == 0) {
      Finish(*seq, FinishReason::kLength);
    } else if (seq->preempted) {
      seq->preempted = false;
      waiting_.push_front(std::move(seq));
    } else {
      still_running.push_back(std::move(seq));
    }
  }
  running_.swap(still_running);
}

void Engine::EmitToken(Sequence& seq, int32_t token,
                       absl::Span<const float> logits) {
  const GenerateParams& p = seq.params();
  Session& s = *seq.session;
  const absl::Time now = absl::Now();
  s.tokens.push_back(token);
  s.last_used = now;
  ++seq.usage.generated_tokens;
  if (seq.usage.generated_tokens == 1) {
    seq.first_token = now;
    if (observer_) {
      observer_->OnFirstToken(absl::ToDoubleSeconds(now - seq.submitted));
    }
  } else if (observer_) {
    observer_->OnInterToken(absl::ToDoubleSeconds(now - seq.last_token));
  }
  seq.last_token = now;
  if (observer_) observer_->OnGenerated(1);

  GeneratedToken out;
  out.token_id = token;
  if (p.logprobs >= 0)
    out.logprobs = ComputeLogprobs(logits, token, p.logprobs);
  const bool eos = token == tokenizer_->eos_id() && !p.ignore_eos;
  bool stopped = false;
  if (!eos) {
    StopMatcher::Result r = seq.stop.Push(
        seq.utf8.Push(tokenizer_->DecodeToken(seq.prev_token, token)));
    out.text = std::move(r.text);
    stopped = r.stopped;
  }
  seq.prev_token = token;
  seq.call->sink()->OnToken(std::move(out));

  std::optional<FinishReason> reason;
  if (eos) {
    reason = FinishReason::kEos;
  } else if (stopped) {
    reason = FinishReason::kStop;
  } else if (seq.usage.generated_tokens >= p.max_tokens) {
    reason = FinishReason::kLength;
  } else if (static_cast<int64_t>(s.tokens.size()) >= max_context_) {
    reason = FinishReason::kContextFull;
  }
  if (reason.has_value()) Finish(seq, *reason);
}

void Engine::Finish(Sequence& seq, absl::StatusOr<FinishReason> reason) {
  if (seq.session == nullptr) return;  // already finished
  Session& s = *seq.session;
  const absl::Time now = absl::Now();
  s.busy = false;
  s.last_used = now;
  GenerateResult result;
  if (reason.ok()) {
    result.finish_reason = *reason;
    result.usage = seq.usage;
    if (*reason != FinishReason::kStop) {
      result.text = seq.stop.Push(seq.utf8.Flush()).text + seq.stop.Flush();
    }
    if (seq.started) {
      result.timings.queue_seconds =
          absl::ToDoubleSeconds(seq.admitted - seq.submitted);
      const absl::Time prefill_end =
          seq.usage.generated_tokens > 0 ? seq.first_token : now;
      result.timings.prefill_seconds =
          absl::ToDoubleSeconds(prefill_end - seq.admitted);
      if (seq.usage.generated_tokens > 0) {
        result.timings.decode_seconds =
            absl::ToDoubleSeconds(seq.last_token - seq.first_token);
      }
    }
    if (!s.ephemeral) result.session_id = s.id;
  }
  SyncLog(s);
  if (s.ephemeral) sessions_->Delete(s.id);
  seq.session = nullptr;
  TokenSink* sink = seq.call->sink();
  if (reason.ok()) {
    sink->OnFinish(std::move(result));
  } else {
    sink->OnFinish(reason.status());
  }
}

SessionInfo Engine::Describe(const Session& s, bool include_tokens) const {
  SessionInfo info;
  info.id = s.id;
  info.owner = s.owner;
  info.num_tokens = s.tokens.size();
  info.kv_tokens = s.kv.table.num_tokens();
  info.kv_bytes = s.kv.table.num_tokens() * pool_->bytes_per_token();
  info.tier = std::string(TierOf(s));
  info.create_time = s.create_time;
  info.last_used = s.last_used;
  info.ttl = s.ttl;
  info.busy = s.busy;
  if (include_tokens) info.tokens = s.tokens;
  return info;
}

void Engine::ReportStats() {
  if (observer_ == nullptr) return;
  EngineStats st;
  st.kv_used_bytes = pool_->used_bytes();
  st.kv_capacity_bytes = pool_->capacity_bytes();
  st.kv_blocks_free = pool_->num_free_blocks();
  st.kv_blocks_used = pool_->num_blocks() - st.kv_blocks_free;
  st.kv_blocks_shared = pool_->num_shared_blocks();
  sessions_->ForEach([&st](const Session& s) {
    const std::string_view tier = TierOf(s);
    ++(tier == "ram"    ? st.sessions_ram
       : tier == "disk" ? st.sessions_disk
                        : st.sessions_tokens);
  });
  st.running = running_.size();
  st.waiting = waiting_.size();
  observer_->OnStats(st);
}

void Engine::CreateSession(CreateSessionParams params,
                           Callback<SessionInfo> done) {
  Post([this, params = std::move(params),
        done = std::move(done)](absl::Status accepted) mutable {
    if (!accepted.ok()) return std::move(done)(accepted);
    Session* s = nullptr;
    if (params.id.empty()) {
      s = sessions_->Create(params.owner, params.ttl, absl::Now());
    } else if (!IsValidSessionId(params.id)) {
      return std::move(done)(absl::InvalidArgumentError(absl::StrFormat(
          "session_id \"%s\" is not 32 lowercase hex digits", params.id)));
    } else if (FindSession(params.id, "").ok()) {
      return std::move(done)(absl::AlreadyExistsError(
          absl::StrFormat("session %s already exists", params.id)));
    } else {
      const absl::Time now = absl::Now();
      s = sessions_->Insert(params.id, params.owner, params.ttl, now, now);
    }
    if (absl::Status logged = StartLog(*s); !logged.ok()) {
      sessions_->Delete(s->id);
      return std::move(done)(logged);
    }
    const auto* text = std::get_if<std::string>(&params.initial);
    if (text != nullptr && text->empty()) {
      return std::move(done)(Describe(*s, false));
    }
    // The initial input is prefilled like an Append; the reply waits for it.
    GenerateParams gp;
    gp.session_id = s->id;
    gp.owner = params.owner;
    gp.prompt = std::move(params.initial);
    gp.generate = false;
    auto* sink =
        new CreateSessionSink([this, id = s->id, done = std::move(done)](
                                  absl::Status status) mutable {
          absl::StatusOr<Session*> found = sessions_->Lookup(id, "");
          if (status.ok() && found.ok()) {
            return std::move(done)(Describe(**found, false));
          }
          if (found.ok() && !(*found)->busy) {
            sessions_->Delete(id);
            RemoveFiles(id);
          }
          std::move(done)(status.ok() ? found.status() : status);
        });
    {
      absl::MutexLock lock(&mu_);
      ++queued_requests_;
    }
    Admit(std::make_shared<GenerateCall>(std::move(gp), sink), absl::Now());
  });
}

void Engine::GetSession(std::string id, std::string owner, bool include_tokens,
                        Callback<SessionInfo> done) {
  Reply<SessionInfo>(std::move(done),
                     [=, this]() -> absl::StatusOr<SessionInfo> {
                       absl::StatusOr<Session*> s = FindSession(id, owner);
                       if (!s.ok()) return s.status();
                       return Describe(**s, include_tokens);
                     });
}

void Engine::ListSessions(std::string owner, std::string page_token,
                          int page_size, Callback<SessionList> done) {
  Reply<SessionList>(std::move(done),
                     [=, this]() -> absl::StatusOr<SessionList> {
                       absl::StatusOr<SessionPage> page =
                           sessions_->List(owner, page_token, page_size);
                       if (!page.ok()) return page.status();
                       SessionList list;
                       for (const Session* s : page->sessions) {
                         list.sessions.push_back(Describe(*s, false));
                       }
                       list.next_page_token = page->next_page_token;
                       return list;
                     });
}

void Engine::DeleteSession(std::string id, std::string owner,
                           Callback<bool> done) {
  Reply<bool>(std::move(done), [=, this]() -> absl::StatusOr<bool> {
    absl::StatusOr<Session*> s = FindIdleSession(id, owner);
    if (!s.ok()) return s.status();
    sessions_->Delete(id);
    RemoveFiles(id);
    if (observer_) observer_->OnEviction("deleted");
    return true;
  });
}

void Engine::ForkSession(std::string id, std::string owner,
                         std::optional<absl::Duration> ttl,
                         Callback<SessionInfo> done) {
  Reply<SessionInfo>(
      std::move(done), [=, this]() -> absl::StatusOr<SessionInfo> {
        absl::StatusOr<Session*> parent = FindSession(id, owner);
        if (!parent.ok()) return parent.status();
        Session* child = sessions_->Create(
            (*parent)->owner, ttl.has_value() ? ttl : (*parent)->ttl,
            absl::Now());
        child->tokens = (*parent)->tokens;
        child->kv = (*parent)->kv.Fork();
        if (absl::Status logged = StartLog(*child); !logged.ok()) {
          sessions_->Delete(child->id);
          return logged;
        }
        return Describe(*child, false);
      });
}

void Engine::TruncateSession(std::string id, std::string owner, int64_t tokens,
                             Callback<SessionInfo> done) {
  Reply<SessionInfo>(
      std::move(done), [=, this]() -> absl::StatusOr<SessionInfo> {
        absl::StatusOr<Session*> found = FindIdleSession(id, owner);
        if (!found.ok()) return found.status();
        Session& s = **found;
        if (tokens < 0 || tokens > static_cast<int64_t>(s.tokens.size())) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "tokens must be in [0, %d] for session %s, got %d",
              s.tokens.size(), id, tokens));
        }
        s.tokens.resize(tokens);
        if (absl::Status logged = TruncateLog(s); !logged.ok()) return logged;
        if (s.kv.table.num_tokens() > tokens) s.kv.Truncate(tokens);
        s.last_used = absl::Now();
        return Describe(s, false);
      });
}

absl::StatusOr<Session*> Engine::FindIdleSession(std::string_view id,
                                                 std::string_view owner) {
  absl::StatusOr<Session*> s = FindSession(id, owner);
  if (s.ok() && (*s)->busy) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %s is busy with a Generate or Append; cancel it first", id));
  }
  return s;
}

}  // namespace kvserve

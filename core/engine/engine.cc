#include "core/engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/chat/chat_prompt.h"
#include "core/util/status_reason.h"

namespace kvserve {

void Engine::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

void Engine::Post(absl::AnyInvocable<void(absl::Status) &&> command) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!draining_ && !stopping_) {
      commands_.push_back([command = std::move(command)]() mutable {
        std::move(command)(absl::OkStatus());
      });
      lock.unlock();
      wake_.notify_one();
      return;
    }
  }
  std::move(command)(absl::UnavailableError("the server is shutting down"));
}

void Engine::RunOnEngineThread(absl::AnyInvocable<void() &&> task) {
  if (std::this_thread::get_id() == engine_thread_.load()) {
    return std::move(task)();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void Engine::Warn(std::string_view message) {
  if (observer_ == nullptr) return;
  RunOnEngineThread(
      [this, m = std::string(message)]() { observer_->OnWarning(m); });
}

void Engine::Submit(std::shared_ptr<GenerateCall> call) {
  // Bad arguments are reported as such, even when the queue is full.
  absl::Status rejected = ValidateGenerateCall(*call, config().vocab_size);
  if (rejected.ok()) rejected = CheckPromptBytes(call->params().prompt);
  if (rejected.ok()) {
    std::unique_lock<std::mutex> lock(mu_);
    rejected = QueueStatusLocked();
    if (rejected.ok()) {
      call->HoldQueuePlace(TakeQueuePlaceLocked());
      submitted_.push_back(Submitted{std::move(call), absl::Now()});
      lock.unlock();
      wake_.notify_one();
      return;
    }
  }
  call->Finish(rejected);
}

void Engine::Loop() {
  engine_thread_.store(std::this_thread::get_id());
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  while (true) {
    std::deque<absl::AnyInvocable<void() &&>> commands;
    std::deque<Submitted> calls;
    bool stop;
    {
      const bool idle = scheduler_->idle();
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::seconds(1), [this, idle] {
        return stopping_ || !commands_.empty() || !submitted_.empty() || !idle;
      });
      commands.swap(commands_);
      calls.swap(submitted_);
      stop = stopping_;
    }
    for (auto& command : commands) std::move(command)();
    for (Submitted& submitted : calls) Enqueue(std::move(submitted));
    if (stop) break;
    const absl::Time now = absl::Now();
    if (now >= next_expiry_check_) {
      for (const std::string& id : sessions_->ExpireIdle(now)) {
        tiers_->Remove(id);
        if (observer_) observer_->OnEviction("ttl");
      }
      next_expiry_check_ = now + absl::Seconds(1);
    }
    scheduler_->Admit();
    if (scheduler_->num_running() > 0) Step();
    // Counting sessions by tier walks the store: not on every decode step.
    if (scheduler_->num_running() == 0 || now >= next_stats_) {
      ReportStats();
      next_stats_ = now + absl::Milliseconds(50);
    }
  }
  // Inputs still being prepared come back as commands, and fail.
  stopped_ = true;
  prep_->Stop();
  RunQueuedCommands();
  const absl::Status shutdown =
      absl::UnavailableError("the server is shutting down");
  for (auto& seq : scheduler_->TakeAll()) {
    seq->outcome = shutdown;
    Finish(std::move(seq));
  }
  // Lazily written KV snapshots are brought up to date on the way out;
  // the writer finishes every write, and the replies waiting for them go.
  tiers_->SnapshotAll();
  // Replies waiting for a write run while the tiers exist (they describe
  // the session, or remove it); the writes they queue, the tiers' destructor
  // finishes.
  tiers_->Flush();
  RunQueuedCommands();
  tiers_.reset();
  RunQueuedCommands();
}

void Engine::RunQueuedCommands() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!commands_.empty()) {
    auto command = std::move(commands_.front());
    commands_.pop_front();
    lock.unlock();
    std::move(command)();
    lock.lock();
  }
}

void Engine::Enqueue(Submitted submitted) {
  std::shared_ptr<GenerateCall> call = std::move(submitted.call);
  const GenerateParams& p = call->params();
  Session* session;
  if (p.session_id.empty()) {
    session = sessions_->Create(p.owner, std::nullopt, absl::Now());
    session->ephemeral = true;
  } else {
    absl::StatusOr<Session*> found = tiers_->Find(p.session_id, p.owner);
    if (!found.ok()) return call->Finish(found.status());
    session = *found;
    if (session->busy) {
      return call->Finish(absl::FailedPreconditionError(absl::StrFormat(
          "session %s is busy with another Generate or Append", session->id)));
    }
  }
  // Busy while its input is prepared: nothing else changes the session.
  session->busy = true;
  if (std::holds_alternative<std::vector<int32_t>>(p.prompt)) {
    return Continue(std::move(call), session->id, submitted.time,
                    std::vector<int32_t>());
  }
  // Text is tokenized, and a conversation rendered and tokenized, on the
  // prep thread: a long prompt does not stall the running sequences.
  PrepTask task{.call = std::move(call),
                .session_id = session->id,
                .submitted = submitted.time,
                .fresh = session->tokens.empty()};
  if (const auto* chat = std::get_if<ChatInput>(&task.call->params().prompt)) {
    task.render.messages = session->messages;
    task.render.messages.insert(task.render.messages.end(),
                                chat->messages.begin(), chat->messages.end());
    task.render.add_generation_prompt = task.call->params().generate;
    task.render.tools_json = chat->tools_json;
  }
  prep_->Post([this, task = std::move(task)]() mutable {
    absl::StatusOr<std::vector<int32_t>> tokens = Prepare(task);
    RunOnEngineThread(
        [this, task = std::move(task), tokens = std::move(tokens)]() mutable {
          Continue(std::move(task.call), task.session_id, task.submitted,
                   std::move(tokens));
        });
  });
}

absl::StatusOr<std::vector<int32_t>> Engine::Prepare(
    const PrepTask& task) const {
  const GenerateParams& p = task.call->params();
  if (const auto* chat = std::get_if<ChatInput>(&p.prompt)) {
    absl::StatusOr<ChatPrompt> prompt = RenderChatPrompt(
        *chat_template_, *tokenizer_,
        chat->tool_prompt ? WithToolPrompt(task.render) : task.render);
    if (!prompt.ok()) return prompt.status();
    return std::move(prompt->token_ids);
  }
  const std::string& text = std::get<std::string>(p.prompt);
  if (text.empty()) return std::vector<int32_t>();
  return tokenizer_->Encode(text,
                            EncodeOptions{.add_bos = task.fresh,
                                          .add_dummy_prefix = task.fresh,
                                          .parse_special = p.parse_special});
}

void Engine::Continue(std::shared_ptr<GenerateCall> call,
                      const std::string& session_id, absl::Time submitted,
                      absl::StatusOr<std::vector<int32_t>> prepared) {
  const GenerateParams& p = call->params();
  Session* session = sessions_->Get(session_id);
  if (session == nullptr) {  // not expected: a busy session stays
    return call->Finish(
        absl::NotFoundError(absl::StrFormat("session %s is gone", session_id)));
  }
  session->busy = false;
  auto fail = [&](absl::Status status) {
    if (session->ephemeral) sessions_->Delete(session->id);
    call->Finish(std::move(status));
  };
  if (stopped_)
    return fail(absl::UnavailableError("the server is shutting down"));
  if (!prepared.ok()) return fail(prepared.status());

  // The turn's new tokens: an empty session starts with BOS.
  std::vector<int32_t> input;
  const bool fresh = session->tokens.empty();
  // A chat turn replaces the history from where the conversation's new
  // rendering departs from it (kept to be put back if the turn fails).
  int64_t keep = session->tokens.size();
  int64_t messages_before = -1;
  if (std::holds_alternative<ChatInput>(p.prompt)) {
    const std::vector<int32_t>& rendered = *prepared;
    const auto diverge =
        std::mismatch(session->tokens.begin(), session->tokens.end(),
                      rendered.begin(), rendered.end());
    keep = diverge.first - session->tokens.begin();
    input.assign(diverge.second, rendered.end());
    messages_before = session->messages.size();
  } else if (std::holds_alternative<std::string>(p.prompt)) {
    input = *std::move(prepared);
  } else {
    input = std::get<std::vector<int32_t>>(p.prompt);
    for (int32_t id : input) {
      if (id < 0 || id >= config().vocab_size) {
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
  const int64_t total = keep + input.size();
  if (total > max_context_ || (p.generate && total == max_context_)) {
    return fail(absl::OutOfRangeError(absl::StrFormat(
        "the context is full: %d tokens in the session plus %d new %s the "
        "maximum of %d",
        keep, input.size(),
        total > max_context_ ? "exceed" : "leave no room to generate within",
        max_context_)));
  }
  if (p.generate && total == 0) {
    // Nothing to compute logits from (a vocabulary without BOS).
    return fail(absl::InvalidArgumentError(
        "the prompt is empty and so is the session, and the vocabulary has "
        "no BOS token to start from: send at least one token"));
  }
  std::vector<int32_t> replaced(session->tokens.begin() + keep,
                                session->tokens.end());
  if (!replaced.empty()) {
    RollBack(*session, keep);
    tiers_->Rewound(*session, keep);
  }
  if (messages_before >= 0) {
    const auto& added = std::get<ChatInput>(p.prompt).messages;
    session->messages.insert(session->messages.end(), added.begin(),
                             added.end());
  }
  session->tokens.insert(session->tokens.end(), input.begin(), input.end());
  session->busy = true;
  session->last_used = absl::Now();
  auto seq = std::make_unique<Sequence>(std::move(call), session, submitted,
                                        matchers_.get());
  seq->history_before = keep;
  seq->replaced = std::move(replaced);
  seq->messages_before = messages_before;
  scheduler_->Enqueue(std::move(seq));
}

void Engine::Step() {
  StepPlan plan = scheduler_->Plan();
  StepResult result;
  absl::StatusOr<absl::Span<const float>> logits = absl::Span<const float>();
  if (!plan.batch.empty()) {
    const absl::Time start = absl::Now();
    logits = model_->Forward(plan.batch);
    result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result.forward = logits.status();
    if (observer_) {
      observer_->OnStep(plan.tokens, plan.batch.size(), result.seconds);
    }
  }
  if (logits.ok()) {
    const int vocab = config().vocab_size;
    std::vector<Sequence*> seqs;
    std::vector<absl::Span<const float>> rows;
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      if (!plan.batch[i].want_logits) continue;
      Sequence& seq = *plan.seqs[i];
      rows.push_back(logits->subspan(rows.size() * vocab, vocab));
      if (!seq.call->choices().empty()) ForkChoices(seq, rows.back());
      seqs.push_back(&seq);
    }
    // The draws (and grammar masks) in parallel; what they emit in order.
    std::vector<absl::StatusOr<int32_t>> tokens = SampleAll(seqs, rows);
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& seq = *seqs[i];
      if (!tokens[i].ok()) {
        seq.outcome = tokens[i].status();
      } else if (auto end = EmitToken(seq, *tokens[i], rows[i])) {
        seq.outcome = *end;
      }
    }
  }
  for (auto& seq : scheduler_->Retire(plan, result)) Finish(std::move(seq));
}

std::optional<FinishReason> Engine::EmitToken(Sequence& seq, int32_t token,
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
  const bool eos = tokenizer_->IsEndOfGeneration(token) && !p.ignore_eos;
  bool stopped = false;
  if (!eos) {
    StopMatcher::Result r = seq.stop.Push(
        seq.utf8.Push(tokenizer_->DecodeToken(seq.prev_token, token)));
    out.text = std::move(r.text);
    stopped = r.stopped;
    if (seq.messages_before >= 0) seq.reply += out.text;
    if (tokenizer_->IsControl(token)) out.control = tokenizer_->Piece(token);
  }
  seq.prev_token = token;
  seq.call->sink()->OnToken(std::move(out));

  if (eos) return FinishReason::kEos;
  if (stopped || seq.Complete()) return FinishReason::kStop;
  if (seq.usage.generated_tokens >= p.max_tokens) return FinishReason::kLength;
  if (static_cast<int64_t>(s.tokens.size()) >= max_context_) {
    return FinishReason::kContextFull;
  }
  return std::nullopt;
}

void Engine::Finish(std::unique_ptr<Sequence> seq) {
  Session& s = *seq->session;
  seq->session = nullptr;
  if (seq->outcome->ok() && **seq->outcome != FinishReason::kStop) {
    seq->tail = seq->stop.Push(seq->utf8.Flush()).text + seq->stop.Flush();
  }
  // Nothing of a failed turn applies: history and KV go back to its start.
  if (!seq->outcome->ok()) {
    Undo(s, *seq);
  } else if (seq->messages_before >= 0 && seq->generate()) {
    s.messages.push_back(
        ChatMessage{.role = "assistant", .content = seq->reply + seq->tail});
  }
  if (s.ephemeral) {
    absl::StatusOr<GenerateResult> result = Result(*seq, s);
    sessions_->Delete(s.id);
    return seq->call->Finish(std::move(result));
  }
  // The session stays busy, and the reply waits, until the turn is on disk.
  tiers_->Log(
      s, OnEngineThread([this, id = s.id,
                         seq = std::move(seq)](absl::Status logged) mutable {
        Session* s = sessions_->Get(id);
        if (s == nullptr) {
          return seq->call->Finish(absl::NotFoundError(absl::StrFormat(
              "session %s was removed before its turn was written", id)));
        }
        if (!logged.ok()) {
          // What is on disk is the history before this turn; so is memory.
          Undo(*s, *seq);
          if (seq->outcome->ok()) {
            seq->outcome = absl::UnavailableError(absl::StrFormat(
                "session %s: the turn could not be made durable, so it was not "
                "applied: %s",
                id, logged.message()));
          }
        }
        absl::StatusOr<GenerateResult> result = Result(*seq, *s);
        seq->call->Finish(std::move(result));
      }));
}

void Engine::Undo(Session& s, const Sequence& seq) {
  RollBack(s, seq.history_before);
  s.tokens.insert(s.tokens.end(), seq.replaced.begin(), seq.replaced.end());
  if (seq.messages_before >= 0) s.messages.resize(seq.messages_before);
}

void Engine::RollBack(Session& s, int64_t n) {
  if (static_cast<int64_t>(s.tokens.size()) > n) s.tokens.resize(n);
  if (s.kv.table.num_tokens() > n) s.kv.Truncate(n);
}

absl::StatusOr<GenerateResult> Engine::Result(const Sequence& seq, Session& s) {
  const absl::Time now = absl::Now();
  s.busy = false;
  s.last_used = now;
  if (!seq.outcome->ok()) return seq.outcome->status();
  const FinishReason reason = **seq.outcome;
  GenerateResult r;
  r.finish_reason = reason;
  r.usage = seq.usage;
  r.text = seq.tail;
  if (seq.started) {
    r.timings.queue_seconds =
        absl::ToDoubleSeconds(seq.admitted - seq.submitted);
    const absl::Time prefill_end =
        seq.usage.generated_tokens > 0 ? seq.first_token : now;
    r.timings.prefill_seconds =
        absl::ToDoubleSeconds(prefill_end - seq.admitted);
    if (seq.usage.generated_tokens > 0) {
      r.timings.decode_seconds =
          absl::ToDoubleSeconds(seq.last_token - seq.first_token);
    }
  }
  if (!s.ephemeral) {
    r.session_id = s.id;
    r.session = Describe(s, false);
  }
  return r;
}

void Engine::ReportStats() {
  if (observer_ == nullptr) return;
  EngineStats st;
  st.kv_used_bytes = pool_->used_bytes();
  st.kv_capacity_bytes = pool_->capacity_bytes();
  st.kv_blocks_free = pool_->num_free_blocks();
  st.kv_blocks_cached = pool_->num_cached_blocks();
  st.kv_blocks_used = pool_->num_used_blocks();
  st.kv_blocks_shared = pool_->num_shared_blocks();
  st.prefix_cache_queried_tokens = prefix_cache_->queried_tokens();
  st.prefix_cache_hit_tokens = prefix_cache_->hit_tokens();
  sessions_->ForEach([&](const Session& s) {
    switch (tiers_->TierOf(s)) {
      case Tier::kRam:
        ++st.sessions_ram;
        break;
      case Tier::kDisk:
        ++st.sessions_disk;
        break;
      case Tier::kTokens:
        ++st.sessions_tokens;
        break;
    }
  });
  st.running = scheduler_->num_running();
  st.waiting = scheduler_->num_waiting();
  observer_->OnStats(st);
}

}  // namespace kvserve

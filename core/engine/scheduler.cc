#include "core/engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/util/status_reason.h"

namespace kvserve {

Scheduler::Scheduler(const SchedulerOptions& options, BlockPool* pool,
                     PrefixCache* prefix_cache, SessionTiers* tiers,
                     EngineObserver* observer)
    : options_(options),
      pool_(pool),
      prefix_cache_(prefix_cache),
      tiers_(tiers),
      observer_(observer) {}

void Scheduler::Enqueue(std::unique_ptr<Sequence> seq) {
  waiting_.push_back(std::move(seq));
}

void Scheduler::EnqueueStarted(std::unique_ptr<Sequence> seq) {
  waiting_.push_front(std::move(seq));
}

void Scheduler::Admit() {
  while (!waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_running) {
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    if (!seq->started) {
      seq->call->LeaveQueue();
      const absl::Time now = absl::Now();
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
      // Blocks still cached (a spilled session's among them) first; a KV
      // snapshot for the positions past them.
      const bool on_disk = tiers_->TierOf(s) == Tier::kDisk;
      MatchPrefix(*seq, /*retry=*/false);
      if (on_disk) RestoreSnapshot(*seq);
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

StepPlan Scheduler::Plan() {
  for (auto& seq : running_) {
    if (!seq->finished() && seq->call->cancelled()) {
      seq->outcome = FinishReason::kCancelled;
    }
  }
  // Decode tokens first, then prefill chunks, each in admission order.
  std::vector<Sequence*> order;
  for (auto& seq : running_) {
    if (!seq->finished() && seq->pending() == 1) order.push_back(seq.get());
  }
  const int64_t decode_tokens = order.size();
  for (auto& seq : running_) {
    if (!seq->finished() && seq->pending() != 1) order.push_back(seq.get());
  }
  for (Sequence* seq : order) seq->scheduled = false;

  StepPlan plan;
  int64_t budget = options_.max_batch_tokens;
  int64_t prefilling = 0;
  for (size_t i = decode_tokens; i < order.size(); ++i) {
    if (!order[i]->preempted && order[i]->pending() > 0) ++prefilling;
  }
  int64_t prefill_budget = PrefillBudget(decode_tokens, prefilling);
  const int64_t bt = pool_->options().block_tokens;
  for (Sequence* seq : order) {
    if (seq->preempted || budget == 0) continue;
    Session& s = *seq->session;
    if (seq->usage.generated_tokens == 0) {
      // Blocks another sequence finished since this one was admitted.
      const int64_t adopted = MatchPrefix(*seq, /*retry=*/true);
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
    if ((static_cast<int64_t>(s.tokens.size()) + bt - 1) / bt >
        pool_->num_blocks()) {
      seq->outcome = WithReason(
          absl::ResourceExhaustedError(absl::StrFormat(
              "the KV cache (%d bytes) cannot hold a context of %d tokens; "
              "raise --kv_cache_bytes",
              pool_->capacity_bytes(), s.tokens.size())),
          kReasonKvCacheFull);
      continue;
    }
    if (!ReserveKv(*seq, start + n).ok()) continue;
    seq->scheduled = true;
    budget -= n;
    if (decode) {
      ++plan.decode_tokens;
    } else {
      prefill_budget -= n;
    }
    const bool last = start + n == static_cast<int64_t>(s.tokens.size());
    plan.batch.push_back(
        SeqChunk{.kv = &s.kv.table,
                 .start_pos = start,
                 .tokens = absl::MakeConstSpan(s.tokens).subspan(start, n),
                 .want_logits = last && seq->generate()});
    plan.seqs.push_back(seq);
    plan.tokens += n;
  }
  return plan;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::Retire(
    const StepPlan& plan, const StepResult& result) {
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& seq = *plan.seqs[i];
    CachedKv& kv = seq.session->kv;
    if (result.forward.ok()) {
      prefix_cache_->Register(seq.session->tokens, kv);
    } else {
      // The step's positions hold no valid K/V.
      const int64_t valid = plan.batch[i].start_pos;
      if (kv.table.num_tokens() > valid) kv.Truncate(valid);
      if (!seq.finished()) seq.outcome = result.forward;
    }
  }
  if (result.forward.ok() && !plan.batch.empty()) {
    LearnStepCost(plan.decode_tokens, plan.tokens, result.seconds);
  }

  std::vector<std::unique_ptr<Sequence>> done;
  std::deque<std::unique_ptr<Sequence>> still_running;
  for (auto& seq : running_) {
    if (!seq->finished() && !seq->generate() && seq->pending() == 0) {
      seq->outcome = FinishReason::kLength;
    }
    if (seq->finished()) {
      done.push_back(std::move(seq));
    } else if (seq->preempted) {
      seq->preempted = false;
      waiting_.push_front(std::move(seq));
    } else {
      still_running.push_back(std::move(seq));
    }
  }
  running_.swap(still_running);
  return done;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::TakeAll() {
  std::vector<std::unique_ptr<Sequence>> all;
  for (auto* queue : {&running_, &waiting_}) {
    for (auto& seq : *queue) all.push_back(std::move(seq));
    queue->clear();
  }
  return all;
}

int64_t Scheduler::PrefillBudget(int64_t decode_tokens,
                                 int64_t prefilling) const {
  const int64_t room = options_.max_batch_tokens - decode_tokens;
  if (decode_tokens == 0 || options_.max_step_slowdown <= 0) return room;
  // Until a prefill step has been timed, probe with a small chunk.
  if (decode_step_seconds_ <= 0 || prefill_token_seconds_ <= 0) {
    return std::min<int64_t>(room, kProbePrefillChunk);
  }
  const double allowed = (options_.max_step_slowdown - 1) *
                         std::max<int64_t>(prefilling, 1) *
                         decode_step_seconds_ / prefill_token_seconds_;
  // At least one token, so that a prompt always makes progress.
  return std::clamp<int64_t>(static_cast<int64_t>(allowed), 1,
                             std::max<int64_t>(room, 1));
}

void Scheduler::LearnStepCost(int64_t decode_tokens, int64_t tokens,
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

int64_t Scheduler::MatchPrefix(Sequence& seq, bool retry) {
  Session& s = *seq.session;
  absl::Span<const int32_t> tokens = s.tokens;
  // A generating sequence needs the last token's logits: leave it pending.
  if (seq.generate() && !tokens.empty()) tokens.remove_suffix(1);
  return prefix_cache_->Match(tokens, s.kv, /*new_lookup=*/!retry);
}

void Scheduler::RestoreSnapshot(Sequence& seq) {
  Session& s = *seq.session;
  // A generating sequence needs the last token's logits: leave it pending.
  const int64_t limit = s.tokens.size() - (seq.generate() ? 1 : 0);
  SnapshotRead read = tiers_->ReadSnapshot(s, limit);
  if (read.positions <= 0 || !ReserveKv(seq, read.positions).ok()) return;
  tiers_->Restore(s, read);
}

absl::Status Scheduler::ReserveKv(Sequence& seq, int64_t end) {
  while (true) {
    absl::Status s = prefix_cache_->Extend(seq.session->kv, end);
    if (!absl::IsResourceExhausted(s)) return s;
    if (tiers_->SpillLeastRecentlyUsed()) {
      if (observer_) observer_->OnEviction("memory");
      continue;
    }
    // Preempt the most recently admitted sequence that holds blocks and is
    // not in this step's batch yet: possibly `seq` itself.
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      Sequence* candidate = it->get();
      if (!candidate->preempted && !candidate->scheduled &&
          !candidate->finished() &&
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

}  // namespace kvserve

// Several choices of one prompt (OpenAI's `n`): forked from the first once
// its prompt is computed, so that n choices cost one prefill. Kept apart
// from the loop (engine.cc).
#include <memory>
#include <utility>
#include <vector>

#include "core/engine/engine.h"

namespace kvserve {

void Engine::ForkChoices(Sequence& first, absl::Span<const float> logits) {
  const Session& from = *first.session;
  const absl::Time now = absl::Now();
  std::vector<std::unique_ptr<Sequence>> started;
  for (std::shared_ptr<GenerateCall>& call : first.call->TakeChoices()) {
    // Ephemeral: a choice is not a session's turn, and never counts
    // against the session limits.
    Session* s = sessions_->Create(from.owner, std::nullopt, now);
    s->ephemeral = true;
    s->busy = true;
    s->tokens = from.tokens;
    s->kv = from.kv.Fork();
    auto seq = std::make_unique<Sequence>(std::move(call), s, first.submitted,
                                          matchers_.get());
    // Admitted with the first: its prompt is the first's, computed once.
    seq->started = true;
    seq->admitted = first.admitted;
    seq->usage.prompt_tokens = first.usage.prompt_tokens;
    seq->usage.cached_prompt_tokens = first.usage.cached_prompt_tokens;
    absl::StatusOr<int32_t> token = seq->Sample(logits);
    if (!token.ok()) {
      seq->outcome = token.status();
    } else if (std::optional<FinishReason> end =
                   EmitToken(*seq, *token, logits)) {
      seq->outcome = *end;
    }
    if (seq->finished()) {
      Finish(std::move(seq));
      continue;
    }
    started.push_back(std::move(seq));
  }
  // Each goes to the front of the queue: the last first keeps their order.
  for (auto it = started.rbegin(); it != started.rend(); ++it) {
    scheduler_->EnqueueStarted(std::move(*it));
  }
}

}  // namespace kvserve

// Sequence: one Generate or Append from the moment it is queued until it
// finishes; the unit the scheduler plans with.
#ifndef KVSERVE_CORE_ENGINE_SEQUENCE_H_
#define KVSERVE_CORE_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/constrain/constraint.h"
#include "core/engine/requests.h"
#include "core/sampling/sampler.h"
#include "core/session/session_store.h"
#include "core/text/stop_matcher.h"
#include "core/text/utf8_stream_decoder.h"

namespace kvserve {

struct Sequence {
  // REQUIRES: session->tokens already hold the turn's input; `matchers`
  // is the model's (not null for a call with a grammar).
  Sequence(std::shared_ptr<GenerateCall> c, Session* s, absl::Time t,
           constrain::MatcherCache* matchers)
      : call(std::move(c)),
        session(s),
        sampler(call->params().sampling),
        stop(call->params().stop),
        submitted(t) {
    if (!s->tokens.empty()) prev_token = s->tokens.back();
    sampler.AddContext(s->tokens);
    if (call->params().grammar != nullptr && matchers != nullptr) {
      constraint = std::make_unique<constrain::Constraint>(
          matchers->Get(call->params().grammar),
          call->params().grammar_triggers);
    }
  }

  // The next token from the step's logits: drawn by the sampler, among
  // the tokens the grammar allows when there is one (which takes it).
  absl::StatusOr<int32_t> Sample(absl::Span<const float> logits) {
    if (constraint == nullptr) return sampler.Sample(logits);
    int32_t token;
    if (!constraint->active()) {
      token = sampler.Sample(logits);  // a lazy grammar not triggered yet
    } else {
      absl::StatusOr<const std::vector<uint64_t>*> allowed =
          constraint->Allowed();
      if (!allowed.ok()) return allowed.status();
      token = sampler.Sample(logits, *allowed);
    }
    if (absl::Status s = constraint->Accept(token); !s.ok()) return s;
    return token;
  }
  // A grammar's sentence is complete and nothing may follow it.
  bool Complete() const {
    return constraint != nullptr && constraint->Complete();
  }

  const GenerateParams& params() const { return call->params(); }
  bool generate() const { return params().generate; }
  // Tokens of the history whose KV is not computed yet.
  int64_t pending() const {
    return session->tokens.size() - session->kv.table.num_tokens();
  }
  bool finished() const { return outcome.has_value(); }

  std::shared_ptr<GenerateCall> call;
  Session* session;  // null once finished and handed back
  Sampler sampler;
  std::unique_ptr<constrain::Constraint> constraint;  // null: none
  Utf8StreamDecoder utf8;
  StopMatcher stop;
  absl::Time submitted, admitted, first_token, last_token;
  bool started = false;    // admitted once: usage.prompt_tokens is set
  bool preempted = false;  // its KV was taken; back to waiting after the step
  bool scheduled = false;  // in the step being planned
  // Set when the sequence is done: how it ended (the client's cancel flag
  // stays the client's; a failure is an error status here).
  std::optional<absl::StatusOr<FinishReason>> outcome;
  int32_t prev_token = -1;
  Usage usage;
  // The history is put back as [0, history_before) + replaced if the turn
  // fails: a chat turn replaces the history from where the conversation's
  // rendering departs from it.
  int64_t history_before = 0;
  std::vector<int32_t> replaced;
  // A chat turn: the conversation's length before it, and the reply's text
  // as streamed (the next assistant message); -1: not a chat turn.
  int64_t messages_before = -1;
  std::string reply;
  std::string tail;  // text held back until the end
};

// Each sequence's next token from its row of the step's logits (seqs[i]
// from logits[i]), the sequences in parallel on the calling thread's
// OpenMP threads when the rows are large enough to pay for it: a draw at
// temperature 1 over 102,400 tokens costs about 1.1 ms, and a grammar's
// mask up to a few ms on a state's first visit. Each sequence's sampler
// and constraint are its own; their grammars' matchers are thread-safe.
std::vector<absl::StatusOr<int32_t>> SampleAll(
    absl::Span<Sequence* const> seqs,
    absl::Span<const absl::Span<const float>> logits);

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_SEQUENCE_H_

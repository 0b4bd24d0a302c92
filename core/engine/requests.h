// The engine's request and result types: plain C++ mirrors of the API's
// messages, with no protobuf in them.
#ifndef KVSERVE_CORE_ENGINE_REQUESTS_H_
#define KVSERVE_CORE_ENGINE_REQUESTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/chat/chat_template.h"
#include "core/constrain/grammar.h"
#include "core/sampling/sampler.h"

namespace kvserve {

// A chat turn's new messages. The engine appends them to the session's
// conversation (an ephemeral session starts with none), renders the whole
// conversation with the model's chat template, tokenizes it with special
// tokens matched, keeps the longest common token prefix with the session's
// history (reported as cached) and prefills the rest. A Generate renders
// with add_generation_prompt; its reply becomes the next assistant message.
struct ChatInput {
  std::vector<ChatMessage> messages{};
  // The tools the template offers the model (ChatTemplateInput::tools_json),
  // for this turn's rendering; not kept with the session, so a client sends
  // them with every turn, as OpenAI's API has it.
  std::string tools_json{};
  // A template that does not render tools is shown them in a system
  // message (constrain::GenericToolPrompt); false when the model is not to
  // call them (tool_choice "none").
  bool tool_prompt = true;
};

// Text (tokenized by the engine), token ids, or chat messages. Empty text =
// no input.
using Input = std::variant<std::string, std::vector<int32_t>, ChatInput>;

enum class FinishReason { kLength, kStop, kEos, kContextFull, kCancelled };

struct Usage {
  int64_t prompt_tokens = 0;         // the whole context this turn started from
  int64_t cached_prompt_tokens = 0;  // those whose KV was reused
  int64_t generated_tokens = 0;
};

struct Timings {
  double queue_seconds = 0;
  double prefill_seconds = 0;  // admission until the first token is sampled
  double decode_seconds = 0;   // first generated token to the last
};

struct SessionInfo {
  std::string id;
  std::string owner;
  int64_t num_tokens = 0;
  int64_t kv_tokens = 0;  // positions whose KV is held
  int64_t kv_bytes = 0;
  std::string tier;  // "ram" | "disk" | "tokens" (TierName)
  absl::Time create_time;
  absl::Time last_used;
  std::optional<absl::Duration> ttl;
  bool busy = false;
  std::vector<int32_t> tokens;        // only when asked for
  std::vector<ChatMessage> messages;  // the conversation; with the tokens
};

struct SessionList {
  std::vector<SessionInfo> sessions;
  std::string next_page_token;
};

struct GeneratedToken {
  int32_t token_id = 0;
  std::string text;  // valid UTF-8, possibly empty
  // A control token that does not end the generation, by its piece
  // ("<|python_tag|>", "[TOOL_CALLS]"): not text, but where a tool call
  // begins in formats that mark calls with one; empty otherwise.
  std::string control{};
  std::optional<Logprobs> logprobs;
};

struct GenerateResult {
  FinishReason finish_reason = FinishReason::kLength;
  Usage usage;
  Timings timings;
  std::string session_id;  // empty for an ephemeral session
  std::string text;        // a held-back tail released at the end
  // The session after the request (not for an ephemeral session).
  std::optional<SessionInfo> session;
};

// Receives one request's output. Called on the engine thread; must not
// block. OnFinish is called exactly once, last.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void OnToken(GeneratedToken token) = 0;
  virtual void OnFinish(absl::StatusOr<GenerateResult> result) = 0;
};

struct GenerateParams {
  std::string session_id;  // empty: an ephemeral session
  std::string owner;
  Input prompt;
  // Text prompts only: match control tokens in the text (EncodeOptions::
  // parse_special). Chat renderings always match them.
  bool parse_special = false;
  bool generate = true;  // false: Append (prefill only)
  int max_tokens = 0;    // > 0
  SamplingOptions sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; else 0..20 alternatives
  // Constrained decoding: every token drawn keeps the output a prefix of a
  // sentence of this grammar, the end of generation comes only where it
  // may end, and a complete sentence that nothing may extend ends the
  // turn (kStop). Null: unconstrained.
  std::shared_ptr<const constrain::Grammar> grammar;
  // With a grammar: it holds only from the first of these texts the output
  // writes (a control token counts as its piece), its sentences beginning
  // with one; before it the output is free (constrain::Constraint). Empty:
  // from the start.
  std::vector<std::string> grammar_triggers;
};

// OpenAI's `n`: at most this many choices of one prompt.
inline constexpr int kMaxChoices = 128;

// Choice `index`'s params of a request with several choices: `first`'s with
// a seed of its own, so that the choices differ and the same seed and n
// reproduce them all. Choice 0 keeps the seed: it is the request as n = 1
// would run it.
inline GenerateParams ChoiceParams(GenerateParams first, int index) {
  first.sampling.seed ^= static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15u;
  return first;
}

// One Generate or Append in flight. The server keeps it alive until
// OnFinish; Cancel() may be called from any thread, the rest from the
// engine's.
class GenerateCall {
 public:
  GenerateCall(GenerateParams params, TokenSink* sink)
      : params_(std::move(params)), sink_(sink) {}
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  const GenerateParams& params() const { return params_; }
  TokenSink* sink() const { return sink_; }

  // The engine's request queue (--max_queued_requests): the call holds its
  // place, an object whose destruction gives the place back, from when it
  // is accepted until it is first admitted to run (LeaveQueue) or ends.
  void HoldQueuePlace(std::shared_ptr<void> place) {
    queue_place_ = std::move(place);
  }
  void LeaveQueue() { queue_place_.reset(); }
  // Ends the call: gives back its queue place, then tells the sink (whose
  // client may send the next request at once). Choices not forked yet end
  // with the same result.
  void Finish(absl::StatusOr<GenerateResult> result) {
    LeaveQueue();
    for (auto& choice : TakeChoices()) choice->Finish(result);
    sink_->OnFinish(std::move(result));
  }

  // OpenAI's `n`: the calls of choices 1..n-1 of this Generate's prompt,
  // added before Submit (ChoiceParams makes their params). They share its
  // prefill: once the prompt's last logits are computed, each is forked
  // from this call's session into an ephemeral one (the KV shared
  // copy-on-write, as ForkSession shares it), draws its first token from
  // those logits and decodes on its own. A session keeps only this call's
  // turn. Should this call end before the fork (refused, failed,
  // cancelled), they end with its result.
  void AddChoice(std::shared_ptr<GenerateCall> choice) {
    choices_.push_back(std::move(choice));
  }
  const std::vector<std::shared_ptr<GenerateCall>>& choices() const {
    return choices_;
  }
  std::vector<std::shared_ptr<GenerateCall>> TakeChoices() {
    return std::exchange(choices_, {});
  }

 private:
  const GenerateParams params_;
  TokenSink* const sink_;
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<void> queue_place_;
  std::vector<std::shared_ptr<GenerateCall>> choices_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_REQUESTS_H_

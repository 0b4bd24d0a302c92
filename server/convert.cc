#include "server/convert.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/constrain/json_grammar.h"
#include "core/constrain/json_schema.h"
#include "core/constrain/tool_call_grammar.h"
#include "core/text/utf8_stream_decoder.h"

namespace kvserve {
namespace {

constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;

void ToProto(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t ns = absl::ToUnixNanos(t);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kContextFull:
      return v1::FINISH_REASON_CONTEXT_FULL;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

ChatMessage FromProto(const v1::ChatMessage& m) {
  return ChatMessage{.role = m.role(),
                     .content = m.content(),
                     .name = m.name(),
                     .tool_call_id = m.tool_call_id(),
                     .tool_calls_json = m.tool_calls_json()};
}

Input FromProto(const v1::Input& input) {
  if (input.has_tokens()) {
    return std::vector<int32_t>(input.tokens().ids().begin(),
                                input.tokens().ids().end());
  }
  if (input.has_messages()) {
    ChatInput chat;
    for (const v1::ChatMessage& m : input.messages().messages()) {
      chat.messages.push_back(FromProto(m));
    }
    chat.tools_json = input.messages().tools_json();
    return chat;
  }
  return input.text();
}

absl::StatusOr<std::shared_ptr<const constrain::Grammar>> FromProto(
    const v1::Constraint& constraint) {
  switch (constraint.kind_case()) {
    case v1::Constraint::KIND_NOT_SET:
      return nullptr;
    case v1::Constraint::kJsonObject:
      if (!constraint.json_object()) return nullptr;
      return constrain::JsonObjectGrammar();
    case v1::Constraint::kGrammar: {
      absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
          constrain::CompileGbnf(constraint.grammar());
      if (!g.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "constraint.grammar does not compile: ", g.status().message()));
      }
      return *std::move(g);
    }
    case v1::Constraint::kJsonSchema: {
      absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
          constrain::CompileJsonSchema(constraint.json_schema());
      if (!g.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constraint.json_schema cannot be honoured: ",
                         g.status().message()));
      }
      return *std::move(g);
    }
  }
  return nullptr;
}

absl::StatusOr<GenerateParams> FromProto(const v1::GenerateRequest& request,
                                         int default_max_tokens) {
  GenerateParams p;
  p.session_id = request.session_id();
  p.owner = request.owner();
  p.prompt = FromProto(request.prompt());
  p.parse_special = request.prompt().parse_special();
  // Ranges are checked by the engine (ValidateGenerateParams).
  p.max_tokens =
      request.has_max_tokens() ? request.max_tokens() : default_max_tokens;
  const v1::SamplingParams& s = request.sampling();
  if (s.has_temperature()) p.sampling.temperature = s.temperature();
  if (s.has_top_k()) p.sampling.top_k = s.top_k();
  if (s.has_top_p()) p.sampling.top_p = s.top_p();
  if (s.has_min_p()) p.sampling.min_p = s.min_p();
  PenaltyOptions& penalties = p.sampling.penalties;
  if (s.has_presence_penalty()) {
    penalties.presence_penalty = s.presence_penalty();
  }
  if (s.has_frequency_penalty()) {
    penalties.frequency_penalty = s.frequency_penalty();
  }
  if (s.has_repeat_penalty()) penalties.repeat_penalty = s.repeat_penalty();
  if (s.has_repeat_last_n()) penalties.repeat_last_n = s.repeat_last_n();
  penalties.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  p.sampling.seed =
      s.has_seed() ? s.seed() : absl::Uniform<uint64_t>(absl::BitGen());
  if (request.stop_size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrFormat("at most %d stop strings, got %d", kMaxStopStrings,
                        request.stop_size()));
  }
  for (const std::string& stop : request.stop()) {
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stop strings must have 1 to %d bytes, got %d",
                          kMaxStopBytes, stop.size()));
    }
    p.stop.push_back(stop);
  }
  p.ignore_eos = request.ignore_eos();
  absl::StatusOr<std::shared_ptr<const constrain::Grammar>> grammar =
      FromProto(request.constraint());
  if (!grammar.ok()) return grammar.status();
  p.grammar = *std::move(grammar);
  if (request.has_logprobs()) p.logprobs = request.logprobs();
  return p;
}

absl::StatusOr<std::vector<GenerateParams>> ChoicesFromProto(
    const v1::GenerateRequest& request, int default_max_tokens) {
  if (request.n() < 0 || request.n() > kMaxChoices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n must be in [0, %d] (0 or 1: one choice), got %d",
                        kMaxChoices, request.n()));
  }
  absl::StatusOr<GenerateParams> first = FromProto(request, default_max_tokens);
  if (!first.ok()) return first.status();
  std::vector<GenerateParams> choices;
  for (int i = 0; i < std::max(request.n(), 1); ++i) {
    choices.push_back(ChoiceParams(*first, i));
  }
  return choices;
}

absl::StatusOr<std::optional<absl::Duration>> TtlFromProto(
    bool has_ttl, int64_t ttl_seconds) {
  if (!has_ttl) return std::nullopt;
  if (ttl_seconds <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ttl_seconds must be positive when set, got %d", ttl_seconds));
  }
  if (ttl_seconds > kMaxTtlSeconds) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ttl_seconds must be at most %d (100 years; unset means no TTL), got "
        "%d",
        kMaxTtlSeconds, ttl_seconds));
  }
  return absl::Seconds(ttl_seconds);
}

absl::StatusOr<std::optional<constrain::ParseOptions>> UseTools(
    const constrain::ReplyFormat& format,
    const std::vector<constrain::ToolSpec>& tools,
    const constrain::ToolChoice& choice, bool parallel, bool reasoning_inline,
    GenerateParams& params) {
  if (absl::Status s = constrain::CheckToolChoice(choice, tools); !s.ok()) {
    return s;
  }
  if (auto* chat = std::get_if<ChatInput>(&params.prompt)) {
    chat->tool_prompt = choice.mode != constrain::ToolChoice::Mode::kNone;
  }
  absl::StatusOr<constrain::ToolCallConstraint> c =
      constrain::ToolCallGrammar(format, tools, choice, parallel);
  if (!c.ok()) return c.status();
  if (c->grammar != nullptr && params.grammar != nullptr &&
      (choice.mode == constrain::ToolChoice::Mode::kRequired ||
       choice.mode == constrain::ToolChoice::Mode::kFunction)) {
    return absl::InvalidArgumentError(
        "a tool_choice that requires a call cannot be given with another "
        "constraint (response_format, grammar, json_schema): one constraint "
        "per request");
  }
  if (c->grammar != nullptr && params.grammar == nullptr) {
    params.grammar = std::move(c->grammar);
    params.grammar_triggers = std::move(c->triggers);
  }
  constrain::ParseOptions o;
  o.format = format;
  o.tools = !tools.empty() && choice.mode != constrain::ToolChoice::Mode::kNone;
  o.single_call = !parallel;
  o.split_reasoning = !reasoning_inline;
  if (!o.tools && !(format.reasoning && o.split_reasoning)) {
    return std::nullopt;
  }
  return o;
}

absl::StatusOr<std::optional<constrain::ParseOptions>> ToolsFromProto(
    const v1::GenerateRequest& request, const constrain::ReplyFormat& format,
    std::vector<GenerateParams>& choices) {
  if (!request.prompt().has_messages()) {
    if (request.has_tool_choice() || request.has_parallel_tool_calls()) {
      return absl::InvalidArgumentError(
          "tool_choice and parallel_tool_calls need a chat prompt "
          "(prompt.messages)");
    }
    return std::nullopt;
  }
  std::vector<constrain::ToolSpec> tools;
  if (const std::string& json = request.prompt().messages().tools_json();
      !json.empty()) {
    absl::StatusOr<std::vector<constrain::ToolSpec>> parsed =
        constrain::ParseTools(json);
    if (!parsed.ok()) return parsed.status();
    tools = *std::move(parsed);
  }
  constrain::ToolChoice choice;
  switch (request.tool_choice().mode()) {
    case v1::ToolChoice::MODE_NONE:
      choice.mode = constrain::ToolChoice::Mode::kNone;
      break;
    case v1::ToolChoice::MODE_REQUIRED:
      choice.mode = constrain::ToolChoice::Mode::kRequired;
      break;
    case v1::ToolChoice::MODE_FUNCTION:
      choice.mode = constrain::ToolChoice::Mode::kFunction;
      choice.function = request.tool_choice().function();
      break;
    case v1::ToolChoice::MODE_AUTO:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tool_choice.mode ", request.tool_choice().mode(),
                       " is not one of AUTO, NONE, REQUIRED, FUNCTION"));
  }
  const bool parallel =
      !request.has_parallel_tool_calls() || request.parallel_tool_calls();
  // The grammar is compiled once: the other choices are choice 0 with
  // their own seeds (ChoiceParams), as ChoicesFromProto made them.
  absl::StatusOr<std::optional<constrain::ParseOptions>> parse = UseTools(
      format, tools, choice, parallel, request.reasoning_inline(), choices[0]);
  if (!parse.ok()) return parse.status();
  for (size_t i = 1; i < choices.size(); ++i) {
    choices[i] = ChoiceParams(choices[0], static_cast<int>(i));
  }
  return parse;
}

void ToProto(const constrain::ReplyDelta& delta, v1::ReplyDelta* out) {
  out->set_content(delta.content);
  out->set_reasoning(delta.reasoning);
  for (const constrain::ReplyDelta::Call& c : delta.calls) {
    v1::ReplyDelta::ToolCallDelta* d = out->add_tool_calls();
    d->set_index(c.index);
    d->set_id(c.id);
    d->set_name(c.name);
    d->set_arguments(c.arguments);
  }
}

void ToProto(const constrain::ParsedReply& reply, v1::Reply* out) {
  out->set_content(reply.content);
  out->set_reasoning(reply.reasoning);
  for (const constrain::ToolCall& c : reply.calls) {
    v1::ToolCall* call = out->add_tool_calls();
    call->set_id(c.id);
    call->set_name(c.name);
    call->set_arguments(c.arguments);
  }
}

void ToProto(const SessionInfo& info, v1::Session* out) {
  out->set_session_id(info.id);
  out->set_num_tokens(info.num_tokens);
  out->set_kv_bytes(info.kv_bytes);
  out->set_tier(info.tier);
  ToProto(info.create_time, out->mutable_create_time());
  ToProto(info.last_used, out->mutable_last_used_time());
  if (info.ttl.has_value()) {
    out->set_ttl_seconds(absl::ToInt64Seconds(*info.ttl));
  }
  out->set_owner(info.owner);
  out->mutable_token_ids()->Add(info.tokens.begin(), info.tokens.end());
  for (const ChatMessage& m : info.messages) {
    v1::ChatMessage* o = out->add_messages();
    o->set_role(m.role);
    o->set_content(m.content);
    o->set_name(m.name);
    o->set_tool_call_id(m.tool_call_id);
    o->set_tool_calls_json(m.tool_calls_json);
  }
  out->set_busy(info.busy);
}

void ToProto(const Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_cached_prompt_tokens(usage.cached_prompt_tokens);
  out->set_generated_tokens(usage.generated_tokens);
}

void ToProto(const GeneratedToken& token, const Tokenizer& tokenizer,
             v1::GeneratedToken* out) {
  out->set_token_id(token.token_id);
  out->set_text(token.text);
  if (!token.logprobs.has_value()) return;
  out->set_logprob(token.logprobs->chosen);
  for (const TokenLogprob& alt : token.logprobs->top) {
    v1::TokenLogprob* p = out->add_top_logprobs();
    p->set_token_id(alt.token_id);
    p->set_logprob(alt.logprob);
    // A lone piece may be a partial UTF-8 character: make it valid.
    Utf8StreamDecoder utf8;
    std::string text = utf8.Push(tokenizer.DecodeToken(-1, alt.token_id));
    p->set_text(text + utf8.Flush());
  }
}

void ToProto(const GenerateResult& result, v1::GenerateFinal* out) {
  out->set_finish_reason(ToProto(result.finish_reason));
  ToProto(result.usage, out->mutable_usage());
  v1::Timings* t = out->mutable_timings();
  t->set_queue_seconds(result.timings.queue_seconds);
  t->set_prefill_seconds(result.timings.prefill_seconds);
  t->set_decode_seconds(result.timings.decode_seconds);
  out->set_session_id(result.session_id);
  out->set_text(result.text);
}

}  // namespace kvserve

#include "server/http/openai_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/constrain/grammar.h"
#include "core/constrain/json_grammar.h"
#include "core/constrain/json_schema.h"
#include "core/text/utf8_stream_decoder.h"
#include "core/util/json_depth.h"
#include "core/util/quote.h"
#include "core/util/status_reason.h"
#include "server/convert.h"

namespace kvserve::http {
namespace {

// The gRPC API's limits on stop strings (server/convert.cc).
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;

// What OpenAI reports for a logprob of -inf, which JSON cannot carry.
constexpr float kMinLogprob = -9999.0f;

// Reads the fields of one JSON object; the first wrong type is kept as the
// error (status()) and later reads return nullopt.
class FieldReader {
 public:
  // `prefix` names the object in messages ("messages[2].").
  explicit FieldReader(const Json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  // The value of `key`, nullptr when absent or null.
  const Json* Find(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<std::string> String(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return Fail(key, "a string", *v);
    return v->get<std::string>();
  }
  std::optional<bool> Bool(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return Fail(key, "a boolean", *v);
    return v->get<bool>();
  }
  std::optional<int64_t> Int(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(u);
    }
    if (!v->is_number_integer()) return Fail(key, "an integer", *v);
    return v->get<int64_t>();
  }
  std::optional<double> Number(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return Fail(key, "a number", *v);
    return v->get<double>();
  }
  // An array or object as is.
  const Json* Array(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) return Fail(key, "an array", *v), nullptr;
    return v;
  }
  const Json* Object(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr) return nullptr;
    if (!v->is_object()) return Fail(key, "an object", *v), nullptr;
    return v;
  }

  // A value check of the caller's: INVALID_ARGUMENT naming the field.
  void Invalid(const char* key, absl::string_view what) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("`", prefix_, key, "` ", what));
    }
  }
  std::string Name(const char* key) const { return absl::StrCat(prefix_, key); }

  const absl::Status& status() const { return status_; }

 private:
  std::nullopt_t Fail(const char* key, const char* expected, const Json& v) {
    Invalid(key, absl::StrCat("must be ", expected, ", got ", v.type_name()));
    return std::nullopt;
  }

  const Json& object_;
  const std::string prefix_;
  absl::Status status_;
};

// logit_bias: OpenAI's object of token ids (as strings) to biases, or
// llama-server's list of [id, bias] pairs.
void ReadLogitBias(FieldReader& f,
                   std::vector<std::pair<int32_t, float>>& out) {
  const Json* bias = f.Find("logit_bias");
  if (bias == nullptr) return;
  if (bias->size() > static_cast<size_t>(kMaxLogitBias)) {
    f.Invalid("logit_bias", absl::StrCat("names at most ", kMaxLogitBias,
                                         " tokens, got ", bias->size()));
    return;
  }
  auto add = [&](const Json& id, const Json& value) {
    int64_t token = -1;
    if (id.is_number_integer()) {
      token = id.get<int64_t>();
    } else if (!id.is_string() ||
               !absl::SimpleAtoi(id.get_ref<const std::string&>(), &token)) {
      f.Invalid(
          "logit_bias",
          absl::StrCat(
              "keys must be token ids, got ",
              QuoteClientText(id.is_string() ? id.get<std::string>()
                                             : std::string(id.type_name()))));
      return false;
    }
    if (!value.is_number()) {
      f.Invalid("logit_bias", absl::StrCat("values must be numbers, got ",
                                           value.type_name()));
      return false;
    }
    out.emplace_back(
        static_cast<int32_t>(std::clamp<int64_t>(token, -1, INT32_MAX)),
        static_cast<float>(value.get<double>()));
    return true;
  };
  if (bias->is_object()) {
    for (const auto& [key, value] : bias->items()) {
      if (!add(Json(key), value)) return;
    }
  } else if (bias->is_array()) {
    for (const Json& pair : *bias) {
      if (!pair.is_array() || pair.size() != 2) {
        f.Invalid("logit_bias", "as a list must hold [token id, bias] pairs");
        return;
      }
      if (!add(pair[0], pair[1])) return;
    }
  } else {
    f.Invalid("logit_bias",
              absl::StrCat("must be an object of token ids to biases, got ",
                           bias->type_name()));
  }
}

// Compiles a request's JSON Schema into p.grammar; false (the reader's
// error set, naming `field` and what the schema compiler refused) when it
// cannot be honoured.
bool CompileSchema(const Json& schema, const char* field, FieldReader& f,
                   GenerateParams& p) {
  absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
      constrain::CompileJsonSchema(schema.dump());
  if (!g.ok()) {
    f.Invalid(field,
              absl::StrCat("cannot be honoured: ", g.status().message()));
    return false;
  }
  p.grammar = *std::move(g);
  return true;
}

// Constrained decoding: OpenAI's response_format (text, json_object,
// json_schema) or llama-server's `grammar` (GBNF) and `json_schema`; at most
// one of them. A grammar that does not compile is 400 naming the field and
// where in it.
void ReadConstraint(FieldReader& f, GenerateParams& p) {
  std::vector<const char*> given;
  if (const Json* format = f.Object("response_format")) {
    const Json* type = format->contains("type") ? &(*format)["type"] : nullptr;
    if (type == nullptr || !type->is_string()) {
      f.Invalid("response_format",
                "needs a `type`: \"text\", "
                "\"json_object\" or \"json_schema\"");
      return;
    }
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "json_object") {
      p.grammar = constrain::JsonObjectGrammar();
      given.push_back("response_format");
    } else if (t == "json_schema") {
      const Json* spec =
          format->contains("json_schema") ? &(*format)["json_schema"] : nullptr;
      if (spec == nullptr || !spec->is_object() || !spec->contains("schema") ||
          !(*spec)["schema"].is_object()) {
        f.Invalid("response_format",
                  "of type \"json_schema\" needs `json_schema.schema`, an "
                  "object");
        return;
      }
      if (!CompileSchema((*spec)["schema"],
                         "response_format.json_schema.schema", f, p)) {
        return;
      }
      given.push_back("response_format");
    } else if (t != "text") {
      f.Invalid("response_format",
                absl::StrCat("has an unknown type ", QuoteClientText(t),
                             ": \"text\", \"json_object\" or \"json_schema\""));
      return;
    }
  }
  if (std::optional<std::string> gbnf = f.String("grammar")) {
    absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
        constrain::CompileGbnf(*gbnf);
    if (!g.ok()) {
      f.Invalid("grammar",
                absl::StrCat("does not compile: ", g.status().message()));
      return;
    }
    p.grammar = *std::move(g);
    given.push_back("grammar");
  }
  if (const Json* schema = f.Find("json_schema")) {
    if (!schema->is_object() && !schema->is_boolean()) {
      f.Invalid("json_schema", "must be a JSON Schema (an object)");
      return;
    }
    if (!CompileSchema(*schema, "json_schema", f, p)) return;
    given.push_back("json_schema");
  }
  if (given.size() > 1) {
    f.Invalid(given[1], absl::StrCat("cannot be given with `", given[0],
                                     "`: one constraint per request"));
  }
}

// OpenAI's chat-completion parameters kvserve does not honour: refused by
// name unless absent, null or the value that asks for nothing (README's
// parameter table lists them with the ones honoured and the advisory ones
// accepted: user, metadata, safety_identifier, prompt_cache_key).
void RefuseUnhonoured(FieldReader& f) {
  struct Unhonoured {
    const char* name;
    Json accepted;  // the one value accepted; null: none (null is absent)
    const char* why;
  };
  // Built once: the accepted values are not parsed per request.
  static const auto* const kChat = new std::vector<Unhonoured>{
      {"audio", nullptr, "is not supported (text only)"},
      {"modalities", Json::array({"text"}), "must be [\"text\"] (text only)"},
      {"prediction", nullptr, "is not supported"},
      {"functions", nullptr,
       "is deprecated by OpenAI and not supported; use `tools`"},
      {"function_call", nullptr,
       "is deprecated by OpenAI and not supported; use `tool_choice`"},
      {"web_search_options", nullptr, "is not supported"},
      {"reasoning_effort", nullptr, "is not supported"},
      {"verbosity", nullptr, "is not supported"},
      {"store", false,
       "is not supported: kvserve keeps conversations in sessions "
       "(`x-session-id`)"},
  };
  for (const Unhonoured& u : *kChat) {
    const Json* v = f.Find(u.name);
    if (v != nullptr && *v != u.accepted) f.Invalid(u.name, u.why);
  }
  if (const Json* tier = f.Find("service_tier");
      tier != nullptr && *tier != "auto" && *tier != "default") {
    f.Invalid("service_tier", "must be \"auto\" or \"default\"");
  }
}

// The fields /v1/chat/completions and /v1/completions share.
void ReadCommon(FieldReader& f, int default_max_tokens,
                GenerationRequest& out) {
  GenerateParams& p = out.params;
  out.model = f.String("model").value_or("");
  if (std::optional<int64_t> n = f.Int("n")) {
    if (*n < 1 || *n > kMaxChoices) {
      f.Invalid("n",
                absl::StrFormat("must be in [1, %d], got %d", kMaxChoices, *n));
    } else {
      out.n = static_cast<int>(*n);
    }
  }
  // max_completion_tokens is the newer name; it wins when both are given.
  std::optional<int64_t> max_tokens = f.Int("max_tokens");
  const char* max_name = "max_tokens";
  if (std::optional<int64_t> m = f.Int("max_completion_tokens")) {
    max_tokens = m;
    max_name = "max_completion_tokens";
  }
  if (max_tokens.has_value() && *max_tokens < 1) {
    f.Invalid(max_name, absl::StrCat("must be at least 1, got ", *max_tokens));
  }
  p.max_tokens = max_tokens.has_value()
                     ? static_cast<int>(std::min<int64_t>(
                           *max_tokens, std::numeric_limits<int>::max()))
                     : default_max_tokens;
  // OpenAI's range; the sampler itself takes any finite temperature.
  const double temperature = f.Number("temperature").value_or(1.0);
  if (!(temperature >= 0 && temperature <= 2)) {
    f.Invalid("temperature",
              absl::StrCat("must be in [0, 2], got ", temperature));
  }
  p.sampling.temperature = static_cast<float>(temperature);
  p.sampling.top_p = static_cast<float>(f.Number("top_p").value_or(1.0));
  // top_k: vLLM's extension; -1 is its "off".
  if (std::optional<int64_t> top_k = f.Int("top_k")) {
    if (*top_k < -1) f.Invalid("top_k", "must be -1 (off) or at least 0");
    p.sampling.top_k =
        *top_k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(*top_k, 1 << 30));
  }
  if (std::optional<int64_t> seed = f.Int("seed")) {
    p.sampling.seed = static_cast<uint64_t>(*seed);
  } else {
    p.sampling.seed = absl::Uniform<uint64_t>(absl::BitGen());
  }
  // min_p, repeat_penalty and repeat_last_n: llama-server's and vLLM's
  // extensions. Ranges are the engine's (ValidateGenerateParams).
  p.sampling.min_p = static_cast<float>(f.Number("min_p").value_or(0.0));
  PenaltyOptions& penalties = p.sampling.penalties;
  penalties.presence_penalty =
      static_cast<float>(f.Number("presence_penalty").value_or(0.0));
  penalties.frequency_penalty =
      static_cast<float>(f.Number("frequency_penalty").value_or(0.0));
  penalties.repeat_penalty =
      static_cast<float>(f.Number("repeat_penalty").value_or(1.0));
  if (std::optional<int64_t> n = f.Int("repeat_last_n")) {
    penalties.repeat_last_n = static_cast<int>(
        std::clamp<int64_t>(*n, -2, std::numeric_limits<int>::max()));
  }
  ReadLogitBias(f, penalties.logit_bias);
  ReadConstraint(f, p);
  if (const Json* stop = f.Find("stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& s : *stop) {
        if (!s.is_string()) {
          f.Invalid("stop", absl::StrCat("must be a string or a list of "
                                         "strings, got a list holding ",
                                         s.type_name()));
          break;
        }
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      f.Invalid("stop", absl::StrCat("must be a string or a list of strings, "
                                     "got ",
                                     stop->type_name()));
    }
  }
  if (static_cast<int>(p.stop.size()) > kMaxStopStrings) {
    f.Invalid("stop", absl::StrFormat("holds %d strings, at most %d",
                                      p.stop.size(), kMaxStopStrings));
  }
  for (const std::string& s : p.stop) {
    if (s.empty() || s.size() > kMaxStopBytes) {
      f.Invalid("stop", absl::StrFormat("strings must have 1 to %d bytes, "
                                        "got %d",
                                        kMaxStopBytes, s.size()));
    }
  }
  p.ignore_eos = f.Bool("ignore_eos").value_or(false);  // vLLM's extension
  out.stream = f.Bool("stream").value_or(false);
  if (const Json* options = f.Object("stream_options")) {
    FieldReader o(*options, "stream_options.");
    out.include_usage = o.Bool("include_usage").value_or(false);
    if (!o.status().ok()) f.Invalid("stream_options", o.status().message());
  }
  p.session_id = f.String("session_id").value_or("");
}

absl::Status TypeError(absl::string_view name, absl::string_view expected,
                       const Json& v) {
  return absl::InvalidArgumentError(
      absl::StrCat("`", name, "` must be ", expected, ", got ", v.type_name()));
}

// A message's content: a string, null or a list of text parts.
absl::StatusOr<std::string> ParseContent(const Json& content,
                                         const std::string& name) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return TypeError(name, "a string, null or a list of parts", content);
  }
  std::vector<std::string> texts;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_name = absl::StrCat(name, "[", i, "]");
    if (!part.is_object()) return TypeError(part_name, "an object", part);
    FieldReader f(part, part_name + ".");
    const std::string type = f.String("type").value_or("");
    std::optional<std::string> text = f.String("text");
    if (!f.status().ok()) return f.status();
    if (type != "text" || !text.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("`", part_name,
                       "` must be a {\"type\": \"text\", \"text\": ...} "
                       "part, got type ",
                       QuoteClientText(type), " (only text is supported)"));
    }
    texts.push_back(*std::move(text));
  }
  return absl::StrJoin(texts, "\n");
}

Json LogprobBytes(absl::string_view bytes) {
  Json out = Json::array();
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string ValidUtf8(absl::string_view bytes) {
  Utf8StreamDecoder utf8;
  return utf8.Push(std::string_view(bytes.data(), bytes.size())) + utf8.Flush();
}

float FiniteLogprob(float logprob) {
  return std::isfinite(logprob) ? logprob : kMinLogprob;
}

Json ChatLogprobs(const std::vector<TokenLogprobEntry>& entries) {
  Json content = Json::array();
  for (const TokenLogprobEntry& e : entries) {
    Json top = Json::array();
    for (const TokenLogprobEntry::Alternative& a : e.top) {
      top.push_back({{"token", ValidUtf8(a.bytes)},
                     {"logprob", FiniteLogprob(a.logprob)},
                     {"bytes", LogprobBytes(a.bytes)}});
    }
    content.push_back({{"token", ValidUtf8(e.bytes)},
                       {"logprob", FiniteLogprob(e.logprob)},
                       {"bytes", LogprobBytes(e.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

Json CompletionLogprobs(const std::vector<TokenLogprobEntry>& entries) {
  Json tokens = Json::array(), token_logprobs = Json::array(),
       top_logprobs = Json::array(), text_offset = Json::array();
  for (const TokenLogprobEntry& e : entries) {
    tokens.push_back(ValidUtf8(e.bytes));
    token_logprobs.push_back(FiniteLogprob(e.logprob));
    Json top = Json::object();
    for (const TokenLogprobEntry::Alternative& a : e.top) {
      top[ValidUtf8(a.bytes)] = FiniteLogprob(a.logprob);
    }
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(e.text_offset);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

Json LogprobsJson(
    Endpoint endpoint,
    const std::optional<std::vector<TokenLogprobEntry>>& entries) {
  if (!entries.has_value()) return nullptr;
  return endpoint == Endpoint::kChatCompletions ? ChatLogprobs(*entries)
                                                : CompletionLogprobs(*entries);
}

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

Json MetaJson(const ResponseMeta& meta, bool chunk) {
  return {{"id", meta.id},
          {"object", ObjectName(meta.endpoint, chunk)},
          {"created", meta.created},
          {"model", meta.model}};
}

}  // namespace

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

Json ErrorJson(int http_status, absl::string_view message,
               absl::string_view code) {
  const char* type = "invalid_request_error";
  if (http_status == 401) type = "authentication_error";
  if (http_status == 403) type = "permission_error";
  if (http_status == 429) type = "rate_limit_error";
  if (http_status >= 500) type = "server_error";
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code}}}};
}

Json ErrorJson(const absl::Status& status) {
  std::string code = ReasonOf(status);
  if (code.empty()) {
    code = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  }
  return ErrorJson(HttpStatus(status.code()), status.message(), code);
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

// nlohmann's parse error, with the text it last read (which may be most of
// a long string) quoted to kMaxQuotedClientBytes.
std::string BoundedJsonError(absl::string_view what) {
  constexpr absl::string_view kLastRead = "last read: '";
  const size_t at = what.find(kLastRead);
  if (at == absl::string_view::npos) return std::string(what);
  absl::string_view read = what.substr(at + kLastRead.size());
  if (!read.empty() && read.back() == '\'') read.remove_suffix(1);
  return absl::StrCat(what.substr(0, at), "last read: ",
                      QuoteClientText({read.data(), read.size()}));
}

// A field name as an error names it: `name`, or quoted when it is long or
// not a plain identifier.
std::string FieldName(absl::string_view key) {
  const bool plain =
      !key.empty() && key.size() <= kMaxQuotedClientBytes &&
      std::all_of(key.begin(), key.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
  return plain ? absl::StrCat("`", key, "`")
               : QuoteClientText({key.data(), key.size()});
}

}  // namespace

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  // What walks the value later (dump, copies, the template's conversion)
  // recurses: nothing deeper than the limit is kept.
  JsonDepthLimit<Json> limit;
  Json json;
  try {
    json = Json::parse(body, limit.callback());
  } catch (const Json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2:
    // ..." without the bracketed id.
    absl::string_view what = e.what();
    if (size_t end = what.find("] "); end != absl::string_view::npos) {
      what.remove_prefix(end + 2);
    }
    // nlohmann's message quotes what it last read, which may be most of a
    // long string: at most kMaxQuotedClientBytes of it.
    return absl::InvalidArgumentError(
        absl::StrFormat("the request body is not valid JSON (byte %d): %s",
                        e.byte, BoundedJsonError(what)));
  } catch (const Json::exception& e) {
    // Not a parse_error: a number too large for a double ("1e999") is
    // out_of_range.406, which escaped to std::terminate and took the server
    // down (found by tests/fuzz/http_request_fuzzer.cc).
    absl::string_view what = e.what();
    if (size_t end = what.find("] "); end != absl::string_view::npos) {
      what.remove_prefix(end + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body is not valid JSON: ", BoundedJsonError(what)));
  }
  if (limit.exceeded()) {
    return limit.Error(limit.top_key().empty() ? "the request body"
                                               : FieldName(limit.top_key()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body must be a JSON object, got ", json.type_name()));
  }
  return json;
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const Json& messages) {
  if (!messages.is_array()) return TypeError("messages", "an array", messages);
  if (messages.empty()) {
    return absl::InvalidArgumentError("`messages` must not be empty");
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string name = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return TypeError(name, "an object", m);
    FieldReader f(m, name + ".");
    ChatMessage message;
    std::optional<std::string> role = f.String("role");
    if (f.status().ok() && (!role.has_value() || role->empty())) {
      f.Invalid("role", "is required");
    }
    message.role = role.value_or("");
    message.name = f.String("name").value_or("");
    message.tool_call_id = f.String("tool_call_id").value_or("");
    if (const Json* calls = f.Array("tool_calls")) {
      message.tool_calls_json = Dump(*calls);
    }
    if (!f.status().ok()) return f.status();
    auto it = m.find("content");
    if (it != m.end() && it->is_null()) {
      message.content_null = true;
    } else if (it != m.end()) {
      absl::StatusOr<std::string> content =
          ParseContent(*it, name + ".content");
      if (!content.ok()) return content.status();
      message.content = *std::move(content);
    }
    out.push_back(std::move(message));
  }
  return out;
}

namespace {

// `tool_choice`: "none", "auto", "required" or {"type": "function",
// "function": {"name"}} naming one of `tools`.
absl::StatusOr<constrain::ToolChoice> ReadToolChoice(
    const Json* v, const std::vector<constrain::ToolSpec>& tools) {
  using Mode = constrain::ToolChoice::Mode;
  constrain::ToolChoice choice;
  if (v == nullptr) return choice;
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "none") {
      choice.mode = Mode::kNone;
    } else if (s == "required") {
      choice.mode = Mode::kRequired;
    } else if (s != "auto") {
      return absl::InvalidArgumentError(absl::StrCat(
          "`tool_choice` must be \"none\", \"auto\", \"required\" or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}, got ",
          QuoteClientText(s)));
    }
  } else if (v->is_object()) {
    FieldReader f(*v, "tool_choice.");
    const std::string type = f.String("type").value_or("");
    const Json* function = f.Object("function");
    std::optional<std::string> name;
    if (function != nullptr) {
      FieldReader fn(*function, "tool_choice.function.");
      name = fn.String("name");
      if (!fn.status().ok()) return fn.status();
    }
    if (!f.status().ok()) return f.status();
    if (type != "function" || !name.has_value()) {
      return absl::InvalidArgumentError(
          "`tool_choice` as an object must be {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}");
    }
    choice.mode = Mode::kFunction;
    choice.function = *name;
  } else {
    return TypeError("tool_choice", "a string or an object", *v);
  }
  if (absl::Status s = constrain::CheckToolChoice(choice, tools); !s.ok()) {
    return s;
  }
  return choice;
}

}  // namespace

absl::StatusOr<GenerationRequest> ParseChatRequest(const Json& body,
                                                   int default_max_tokens) {
  GenerationRequest out;
  FieldReader f(body);
  ReadCommon(f, default_max_tokens, out);
  RefuseUnhonoured(f);
  // logprobs: true with top_logprobs: N alternatives (0..20).
  out.logprobs = f.Bool("logprobs").value_or(false);
  std::optional<int64_t> top = f.Int("top_logprobs");
  if (top.has_value() && (*top < 0 || *top > kMaxTopLogprobs)) {
    f.Invalid("top_logprobs", absl::StrFormat("must be in [0, %d], got %d",
                                              kMaxTopLogprobs, *top));
  }
  if (top.has_value() && !out.logprobs) {
    f.Invalid("top_logprobs", "needs `logprobs`: true");
  }
  out.params.logprobs = out.logprobs ? static_cast<int>(top.value_or(0)) : -1;
  const Json* tools = f.Array("tools");
  if (tools != nullptr) out.tools_json = Dump(*tools);
  out.parallel_tool_calls = f.Bool("parallel_tool_calls").value_or(true);
  if (std::optional<std::string> format = f.String("reasoning_format")) {
    if (*format == "none") {
      out.reasoning_inline = true;
    } else if (*format != "auto" && *format != "deepseek") {
      f.Invalid("reasoning_format",
                absl::StrCat("must be \"auto\", \"deepseek\" or \"none\", "
                             "got ",
                             QuoteClientText(*format)));
    }
  }
  if (!f.status().ok()) return f.status();
  if (tools != nullptr) {
    absl::StatusOr<std::vector<constrain::ToolSpec>> specs =
        constrain::ParseTools(out.tools_json);
    if (!specs.ok()) return specs.status();
    out.tools = *std::move(specs);
  }
  absl::StatusOr<constrain::ToolChoice> choice =
      ReadToolChoice(f.Find("tool_choice"), out.tools);
  if (!choice.ok()) return choice.status();
  out.tool_choice = *std::move(choice);
  const Json* messages = f.Find("messages");
  if (messages == nullptr) {
    return absl::InvalidArgumentError("`messages` is required");
  }
  absl::StatusOr<std::vector<ChatMessage>> parsed = ParseMessages(*messages);
  if (!parsed.ok()) return parsed.status();
  out.params.prompt = ChatInput{.messages = *std::move(parsed)};
  return out;
}

namespace {

// The token ids of a prompt given as a list of them; nullopt when `list`
// is not a non-empty list of integers in [0, 2^31).
std::optional<std::vector<int32_t>> ReadTokenIds(const Json& list) {
  if (!list.is_array() || list.empty()) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return std::nullopt;
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// /v1/completions' `prompt`: a string, a list of strings, a list of token
// ids, or a list of lists of token ids; one Input per prompt.
absl::StatusOr<std::vector<Input>> ReadPrompts(const Json& prompt) {
  std::vector<Input> out;
  if (prompt.is_string()) {
    out.emplace_back(prompt.get<std::string>());
    return out;
  }
  if (std::optional<std::vector<int32_t>> ids = ReadTokenIds(prompt)) {
    out.emplace_back(*std::move(ids));
    return out;
  }
  if (prompt.is_array() && !prompt.empty()) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const Json& p = prompt[i];
      if (p.is_string()) {
        out.emplace_back(p.get<std::string>());
      } else if (std::optional<std::vector<int32_t>> ids = ReadTokenIds(p)) {
        out.emplace_back(*std::move(ids));
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "`prompt[%d]` must be a string or a non-empty list of token ids "
            "(non-negative integers), got %s",
            i, p.type_name()));
      }
    }
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "`prompt` must be a string, a list of strings, a non-empty list of "
      "token ids (non-negative integers) or a list of such lists, got ",
      prompt.is_array() ? std::string("an empty list")
                        : std::string(prompt.type_name())));
}

}  // namespace

absl::StatusOr<GenerationRequest> ParseCompletionRequest(
    const Json& body, int default_max_tokens) {
  GenerationRequest out;
  FieldReader f(body);
  ReadCommon(f, default_max_tokens, out);
  // logprobs: N alternatives (0..20; OpenAI allows 5, vLLM 20).
  if (std::optional<int64_t> n = f.Int("logprobs")) {
    if (*n < 0 || *n > kMaxTopLogprobs) {
      f.Invalid("logprobs", absl::StrFormat("must be in [0, %d], got %d",
                                            kMaxTopLogprobs, *n));
    }
    out.logprobs = true;
    out.params.logprobs = static_cast<int>(*n);
  }
  out.params.parse_special = f.Bool("parse_special").value_or(false);
  out.echo = f.Bool("echo").value_or(false);
  if (out.echo && out.logprobs) {
    f.Invalid("echo",
              "with `logprobs` is not supported (the prompt's "
              "log-probabilities are not computed)");
  }
  // best_of: OpenAI's rule is best_of >= n; equal, every choice made is
  // returned, as without it.
  if (std::optional<int64_t> best_of = f.Int("best_of")) {
    if (*best_of < out.n) {
      f.Invalid("best_of", absl::StrFormat("must be at least n (%d), got %d",
                                           out.n, *best_of));
    } else if (*best_of > out.n) {
      f.Invalid("best_of",
                "above `n` is not supported (choices are not ranked "
                "server-side): ask for `n` choices with `logprobs` and keep "
                "the best");
    }
  }
  if (!f.String("suffix").value_or("").empty()) {
    f.Invalid("suffix", "is not supported");
  }
  if (!f.status().ok()) return f.status();

  // prompt: a string, a list of strings, token ids, a list of lists of
  // token ids.
  const Json* prompt = f.Find("prompt");
  if (prompt == nullptr) {
    return absl::InvalidArgumentError("`prompt` is required");
  }
  absl::StatusOr<std::vector<Input>> prompts = ReadPrompts(*prompt);
  if (!prompts.ok()) return prompts.status();
  const int64_t choices = static_cast<int64_t>(prompts->size()) * out.n;
  if (choices > kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "`prompt` holds %d prompts and `n` is %d: %d choices, more than the "
        "%d a request may make",
        prompts->size(), out.n, choices, kMaxChoices));
  }
  out.params.prompt = std::move(prompts->front());
  out.more_prompts.assign(std::make_move_iterator(prompts->begin() + 1),
                          std::make_move_iterator(prompts->end()));
  return out;
}

absl::Status CheckModel(absl::string_view requested, absl::string_view served) {
  if (requested.empty() || requested == served) return absl::OkStatus();
  return WithReason(
      absl::NotFoundError(absl::StrCat(
          "The model ", QuoteClientText({requested.data(), requested.size()}),
          " does not exist (this server serves `", served, "`)")),
      kReasonModelNotFound);
}

absl::string_view OpenAiFinishReason(FinishReason reason, bool called_tools) {
  switch (reason) {
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
      return called_tools ? "tool_calls" : "stop";
    case FinishReason::kCancelled:
      return "stop";
  }
  return "stop";
}

Json ReplyDeltaJson(const constrain::ReplyDelta& delta) {
  Json out = Json::object();
  if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty()) out["content"] = delta.content;
  if (!delta.calls.empty()) {
    Json calls = Json::array();
    for (const constrain::ReplyDelta::Call& c : delta.calls) {
      Json call = {{"index", c.index}};
      Json function = Json::object();
      if (!c.id.empty()) {
        call["id"] = c.id;
        call["type"] = "function";
        function["name"] = c.name;
      }
      function["arguments"] = c.arguments;
      call["function"] = std::move(function);
      calls.push_back(std::move(call));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

TokenLogprobEntry MakeLogprobEntry(const Tokenizer& tokenizer, int32_t prev_id,
                                   const GeneratedToken& token,
                                   int64_t text_offset) {
  TokenLogprobEntry e;
  e.bytes = tokenizer.DecodeToken(prev_id, token.token_id);
  e.logprob = token.logprobs->chosen;
  e.text_offset = text_offset;
  for (const TokenLogprob& alt : token.logprobs->top) {
    e.top.push_back({.bytes = tokenizer.DecodeToken(prev_id, alt.token_id),
                     .logprob = alt.logprob});
  }
  return e;
}

std::string NewResponseId(absl::string_view prefix) {
  absl::BitGen gen;
  return absl::StrFormat("%s%016x%016x", prefix, absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

Json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.generated_tokens},
          {"total_tokens", usage.prompt_tokens + usage.generated_tokens},
          {"prompt_tokens_details",
           {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

Json CompletionJson(const ResponseMeta& meta,
                    const std::vector<ChoiceOutput>& choices,
                    const Usage& usage) {
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    Json choice = {{"index", i}};
    const bool called_tools = c.reply.has_value() && !c.reply->calls.empty();
    if (meta.endpoint != Endpoint::kChatCompletions) {
      choice["text"] = c.text;
    } else if (!c.reply.has_value()) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      const constrain::ParsedReply& r = *c.reply;
      // OpenAI's content is null beside tool calls that came alone.
      Json message = {
          {"role", "assistant"},
          {"content", r.content.empty() && called_tools ? Json(nullptr)
                                                        : Json(r.content)}};
      if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
      if (called_tools) {
        Json calls = Json::array();
        for (const constrain::ToolCall& call : r.calls) {
          calls.push_back(
              {{"id", call.id},
               {"type", "function"},
               {"function",
                {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    }
    choice["logprobs"] = LogprobsJson(meta.endpoint, c.logprobs);
    choice["finish_reason"] = OpenAiFinishReason(c.finish_reason, called_tools);
    list.push_back(std::move(choice));
  }
  Json out = MetaJson(meta, /*chunk=*/false);
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return out;
}

Json ChunkJson(const ResponseMeta& meta, int index, const Json& delta,
               const std::optional<std::vector<TokenLogprobEntry>>& logprobs,
               absl::string_view finish_reason, bool include_usage) {
  Json choice = {{"index", index}};
  if (meta.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = delta;
  } else {
    choice["text"] = delta.value("content", "");
  }
  choice["logprobs"] = LogprobsJson(meta.endpoint, logprobs);
  choice["finish_reason"] =
      finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  Json out = MetaJson(meta, /*chunk=*/true);
  out["choices"] = Json::array({std::move(choice)});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

Json UsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  Json out = MetaJson(meta, /*chunk=*/true);
  out["choices"] = Json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

Json ModelJson(absl::string_view name, int64_t created, int max_context) {
  return {{"id", name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "kvserve"},
          {"max_model_len", max_context}};
}

Json ModelListJson(absl::string_view name, int64_t created, int max_context) {
  return {{"object", "list"},
          {"data", Json::array({ModelJson(name, created, max_context)})}};
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const Json& body) {
  FieldReader f(body);
  TokenizeRequest out;
  out.content = f.String("content").value_or("");
  const bool add_special = f.Bool("add_special").value_or(false);
  out.options =
      EncodeOptions{.add_bos = add_special,
                    .add_dummy_prefix = add_special,
                    .parse_special = f.Bool("parse_special").value_or(false)};
  out.with_pieces = f.Bool("with_pieces").value_or(false);
  if (!f.status().ok()) return f.status();
  return out;
}

Json TokenizeJson(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  bool with_pieces) {
  Json tokens = Json::array();
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tokenizer.DecodeToken(prev, id);
    prev = id;
    tokens.push_back(
        {{"id", id},
         {"piece", IsValidUtf8(piece) ? Json(piece) : LogprobBytes(piece)}});
  }
  return {{"tokens", std::move(tokens)}};
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(
    const Json& body, int32_t vocab_size) {
  FieldReader f(body);
  std::vector<int32_t> ids;
  const Json* tokens = f.Array("tokens");
  if (!f.status().ok()) return f.status();
  if (tokens == nullptr) return ids;
  for (const Json& id : *tokens) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("`tokens` must be a list of integers, got a list "
                       "holding ",
                       id.type_name()));
    }
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d is outside the vocabulary [0, %d)", v, vocab_size));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::string Detokenize(const Tokenizer& tokenizer,
                       const std::vector<int32_t>& ids) {
  Utf8StreamDecoder utf8;
  std::string text;
  int32_t prev = -1;
  for (int32_t id : ids) {
    text += utf8.Push(tokenizer.DecodeToken(prev, id));
    prev = id;
  }
  return text + utf8.Flush();
}

absl::StatusOr<ChatTemplateInput> ParseApplyTemplateRequest(const Json& body) {
  FieldReader f(body);
  ChatTemplateInput input;
  input.add_generation_prompt = f.Bool("add_generation_prompt").value_or(true);
  if (const Json* tools = f.Array("tools")) input.tools_json = Dump(*tools);
  if (!f.status().ok()) return f.status();
  const Json* messages = f.Find("messages");
  if (messages == nullptr) {
    return absl::InvalidArgumentError("`messages` is required");
  }
  absl::StatusOr<std::vector<ChatMessage>> parsed = ParseMessages(*messages);
  if (!parsed.ok()) return parsed.status();
  input.messages = *std::move(parsed);
  return input;
}

absl::StatusOr<std::optional<absl::Duration>> ParseCreateSessionRequest(
    const Json& body) {
  FieldReader f(body);
  std::optional<int64_t> ttl = f.Int("ttl_seconds");
  if (!f.status().ok()) return f.status();
  // The range gRPC's CreateSession has (1 s to 100 years).
  return TtlFromProto(ttl.has_value(), ttl.value_or(0));
}

}  // namespace kvserve::http

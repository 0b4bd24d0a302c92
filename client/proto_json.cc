#include "client/proto_json.h"

#include <charconv>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace kvserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool IsTimestamp(const google::protobuf::Descriptor& descriptor) {
  return descriptor.full_name() == "google.protobuf.Timestamp";
}

std::string TimestampString(const Message& message) {
  google::protobuf::Timestamp timestamp;
  timestamp.CopyFrom(message);
  return google::protobuf::util::TimeUtil::ToString(timestamp);
}

// One value of `field` (element `index` if repeated) as JSON.
Json FieldToJson(const Message& message, const Reflection& reflection,
                 const FieldDescriptor& field, int index) {
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? reflection.GetRepeatedInt32(message, &field, index)
                      : reflection.GetInt32(message, &field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? reflection.GetRepeatedInt64(message, &field, index)
                      : reflection.GetInt64(message, &field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? reflection.GetRepeatedUInt32(message, &field, index)
                      : reflection.GetUInt32(message, &field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? reflection.GetRepeatedUInt64(message, &field, index)
                      : reflection.GetUInt64(message, &field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? reflection.GetRepeatedDouble(message, &field, index)
                      : reflection.GetDouble(message, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return JsonFloat(repeated
                           ? reflection.GetRepeatedFloat(message, &field, index)
                           : reflection.GetFloat(message, &field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? reflection.GetRepeatedBool(message, &field, index)
                      : reflection.GetBool(message, &field);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number =
          repeated ? reflection.GetRepeatedEnumValue(message, &field, index)
                   : reflection.GetEnumValue(message, &field);
      const auto* value = field.enum_type()->FindValueByNumber(number);
      if (value == nullptr) return number;
      return value->name();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return repeated ? reflection.GetRepeatedString(message, &field, index)
                      : reflection.GetString(message, &field);
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      const Message& sub =
          repeated ? reflection.GetRepeatedMessage(message, &field, index)
                   : reflection.GetMessage(message, &field);
      if (IsTimestamp(*sub.GetDescriptor())) return TimestampString(sub);
      return ProtoToJson(sub);
    }
  }
  return nullptr;
}

// One value of `field` for ProtoToText: strings and enum names unquoted,
// numbers as in JSON.
std::string FieldToText(const Message& message, const Reflection& reflection,
                        const FieldDescriptor& field, int index) {
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
      !IsTimestamp(*field.message_type())) {
    const Message& sub =
        field.is_repeated()
            ? reflection.GetRepeatedMessage(message, &field, index)
            : reflection.GetMessage(message, &field);
    return sub.ShortDebugString();
  }
  const Json value = FieldToJson(message, reflection, field, index);
  return value.is_string() ? value.get<std::string>() : DumpJson(value);
}

}  // namespace

std::string DumpJson(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void AppendJsonString(absl::string_view text, std::string* out) {
  out->append(DumpJson(Json(std::string(text))));
}

double JsonFloat(float value) {
  // to_chars writes the shortest text that reads back as the float
  // ("inf" and "nan" too, which strtod reads back).
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + 63, value);
  *r.ptr = '\0';
  return std::strtod(text, nullptr);
}

Json ProtoToJson(const Message& message) {
  const Reflection& reflection = *message.GetReflection();
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  Json object = Json::object();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    if (field.is_repeated()) {
      Json array = Json::array();
      const int size = reflection.FieldSize(message, &field);
      for (int j = 0; j < size; ++j) {
        array.push_back(FieldToJson(message, reflection, field, j));
      }
      object[field.name()] = std::move(array);
    } else if (!field.has_presence() || reflection.HasField(message, &field)) {
      object[field.name()] = FieldToJson(message, reflection, field, 0);
    }
  }
  return object;
}

Json TokenToJson(const v1::GeneratedToken& token) {
  Json object = Json::object();
  object["token_id"] = token.token_id();
  object["text"] = token.text();
  if (token.has_logprob()) object["logprob"] = JsonFloat(token.logprob());
  if (token.top_logprobs_size() > 0) {
    Json top = Json::array();
    for (const v1::TokenLogprob& alt : token.top_logprobs()) {
      Json entry = Json::object();
      entry["token_id"] = alt.token_id();
      entry["text"] = alt.text();
      entry["logprob"] = JsonFloat(alt.logprob());
      top.push_back(std::move(entry));
    }
    object["top_logprobs"] = std::move(top);
  }
  return object;
}

Json FinalToJson(const v1::GenerateFinal& final_message) {
  Json object = Json::object();
  object["finish_reason"] =
      std::string(FinishReasonName(final_message.finish_reason()));
  const v1::Usage& usage = final_message.usage();
  Json& usage_json = object["usage"] = Json::object();
  usage_json["prompt_tokens"] = usage.prompt_tokens();
  usage_json["cached_prompt_tokens"] = usage.cached_prompt_tokens();
  usage_json["generated_tokens"] = usage.generated_tokens();
  const v1::Timings& timings = final_message.timings();
  Json& timings_json = object["timings"] = Json::object();
  timings_json["queue_seconds"] = timings.queue_seconds();
  timings_json["prefill_seconds"] = timings.prefill_seconds();
  timings_json["decode_seconds"] = timings.decode_seconds();
  if (!final_message.session_id().empty()) {
    object["session_id"] = final_message.session_id();
  }
  if (!final_message.text().empty()) object["text"] = final_message.text();
  if (final_message.has_reply()) {
    const v1::Reply& reply = final_message.reply();
    Json& reply_json = object["reply"] = Json::object();
    reply_json["content"] = reply.content();
    if (!reply.reasoning().empty()) reply_json["reasoning"] = reply.reasoning();
    Json calls = Json::array();
    for (const v1::ToolCall& c : reply.tool_calls()) {
      calls.push_back(
          {{"id", c.id()}, {"name", c.name()}, {"arguments", c.arguments()}});
    }
    reply_json["tool_calls"] = std::move(calls);
  }
  return object;
}

std::string ProtoToText(const Message& message, absl::string_view prefix) {
  const Reflection& reflection = *message.GetReflection();
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  std::string out;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    const std::string name = absl::StrCat(prefix, field.name());
    if (field.is_repeated()) {
      const int size = reflection.FieldSize(message, &field);
      if (size == 0) continue;
      absl::StrAppend(&out, name, ":");
      for (int j = 0; j < size; ++j) {
        absl::StrAppend(&out, " ", FieldToText(message, reflection, field, j));
      }
      out.append("\n");
    } else if (!field.has_presence() || reflection.HasField(message, &field)) {
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
          !IsTimestamp(*field.message_type())) {
        out.append(ProtoToText(reflection.GetMessage(message, &field),
                               absl::StrCat(name, ".")));
      } else {
        absl::StrAppend(&out, name, ": ",
                        FieldToText(message, reflection, field, 0), "\n");
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<v1::ChatMessage>> ChatMessagesFromJson(
    const Json& json) {
  if (!json.is_array()) {
    return absl::InvalidArgumentError("messages must be a JSON array");
  }
  std::vector<v1::ChatMessage> messages;
  for (size_t i = 0; i < json.size(); ++i) {
    const Json& m = json[i];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, " is not an object"));
    }
    v1::ChatMessage out;
    for (const auto& [key, value] : m.items()) {
      if (key == "tool_calls") {
        if (!value.is_null()) out.set_tool_calls_json(value.dump());
        continue;
      }
      std::string* field = key == "role"           ? out.mutable_role()
                           : key == "content"      ? out.mutable_content()
                           : key == "name"         ? out.mutable_name()
                           : key == "tool_call_id" ? out.mutable_tool_call_id()
                                                   : nullptr;
      if (field == nullptr || value.is_null()) continue;
      if (!value.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("message ", i, ": \"", key, "\" must be a string"));
      }
      *field = value.get<std::string>();
    }
    if (out.role().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, " has no \"role\""));
    }
    messages.push_back(std::move(out));
  }
  return messages;
}

}  // namespace kvserve

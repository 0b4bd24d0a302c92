#include "client/json_writer.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace kvserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at the start of `s`, or 0 if invalid.
size_t ValidUtf8Length(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong forms
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (!IsContinuation(byte(i))) return 0;
  }
  return n;
}

// The shortest decimal (from 6 significant digits up) that reads back as the
// same double, or as the same float when `is_float`.
std::string ShortestNumber(double value, bool is_float) {
  if (!std::isfinite(value)) return "null";
  const int max_digits = is_float ? 9 : 17;
  for (int digits = 6; digits < max_digits; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    const bool same = is_float ? std::strtof(text.c_str(), nullptr) ==
                                     static_cast<float>(value)
                               : std::strtod(text.c_str(), nullptr) == value;
    if (same) return text;
  }
  return absl::StrFormat("%.*g", max_digits, value);
}

// One value of `field` (element `index` if repeated) as JSON, or as plain
// text (strings and enum names unquoted) when `json` is false.
std::string ValueToString(const Message& message, const Reflection& reflection,
                          const FieldDescriptor& field, int index, bool json) {
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(
          repeated ? reflection.GetRepeatedInt32(message, &field, index)
                   : reflection.GetInt32(message, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(
          repeated ? reflection.GetRepeatedInt64(message, &field, index)
                   : reflection.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(
          repeated ? reflection.GetRepeatedUInt32(message, &field, index)
                   : reflection.GetUInt32(message, &field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(
          repeated ? reflection.GetRepeatedUInt64(message, &field, index)
                   : reflection.GetUInt64(message, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return JsonNumber(
          repeated ? reflection.GetRepeatedDouble(message, &field, index)
                   : reflection.GetDouble(message, &field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return JsonNumber(
          repeated ? reflection.GetRepeatedFloat(message, &field, index)
                   : reflection.GetFloat(message, &field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (repeated ? reflection.GetRepeatedBool(message, &field, index)
                       : reflection.GetBool(message, &field))
                 ? "true"
                 : "false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number =
          repeated ? reflection.GetRepeatedEnumValue(message, &field, index)
                   : reflection.GetEnumValue(message, &field);
      const auto* value = field.enum_type()->FindValueByNumber(number);
      if (value == nullptr) return absl::StrCat(number);
      return json ? JsonString(value->name()) : value->name();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string value =
          repeated ? reflection.GetRepeatedString(message, &field, index)
                   : reflection.GetString(message, &field);
      return json ? JsonString(value) : value;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      const Message& sub =
          repeated ? reflection.GetRepeatedMessage(message, &field, index)
                   : reflection.GetMessage(message, &field);
      if (sub.GetDescriptor()->full_name() == "google.protobuf.Timestamp") {
        google::protobuf::Timestamp timestamp;
        timestamp.CopyFrom(sub);
        std::string text =
            google::protobuf::util::TimeUtil::ToString(timestamp);
        return json ? JsonString(text) : text;
      }
      return json ? ProtoToJson(sub) : sub.ShortDebugString();
    }
  }
  return "null";
}

}  // namespace

void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out->append("\\\"");
          break;
        case '\\':
          out->append("\\\\");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        default:
          if (c < 0x20) {
            absl::StrAppendFormat(out, "\\u%04x", c);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      text.remove_prefix(1);
      continue;
    }
    const size_t n = ValidUtf8Length(text);
    if (n == 0) {
      out->append("\\ufffd");
      text.remove_prefix(1);
    } else {
      out->append(text.data(), n);
      text.remove_prefix(n);
    }
  }
  out->push_back('"');
}

std::string JsonString(absl::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

std::string JsonNumber(double value) { return ShortestNumber(value, false); }

std::string JsonNumber(float value) { return ShortestNumber(value, true); }

void JsonObject::AddKey(absl::string_view key) {
  if (!body_.empty()) body_.append(", ");
  AppendJsonString(key, &body_);
  body_.append(": ");
}

JsonObject& JsonObject::AddString(absl::string_view key,
                                  absl::string_view value) {
  AddKey(key);
  AppendJsonString(value, &body_);
  return *this;
}

JsonObject& JsonObject::AddInt(absl::string_view key, int64_t value) {
  AddKey(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonObject& JsonObject::AddUint(absl::string_view key, uint64_t value) {
  AddKey(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonObject& JsonObject::AddDouble(absl::string_view key, double value) {
  AddKey(key);
  body_.append(JsonNumber(value));
  return *this;
}

JsonObject& JsonObject::AddFloat(absl::string_view key, float value) {
  AddKey(key);
  body_.append(JsonNumber(value));
  return *this;
}

JsonObject& JsonObject::AddBool(absl::string_view key, bool value) {
  AddKey(key);
  body_.append(value ? "true" : "false");
  return *this;
}

JsonObject& JsonObject::AddObject(absl::string_view key,
                                  const JsonObject& value) {
  AddKey(key);
  body_.append(value.str());
  return *this;
}

JsonObject& JsonObject::AddRaw(absl::string_view key, absl::string_view json) {
  AddKey(key);
  body_.append(json.data(), json.size());
  return *this;
}

std::string ProtoToJson(const Message& message) {
  const Reflection& reflection = *message.GetReflection();
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  JsonObject object;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    if (field.is_repeated()) {
      std::string array = "[";
      const int size = reflection.FieldSize(message, &field);
      for (int j = 0; j < size; ++j) {
        if (j > 0) array.append(", ");
        array.append(ValueToString(message, reflection, field, j, true));
      }
      array.append("]");
      object.AddRaw(field.name(), array);
    } else if (!field.has_presence() || reflection.HasField(message, &field)) {
      object.AddRaw(field.name(),
                    ValueToString(message, reflection, field, 0, true));
    }
  }
  return object.str();
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
        absl::StrAppend(&out, " ",
                        ValueToString(message, reflection, field, j, false));
      }
      out.append("\n");
    } else if (!field.has_presence() || reflection.HasField(message, &field)) {
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
          field.message_type()->full_name() != "google.protobuf.Timestamp") {
        out.append(ProtoToText(reflection.GetMessage(message, &field),
                               absl::StrCat(name, ".")));
      } else {
        absl::StrAppend(&out, name, ": ",
                        ValueToString(message, reflection, field, 0, false),
                        "\n");
      }
    }
  }
  return out;
}

}  // namespace kvserve

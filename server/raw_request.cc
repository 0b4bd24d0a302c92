#include "server/raw_request.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "grpcpp/support/slice.h"

namespace kvserve {
namespace {

namespace pb = google::protobuf;

// Mirrors of compiled message types in which every `string` field is
// `bytes`: the same wire format, but parsing accepts any bytes, so that the
// field that is not UTF-8 can be found.
class BytesMirror {
 public:
  static BytesMirror& Get() {
    static BytesMirror* const mirror = new BytesMirror();
    return *mirror;
  }

  // The mirror of `type` and its prototype; nullptr if the mirror cannot be
  // built (never for the types of our protos).
  const pb::Message* Prototype(const pb::Descriptor& type) {
    absl::MutexLock lock(&mu_);
    if (!AddFileLocked(*type.file())) return nullptr;
    const pb::Descriptor* mirrored =
        pool_.FindMessageTypeByName(type.full_name());
    return mirrored == nullptr ? nullptr : factory_.GetPrototype(mirrored);
  }

 private:
  static void MakeStringsBytes(pb::DescriptorProto& message) {
    // A map of string keys would be refused as a map of bytes keys; as a
    // repeated entry message it has the same wire format.
    message.mutable_options()->clear_map_entry();
    for (pb::FieldDescriptorProto& field : *message.mutable_field()) {
      if (field.type() == pb::FieldDescriptorProto::TYPE_STRING) {
        field.set_type(pb::FieldDescriptorProto::TYPE_BYTES);
      }
    }
    for (pb::DescriptorProto& nested : *message.mutable_nested_type()) {
      MakeStringsBytes(nested);
    }
  }

  bool AddFileLocked(const pb::FileDescriptor& file)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pool_.FindFileByName(file.name()) != nullptr) return true;
    for (int i = 0; i < file.dependency_count(); ++i) {
      if (!AddFileLocked(*file.dependency(i))) return false;
    }
    pb::FileDescriptorProto proto;
    file.CopyTo(&proto);
    for (pb::DescriptorProto& message : *proto.mutable_message_type()) {
      MakeStringsBytes(message);
    }
    return pool_.BuildFile(proto) != nullptr;
  }

  absl::Mutex mu_;
  pb::DescriptorPool pool_ ABSL_GUARDED_BY(mu_);
  // GetPrototype is thread-safe; its prototypes live as long as it.
  pb::DynamicMessageFactory factory_{&pool_};
};

// The path of the first former `string` field of `message` (a mirror of
// `original`) that is not valid UTF-8, below `prefix`.
std::optional<std::string> FindInvalidUtf8(const pb::Message& message,
                                           const pb::Descriptor& original,
                                           const std::string& prefix) {
  const pb::Reflection& reflection = *message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);  // in field-number order
  for (const pb::FieldDescriptor* field : fields) {
    const pb::FieldDescriptor* was =
        original.FindFieldByNumber(field->number());
    if (was == nullptr) continue;
    const std::string path = absl::StrCat(prefix, was->name());
    const int count =
        field->is_repeated() ? reflection.FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string element =
          field->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      if (was->type() == pb::FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            field->is_repeated()
                ? reflection.GetRepeatedStringReference(message, field, i,
                                                        &scratch)
                : reflection.GetStringReference(message, field, &scratch);
        if (!pb::internal::IsStructurallyValidUTF8(value)) return element;
      } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        const pb::Message& child =
            field->is_repeated()
                ? reflection.GetRepeatedMessage(message, field, i)
                : reflection.GetMessage(message, field);
        if (std::optional<std::string> found = FindInvalidUtf8(
                child, *was->message_type(), absl::StrCat(element, "."))) {
          return found;
        }
      }
    }
  }
  return std::nullopt;
}

// Why `bytes` do not parse as a `type`.
absl::Status ParseError(std::string_view bytes, const pb::Descriptor& type) {
  const pb::Message* prototype = BytesMirror::Get().Prototype(type);
  if (prototype != nullptr) {
    std::unique_ptr<pb::Message> mirror(prototype->New());
    if (mirror->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      if (std::optional<std::string> path =
              FindInvalidUtf8(*mirror, type, "")) {
        return absl::InvalidArgumentError(
            absl::StrCat(*path, " is not valid UTF-8"));
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "malformed request: the bytes are not a ", type.full_name()));
}

}  // namespace

absl::Status ParseRequest(std::string_view bytes, pb::Message* request) {
  bool parsed;
  {
    // protobuf logs every string field it refuses as not UTF-8; the client
    // is told, the server's log need not be.
    pb::LogSilencer silence;
    parsed =
        request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }
  if (parsed) return absl::OkStatus();
  return ParseError(bytes, *request->GetDescriptor());
}

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, pb::Message* request) {
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("malformed request: unreadable bytes");
  }
  if (slices.size() == 1) {
    return ParseRequest(
        std::string_view(reinterpret_cast<const char*>(slices[0].begin()),
                         slices[0].size()),
        request);
  }
  std::string joined;
  joined.reserve(bytes.Length());
  for (const grpc::Slice& slice : slices) {
    joined.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return ParseRequest(joined, request);
}

absl::StatusOr<grpc::ByteBuffer> SerializeResponse(
    const pb::Message& response) {
  grpc::ByteBuffer out;
  bool own_buffer = false;
  grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, pb::Message>(
      response, &out, &own_buffer);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot serialize a ", response.GetDescriptor()->full_name(), ": ",
        s.error_message()));
  }
  return out;
}

}  // namespace kvserve

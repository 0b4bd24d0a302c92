#include "core/model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string& out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out.append(s.data(), s.size());
}

void PutValue(std::string& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8:
      Put<uint8_t>(out, static_cast<uint8_t>(std::get<uint64_t>(v.value)));
      break;
    case GgufType::kInt8:
      Put<int8_t>(out, static_cast<int8_t>(std::get<int64_t>(v.value)));
      break;
    case GgufType::kUint16:
      Put<uint16_t>(out, static_cast<uint16_t>(std::get<uint64_t>(v.value)));
      break;
    case GgufType::kInt16:
      Put<int16_t>(out, static_cast<int16_t>(std::get<int64_t>(v.value)));
      break;
    case GgufType::kUint32:
      Put<uint32_t>(out, static_cast<uint32_t>(std::get<uint64_t>(v.value)));
      break;
    case GgufType::kInt32:
      Put<int32_t>(out, static_cast<int32_t>(std::get<int64_t>(v.value)));
      break;
    case GgufType::kUint64:
      Put<uint64_t>(out, std::get<uint64_t>(v.value));
      break;
    case GgufType::kInt64:
      Put<int64_t>(out, std::get<int64_t>(v.value));
      break;
    case GgufType::kFloat32:
      Put<float>(out, static_cast<float>(std::get<double>(v.value)));
      break;
    case GgufType::kFloat64:
      Put<double>(out, std::get<double>(v.value));
      break;
    case GgufType::kBool:
      Put<uint8_t>(out, std::get<bool>(v.value) ? 1 : 0);
      break;
    case GgufType::kString:
      PutString(out, v.str());
      break;
    case GgufType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, v.array_size());
      // A parsed array (copied from another file) is copied as encoded.
      if (const auto* ref = std::get_if<GgufArrayRef>(&v.value)) {
        out.append(ref->encoded);
      } else {
        for (const GgufValue& e : v.array()) PutValue(out, e);
      }
      break;
  }
}

uint64_t Pad(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

GgufValue Scalar(GgufType type, uint64_t u) {
  GgufValue v;
  v.type = type;
  v.value = u;
  return v;
}

}  // namespace

void GgufWriter::Add(std::string key, GgufValue value) {
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::AddString(std::string key, std::string value) {
  GgufValue v;
  v.type = GgufType::kString;
  v.value = std::move(value);
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddUint32(std::string key, uint32_t value) {
  Add(std::move(key), Scalar(GgufType::kUint32, value));
}

void GgufWriter::AddInt32(std::string key, int32_t value) {
  GgufValue v;
  v.type = GgufType::kInt32;
  v.value = int64_t{value};
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddFloat32(std::string key, float value) {
  GgufValue v;
  v.type = GgufType::kFloat32;
  v.value = double{value};
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddBool(std::string key, bool value) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.value = value;
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddStringArray(std::string key,
                                const std::vector<std::string>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array_type = GgufType::kString;
  std::vector<GgufValue> elems(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    elems[i].type = GgufType::kString;
    elems[i].value = values[i];
  }
  v.value = std::move(elems);
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddFloat32Array(std::string key,
                                 const std::vector<float>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array_type = GgufType::kFloat32;
  std::vector<GgufValue> elems(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    elems[i].type = GgufType::kFloat32;
    elems[i].value = double{values[i]};
  }
  v.value = std::move(elems);
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddInt32Array(std::string key,
                               const std::vector<int32_t>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array_type = GgufType::kInt32;
  std::vector<GgufValue> elems(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    elems[i].type = GgufType::kInt32;
    elems[i].value = int64_t{values[i]};
  }
  v.value = std::move(elems);
  Add(std::move(key), std::move(v));
}

uint64_t GgufWriter::TensorBytes(const std::vector<int64_t>& ne,
                                 GgmlType type) {
  int64_t block_elems = 0, block_bytes = 0;
  KVSERVE_CHECK(
      GgmlTypeLayout(static_cast<uint32_t>(type), &block_elems, &block_bytes));
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return static_cast<uint64_t>(n / block_elems * block_bytes);
}

void GgufWriter::AddTensor(std::string name, std::vector<int64_t> ne,
                           GgmlType type, std::string bytes) {
  uint64_t n_bytes = TensorBytes(ne, type);
  KVSERVE_CHECK(bytes.size() == n_bytes);
  auto data = std::make_shared<std::string>(std::move(bytes));
  AddTensor(
      std::move(name), std::move(ne), type,
      [data](uint8_t* out, uint64_t n) { std::memcpy(out, data->data(), n); });
}

void GgufWriter::AddTensor(std::string name, std::vector<int64_t> ne,
                           GgmlType type, Producer produce) {
  uint64_t n_bytes = TensorBytes(ne, type);
  tensors_.push_back(
      {std::move(name), std::move(ne), type, n_bytes, std::move(produce)});
}

std::string GgufWriter::Head() const {
  std::string out;
  out.append("GGUF", 4);
  Put<uint32_t>(out, 3);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, kv_.size() + 1);
  PutString(out, "general.alignment");
  Put<uint32_t>(out, static_cast<uint32_t>(GgufType::kUint32));
  Put<uint32_t>(out, alignment_);
  for (const auto& [key, value] : kv_) {
    PutString(out, key);
    Put<uint32_t>(out, static_cast<uint32_t>(value.type));
    PutValue(out, value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<int64_t>(out, d);
    Put<uint32_t>(out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(out, offset);
    offset += Pad(t.n_bytes, alignment_);
  }
  out.resize(Pad(out.size(), alignment_), '\0');
  return out;
}

std::string GgufWriter::Serialize() const {
  std::string out = Head();
  for (const Tensor& t : tensors_) {
    size_t at = out.size();
    out.resize(at + Pad(t.n_bytes, alignment_), '\0');
    t.produce(reinterpret_cast<uint8_t*>(out.data() + at), t.n_bytes);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"),
                                          std::fclose);
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot create %s", path));
  }
  std::string head = Head();
  bool ok = std::fwrite(head.data(), 1, head.size(), f.get()) == head.size();
  std::string buf;
  for (size_t i = 0; ok && i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    buf.assign(Pad(t.n_bytes, alignment_), '\0');
    t.produce(reinterpret_cast<uint8_t*>(buf.data()), t.n_bytes);
    ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
  }
  if (!ok || std::fflush(f.get()) != 0) {
    return absl::DataLossError(absl::StrFormat("cannot write %s", path));
  }
  return absl::OkStatus();
}

}  // namespace kvserve

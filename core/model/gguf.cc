#include "core/model/gguf.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_format.h"

namespace kvserve {

// ------------------------------------------------------------------- types

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

namespace {

struct GgmlTypeTraits {
  uint32_t type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

constexpr GgmlTypeTraits kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},
    {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},
    {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136},
    {29, "IQ1_M", 256, 56},   {24, "I8", 1, 1},
    {25, "I16", 1, 2},        {26, "I32", 1, 4},
    {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {30, "BF16", 1, 2},
};

const GgmlTypeTraits* FindGgmlType(uint32_t type) {
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

}  // namespace

std::string GgmlTypeName(uint32_t type) {
  const GgmlTypeTraits* t = FindGgmlType(type);
  return t != nullptr ? std::string(t->name) : absl::StrFormat("type %d", type);
}

bool GgmlTypeLayout(uint32_t type, int64_t* block_elems, int64_t* block_bytes) {
  const GgmlTypeTraits* t = FindGgmlType(type);
  if (t == nullptr) return false;
  *block_elems = t->block_elems;
  *block_bytes = t->block_bytes;
  return true;
}

// ---------------------------------------------------------------- GgufValue

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(value) ||
         std::holds_alternative<int64_t>(value);
}

bool GgufValue::AsInt64(int64_t* out) const {
  if (const uint64_t* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return false;
    }
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    *out = *i;
    return true;
  }
  return false;
}

bool GgufValue::AsDouble(double* out) const {
  if (const double* d = std::get_if<double>(&value)) {
    *out = *d;
    return true;
  }
  if (const uint64_t* u = std::get_if<uint64_t>(&value)) {
    *out = static_cast<double>(*u);
    return true;
  }
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    *out = static_cast<double>(*i);
    return true;
  }
  return false;
}

// ------------------------------------------------------------------ parsing
//
// (GgufValue::array_size and Elements, which decode, follow the parser.)

namespace {

constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Bytes the smallest encoding of a value of `t` takes (for plausibility
// checks of counts before allocating).
uint64_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kString:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

bool KnownValueType(uint32_t t) { return t <= 12; }

// Bytes of one element of a fixed-size type; 0 for strings and arrays.
uint64_t FixedSize(GgufType t) {
  return t == GgufType::kString || t == GgufType::kArray ? 0
                                                         : MinEncodedSize(t);
}

// Bounds-checked little-endian reads over the mapping. `context` says what is
// being read ("key 'general.name'", "tensor 'output.weight'") for errors.
class Reader {
 public:
  explicit Reader(const MappedFile& file, uint64_t offset = 0)
      : file_(file), off_(offset) {}

  uint64_t offset() const { return off_; }
  uint64_t remaining() const { return file_.size() - off_; }
  const MappedFile& file() const { return file_; }

  absl::Status Error(std::string_view context, std::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF file %s: %s: %s", file_.name(), context, msg));
  }
  absl::Status Truncated(std::string_view context, std::string_view what,
                         uint64_t need) const {
    return Error(context,
                 absl::StrFormat("truncated at byte offset %d reading %s "
                                 "(%d bytes needed, %d left; file is %d bytes)",
                                 off_, what, need, remaining(), file_.size()));
  }

  template <typename T>
  absl::Status Read(T* out, std::string_view context, std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(context, what, sizeof(T));
    std::memcpy(out, file_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status Skip(uint64_t n, std::string_view context,
                    std::string_view what) {
    if (remaining() < n) return Truncated(context, what, n);
    off_ += n;
    return absl::OkStatus();
  }

  // A string's bytes, left in the mapping.
  absl::Status ReadStringView(std::string_view* out, std::string_view context,
                              std::string_view what) {
    uint64_t start = off_;
    uint64_t len = 0;
    if (absl::Status s = Read(&len, context, what); !s.ok()) return s;
    if (len > remaining()) {
      off_ = start;
      return Error(context,
                   absl::StrFormat("%s at byte offset %d has length %d but "
                                   "only %d bytes follow",
                                   what, start, len, remaining() - 8));
    }
    *out = std::string_view(reinterpret_cast<const char*>(file_.data() + off_),
                            len);
    off_ += len;
    return absl::OkStatus();
  }

  // A string copied into memory: at most `max_len` bytes (the metadata's
  // cap) before anything is allocated.
  absl::Status ReadString(std::string* out, std::string_view context,
                          std::string_view what,
                          uint64_t max_len = UINT64_MAX) {
    const uint64_t start = off_;
    std::string_view view;
    if (absl::Status s = ReadStringView(&view, context, what); !s.ok()) {
      return s;
    }
    if (view.size() > max_len) {
      off_ = start;
      return Error(
          context,
          absl::StrFormat("%s at byte offset %d has %d bytes, more than the "
                          "%d left of the cap of %d bytes on keys and string "
                          "values held in memory",
                          what, start, view.size(), max_len,
                          kGgufMaxMetadataBytes));
    }
    out->assign(view.data(), view.size());
    return absl::OkStatus();
  }

 private:
  const MappedFile& file_;
  uint64_t off_ = 0;
};

// An array's element type and count, checked to be plausible for the
// bytes that follow.
absl::Status ReadArrayHeader(Reader& r, int depth, std::string_view context,
                             GgufType* elem_type, uint64_t* count) {
  uint64_t at = r.offset();
  if (depth >= kMaxArrayDepth) {
    return r.Error(context, absl::StrFormat("arrays nested deeper than %d at "
                                            "byte offset %d",
                                            kMaxArrayDepth, at));
  }
  uint32_t type = 0;
  if (auto s = r.Read(&type, context, "array element type"); !s.ok()) {
    return s;
  }
  if (!KnownValueType(type)) {
    return r.Error(context, absl::StrFormat("array at byte offset %d has "
                                            "unknown element type %d",
                                            at, type));
  }
  if (auto s = r.Read(count, context, "array length"); !s.ok()) return s;
  *elem_type = static_cast<GgufType>(type);
  if (*count > r.remaining() / MinEncodedSize(*elem_type)) {
    return r.Error(
        context,
        absl::StrFormat("array at byte offset %d claims %d "
                        "%s elements but only %d bytes follow",
                        at, *count, GgufTypeName(*elem_type), r.remaining()));
  }
  return absl::OkStatus();
}

absl::Status SkipElements(Reader& r, GgufType type, uint64_t count, int depth,
                          std::string_view context);

// Checks the value of `type` at the reader and moves past it, holding
// nothing in memory.
absl::Status SkipValue(Reader& r, GgufType type, int depth,
                       std::string_view context) {
  switch (type) {
    case GgufType::kString: {
      std::string_view unused;
      return r.ReadStringView(&unused, context, "string value");
    }
    case GgufType::kArray: {
      GgufType elem_type;
      uint64_t count = 0;
      if (auto s = ReadArrayHeader(r, depth, context, &elem_type, &count);
          !s.ok()) {
        return s;
      }
      return SkipElements(r, elem_type, count, depth + 1, context);
    }
    default:
      return SkipElements(r, type, 1, depth, context);
  }
}

// `count` elements of `type`. REQUIRES: count was checked by ReadArrayHeader
// (or is 1), so count * size does not overflow.
absl::Status SkipElements(Reader& r, GgufType type, uint64_t count, int depth,
                          std::string_view context) {
  if (type == GgufType::kBool) {
    const uint64_t at = r.offset();
    if (auto s = r.Skip(count, context, "bool values"); !s.ok()) return s;
    const uint8_t* bytes = r.file().data() + at;
    for (uint64_t i = 0; i < count; ++i) {
      if (bytes[i] > 1) {
        return r.Error(context,
                       absl::StrFormat("bool at byte offset %d has value %d",
                                       at + i, bytes[i]));
      }
    }
    return absl::OkStatus();
  }
  if (const uint64_t size = FixedSize(type); size > 0) {
    return r.Skip(count * size, context,
                  absl::StrFormat("%s value", GgufTypeName(type)));
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (auto s = SkipValue(r, type, depth, context); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Reads one value. Strings are copied (at most max_string bytes); arrays
// are checked and left in the mapping (`file`, which the reader reads).
absl::Status ReadValue(Reader& r, GgufType type, int depth,
                       std::string_view context,
                       const std::shared_ptr<const MappedFile>& file,
                       GgufValue* out, uint64_t max_string = UINT64_MAX) {
  out->type = type;
  switch (type) {
    case GgufType::kUint8: {
      uint8_t v = 0;
      if (auto s = r.Read(&v, context, "uint8 value"); !s.ok()) return s;
      out->value = uint64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kInt8: {
      int8_t v = 0;
      if (auto s = r.Read(&v, context, "int8 value"); !s.ok()) return s;
      out->value = int64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kUint16: {
      uint16_t v = 0;
      if (auto s = r.Read(&v, context, "uint16 value"); !s.ok()) return s;
      out->value = uint64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kInt16: {
      int16_t v = 0;
      if (auto s = r.Read(&v, context, "int16 value"); !s.ok()) return s;
      out->value = int64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kUint32: {
      uint32_t v = 0;
      if (auto s = r.Read(&v, context, "uint32 value"); !s.ok()) return s;
      out->value = uint64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kInt32: {
      int32_t v = 0;
      if (auto s = r.Read(&v, context, "int32 value"); !s.ok()) return s;
      out->value = int64_t{v};
      return absl::OkStatus();
    }
    case GgufType::kUint64: {
      uint64_t v = 0;
      if (auto s = r.Read(&v, context, "uint64 value"); !s.ok()) return s;
      out->value = v;
      return absl::OkStatus();
    }
    case GgufType::kInt64: {
      int64_t v = 0;
      if (auto s = r.Read(&v, context, "int64 value"); !s.ok()) return s;
      out->value = v;
      return absl::OkStatus();
    }
    case GgufType::kFloat32: {
      float v = 0;
      if (auto s = r.Read(&v, context, "float32 value"); !s.ok()) return s;
      out->value = double{v};
      return absl::OkStatus();
    }
    case GgufType::kFloat64: {
      double v = 0;
      if (auto s = r.Read(&v, context, "float64 value"); !s.ok()) return s;
      out->value = v;
      return absl::OkStatus();
    }
    case GgufType::kBool: {
      uint64_t at = r.offset();
      uint8_t v = 0;
      if (auto s = r.Read(&v, context, "bool value"); !s.ok()) return s;
      if (v > 1) {
        return r.Error(
            context,
            absl::StrFormat("bool at byte offset %d has value %d", at, v));
      }
      out->value = v == 1;
      return absl::OkStatus();
    }
    case GgufType::kString: {
      std::string v;
      if (auto s = r.ReadString(&v, context, "string value", max_string);
          !s.ok()) {
        return s;
      }
      out->value = std::move(v);
      return absl::OkStatus();
    }
    case GgufType::kArray: {
      GgufArrayRef ref;
      if (auto s =
              ReadArrayHeader(r, depth, context, &out->array_type, &ref.count);
          !s.ok()) {
        return s;
      }
      ref.file_offset = r.offset();
      if (auto s =
              SkipElements(r, out->array_type, ref.count, depth + 1, context);
          !s.ok()) {
        return s;
      }
      ref.encoded = std::string_view(
          reinterpret_cast<const char*>(file->data() + ref.file_offset),
          r.offset() - ref.file_offset);
      ref.file = file;
      out->value = std::move(ref);
      return absl::OkStatus();
    }
  }
  return r.Error(context, "unknown value type");
}

// Calls f(element) for each element of an array, decoding a parsed one
// from the mapping one element at a time.
template <typename F>
absl::Status ForEachElement(const GgufValue& v, std::string_view context, F f) {
  if (const auto* elems = std::get_if<std::vector<GgufValue>>(&v.value)) {
    for (const GgufValue& e : *elems) {
      if (absl::Status s = f(e); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const GgufArrayRef& ref = std::get<GgufArrayRef>(v.value);
  Reader r(*ref.file, ref.file_offset);
  GgufValue e;
  for (uint64_t i = 0; i < ref.count; ++i) {
    if (auto s = ReadValue(r, v.array_type, 1, context, ref.file, &e);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = f(e); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TooManyElements(std::string_view file, std::string_view key,
                             uint64_t count, uint64_t cap) {
  return absl::InvalidArgumentError(
      absl::StrFormat("GGUF file %s: key '%s' is an array of %d elements, "
                      "more than the cap of %d",
                      file, key, count, cap));
}

}  // namespace

uint64_t GgufValue::array_size() const {
  if (const auto* ref = std::get_if<GgufArrayRef>(&value)) return ref->count;
  return array().size();
}

absl::StatusOr<std::vector<GgufValue>> GgufValue::Elements(
    uint64_t max_elements) const {
  if (array_size() > max_elements) {
    const auto* ref = std::get_if<GgufArrayRef>(&value);
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF array of %d %s elements%s: more than the cap of %d", array_size(),
        GgufTypeName(array_type),
        ref != nullptr ? absl::StrFormat(" at byte offset %d of %s",
                                         ref->file_offset, ref->file->name())
                       : "",
        max_elements));
  }
  std::vector<GgufValue> out;
  out.reserve(array_size());
  absl::Status s = ForEachElement(*this, "array", [&out](const GgufValue& e) {
    out.push_back(e);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

namespace {

bool MulOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> file =
      MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return Parse(std::move(*file));
}

absl::StatusOr<GgufFile> GgufFile::Parse(
    std::shared_ptr<const MappedFile> file) {
  GgufFile g;
  g.file_ = std::move(file);
  Reader r(*g.file_);

  char magic[4];
  if (auto s = r.Read(&magic, "header", "magic"); !s.ok()) return s;
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return r.Error("header",
                   absl::StrFormat("wrong magic 0x%02x%02x%02x%02x at byte "
                                   "offset 0 (expected \"GGUF\")",
                                   static_cast<uint8_t>(magic[0]),
                                   static_cast<uint8_t>(magic[1]),
                                   static_cast<uint8_t>(magic[2]),
                                   static_cast<uint8_t>(magic[3])));
  }
  if (auto s = r.Read(&g.version_, "header", "version"); !s.ok()) return s;
  if (g.version_ != 2 && g.version_ != 3) {
    return r.Error("header",
                   absl::StrFormat("unsupported GGUF version %d at byte "
                                   "offset 4 (supported: 2, 3)",
                                   g.version_));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (auto s = r.Read(&n_tensors, "header", "tensor count"); !s.ok()) {
    return s;
  }
  if (auto s = r.Read(&n_kv, "header", "metadata count"); !s.ok()) return s;
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes, each
  // tensor info at least 8 (name length) + 4 + 4 + 8.
  if (n_kv > r.remaining() / 13) {
    return r.Error("header",
                   absl::StrFormat("metadata count %d at byte offset 16 needs "
                                   "at least 13 bytes each but only %d follow "
                                   "(file truncated or count corrupt)",
                                   n_kv, r.remaining()));
  }
  if (n_kv > kGgufMaxMetadataKeys) {
    return r.Error("header",
                   absl::StrFormat("metadata count %d at byte offset 16 is "
                                   "more than the cap of %d keys",
                                   n_kv, kGgufMaxMetadataKeys));
  }
  if (n_tensors > r.remaining() / 24) {
    return r.Error("header",
                   absl::StrFormat("tensor count %d at byte offset 8 needs at "
                                   "least 24 bytes each for tensor infos but "
                                   "only %d follow (file truncated or count "
                                   "corrupt)",
                                   n_tensors, r.remaining()));
  }

  g.keys_.reserve(n_kv);
  // Bytes of keys (held twice: keys_ and the map) and string values.
  uint64_t held_bytes = 0;
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = r.offset();
    std::string key;
    std::string context = absl::StrFormat("metadata entry %d", i);
    if (auto s = r.ReadString(&key, context, "key",
                              (kGgufMaxMetadataBytes - held_bytes) / 2);
        !s.ok()) {
      return s;
    }
    held_bytes += 2 * key.size();
    context = absl::StrFormat("key '%s' (at byte offset %d)", key, at);
    uint32_t type = 0;
    uint64_t type_at = r.offset();
    if (auto s = r.Read(&type, context, "value type"); !s.ok()) return s;
    if (!KnownValueType(type)) {
      return r.Error(context,
                     absl::StrFormat("unknown value type %d at byte offset %d",
                                     type, type_at));
    }
    GgufValue value;
    if (auto s = ReadValue(r, static_cast<GgufType>(type), 0, context, g.file_,
                           &value, kGgufMaxMetadataBytes - held_bytes);
        !s.ok()) {
      return s;
    }
    if (value.is_string()) held_bytes += value.str().size();
    if (g.metadata_.contains(key)) {
      return r.Error(context, "duplicate key");
    }
    g.keys_.push_back(key);
    g.metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = g.Find("general.alignment")) {
    int64_t v = 0;
    if (a->type != GgufType::kUint32 || !a->AsInt64(&v) || v == 0 ||
        (v & (v - 1)) != 0) {
      return r.Error("key 'general.alignment'",
                     absl::StrFormat("must be a uint32 power of two, got %s",
                                     GgufTypeName(a->type)));
    }
    g.alignment_ = static_cast<uint64_t>(v);
  }

  g.tensors_.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo& t = g.tensors_[i];
    t.info_offset = r.offset();
    std::string context = absl::StrFormat("tensor info %d", i);
    if (auto s = r.ReadString(&t.name, context, "tensor name"); !s.ok()) {
      return s;
    }
    context = absl::StrFormat("tensor '%s' (info at byte offset %d)", t.name,
                              t.info_offset);
    uint32_t n_dims = 0;
    if (auto s = r.Read(&n_dims, context, "dimension count"); !s.ok()) {
      return s;
    }
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.Error(context, absl::StrFormat("has %d dimensions (1..%d)",
                                              n_dims, kMaxDims));
    }
    t.dims.resize(n_dims);
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (auto s = r.Read(&t.dims[d], context, "dimension"); !s.ok()) return s;
      if (t.dims[d] <= 0 ||
          MulOverflows(t.n_elements, t.dims[d], &t.n_elements)) {
        return r.Error(context,
                       absl::StrFormat("dimension %d is %d (or the element "
                                       "count overflows)",
                                       d, t.dims[d]));
      }
    }
    if (auto s = r.Read(&t.type, context, "type"); !s.ok()) return s;
    int64_t block_elems = 0, block_bytes = 0;
    if (!GgmlTypeLayout(t.type, &block_elems, &block_bytes)) {
      return r.Error(context,
                     absl::StrFormat("unsupported tensor type %d", t.type));
    }
    if (t.dims[0] % block_elems != 0) {
      return r.Error(
          context,
          absl::StrFormat("row length %d is not a multiple of the "
                          "%s block size %d",
                          t.dims[0], GgmlTypeName(t.type), block_elems));
    }
    t.n_bytes = static_cast<uint64_t>(t.n_elements / block_elems) *
                static_cast<uint64_t>(block_bytes);
    if (auto s = r.Read(&t.offset, context, "data offset"); !s.ok()) return s;
    if (t.offset % g.alignment_ != 0) {
      return r.Error(context,
                     absl::StrFormat("data offset %d is not a multiple of the "
                                     "alignment %d",
                                     t.offset, g.alignment_));
    }
    if (g.tensor_index_.contains(t.name)) {
      return r.Error(context, "duplicate tensor name");
    }
    g.tensor_index_.emplace(t.name, i);
  }

  uint64_t end_of_infos = r.offset();
  g.data_offset_ =
      (end_of_infos + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  // Every tensor's bytes lie inside the file as it is now (a mapping's
  // pages past the end would raise SIGBUS, not fail a bounds check).
  uint64_t size = g.file_->size();
  for (GgufTensorInfo& t : g.tensors_) {
    uint64_t data_size = size >= g.data_offset_ ? size - g.data_offset_ : 0;
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      // In 128 bits: a corrupt offset may be near 2^64.
      const absl::uint128 begin = absl::uint128(g.data_offset_) + t.offset;
      const absl::uint128 end = begin + t.n_bytes;
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF file %s: tensor '%s' (%s, %d bytes at data offset %d, info at "
          "byte offset %d) needs bytes [%d, %d) but runs past the end of the "
          "%d-byte file by %d bytes (the file is truncated, or the tensor "
          "info is corrupt)",
          g.file_->name(), t.name, GgmlTypeName(t.type), t.n_bytes, t.offset,
          t.info_offset, begin, end, size, end - size));
    }
    t.file_offset = g.data_offset_ + t.offset;
    t.data = g.file_->data() + t.file_offset;
  }
  return g;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(absl::string_view(key.data(), key.size()));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(absl::string_view(name.data(), name.size()));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status NotFound(const std::string& file, std::string_view key) {
  return absl::NotFoundError(
      absl::StrFormat("GGUF file %s: key '%s' is missing", file, key));
}

absl::Status WrongType(const std::string& file, std::string_view key,
                       std::string_view want, const GgufValue& v) {
  std::string got(GgufTypeName(v.type));
  if (v.is_array()) {
    got = absl::StrFormat("array of %s", GgufTypeName(v.array_type));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "GGUF file %s: key '%s' should be %s, is %s", file, key, want, got));
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  if (!v->is_string()) return WrongType(name(), key, "a string", *v);
  return v->str();
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  int64_t out = 0;
  if (!v->AsInt64(&out)) return WrongType(name(), key, "an integer", *v);
  return out;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  double out = 0;
  if (v->is_array() || !v->AsDouble(&out)) {
    return WrongType(name(), key, "a number", *v);
  }
  return out;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  if (v->type != GgufType::kBool) return WrongType(name(), key, "a bool", *v);
  return std::get<bool>(v->value);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  if (!v->is_array() || v->array_type != GgufType::kString) {
    return WrongType(name(), key, "an array of strings", *v);
  }
  if (v->array_size() > kGgufMaxArrayElements) {
    return TooManyElements(name(), key, v->array_size(), kGgufMaxArrayElements);
  }
  std::vector<std::string> out;
  out.reserve(v->array_size());
  absl::Status s = ForEachElement(*v, key, [&out](const GgufValue& e) {
    out.push_back(e.str());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  if (!v->is_array() || v->array_type == GgufType::kString ||
      v->array_type == GgufType::kArray || v->array_type == GgufType::kBool) {
    return WrongType(name(), key, "an array of numbers", *v);
  }
  if (v->array_size() > kGgufMaxArrayElements) {
    return TooManyElements(name(), key, v->array_size(), kGgufMaxArrayElements);
  }
  std::vector<double> out;
  out.reserve(v->array_size());
  absl::Status s = ForEachElement(*v, key, [&out](const GgufValue& e) {
    out.push_back(0);
    e.AsDouble(&out.back());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(name(), key);
  auto integer = [](GgufType t) {
    return t != GgufType::kFloat32 && t != GgufType::kFloat64 &&
           t != GgufType::kBool && t != GgufType::kString &&
           t != GgufType::kArray;
  };
  if (!v->is_array() || !integer(v->array_type)) {
    return WrongType(name(), key, "an array of integers", *v);
  }
  if (v->array_size() > kGgufMaxArrayElements) {
    return TooManyElements(name(), key, v->array_size(), kGgufMaxArrayElements);
  }
  std::vector<int64_t> out;
  out.reserve(v->array_size());
  absl::Status s = ForEachElement(*v, key, [&](const GgufValue& e) {
    out.push_back(0);
    if (!e.AsInt64(&out.back())) {
      return WrongType(name(), key, "an array of integers", *v);
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace kvserve

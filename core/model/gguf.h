// GGUF (v2 and v3) reading: the header, every metadata value type (arrays,
// nested arrays included), tensor infos, general.alignment and the tensor
// data offset, over a read-only memory mapping of the file. Every read is
// bounds-checked; a malformed file yields an error naming the key or tensor
// and the byte offset, never an out-of-bounds read.
//
// Metadata memory is bounded, whatever the file claims: arrays are checked
// at parse time but not decoded (a GgufArrayRef points at their bytes in
// the mapping), so an array nobody reads costs nothing; the typed array
// getters decode at most kGgufMaxArrayElements elements; keys and string
// values held in memory total at most kGgufMaxMetadataBytes, over at most
// kGgufMaxMetadataKeys keys. Each cap's error names the key, its size and
// the cap.
//
// Thread-safety: GgufFile is immutable after creation; safe to share across
// threads.
#ifndef KVSERVE_CORE_MODEL_GGUF_H_
#define KVSERVE_CORE_MODEL_GGUF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/quant/quant.h"
#include "core/util/mapped_file.h"

namespace kvserve {

// GGUF metadata value types (gguf_type).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType t);

// ggml tensor element types: the ids GGUF stores (core/quant/quant.h).
using GgmlType = quant::Type;
// "F32", "Q8_0", ... or "type N" for unknown values.
std::string GgmlTypeName(uint32_t type);
// Elements per block and bytes per block; false for unknown types.
bool GgmlTypeLayout(uint32_t type, int64_t* block_elems, int64_t* block_bytes);

// Caps on what parsing and the getters hold in memory. Real files stay far
// below them: Gemma 3's vocabulary has 262144 tokens, Llama 3's 128256
// tokens and 280147 merges; a file has a few dozen keys, and its longest
// string is a chat template of some kilobytes.
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 22;   // 4 Mi
inline constexpr uint64_t kGgufMaxMetadataBytes = uint64_t{64} << 20;  // 64 MiB
inline constexpr uint64_t kGgufMaxMetadataKeys = uint64_t{1} << 16;

// A parsed array, left encoded where it lies in the file (checked, so that
// decoding it cannot fail): GgufFile's getters and GgufValue::Elements
// decode it on demand.
struct GgufArrayRef {
  uint64_t count = 0;
  uint64_t file_offset = 0;  // of the first element
  std::string_view encoded;  // the elements' bytes, in file's mapping
  std::shared_ptr<const MappedFile> file;  // keeps `encoded` mapped
};

// One metadata value. Integers keep their signedness; arrays hold their
// element type and elements (which may be arrays themselves): a parsed
// array as a GgufArrayRef, one built in memory (GgufWriter) as a vector.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType array_type = GgufType::kUint8;  // element type when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string,
               std::vector<GgufValue>, GgufArrayRef>
      value;

  bool is_integer() const;
  bool is_float() const { return std::holds_alternative<double>(value); }
  bool is_string() const { return std::holds_alternative<std::string>(value); }
  bool is_array() const { return type == GgufType::kArray; }
  const std::string& str() const { return std::get<std::string>(value); }
  // REQUIRES: an array built in memory (parsed ones are GgufArrayRef).
  const std::vector<GgufValue>& array() const {
    return std::get<std::vector<GgufValue>>(value);
  }
  // REQUIRES: is_array(). Its element count, either way.
  uint64_t array_size() const;
  // REQUIRES: is_array(). Its elements, decoded (nested arrays stay
  // GgufArrayRefs); INVALID_ARGUMENT naming the count and the cap when it
  // has more than max_elements.
  absl::StatusOr<std::vector<GgufValue>> Elements(
      uint64_t max_elements = kGgufMaxArrayElements) const;
  // The value as an integer, when it is one and fits in int64.
  bool AsInt64(int64_t* out) const;
  // The value as a double, for integers and floats.
  bool AsDouble(double* out) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne: dims[0] varies fastest (= row length)
  uint32_t type = 0;          // GgmlType value
  uint64_t offset = 0;        // relative to the data section, as in the file
  uint64_t file_offset = 0;   // absolute byte offset of the data in the file
  uint64_t info_offset = 0;   // where this tensor's info starts in the file
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; n_bytes long
};

class GgufFile {
 public:
  // Parses the file's header, metadata and tensor infos and checks every
  // tensor lies inside the file.
  static absl::StatusOr<GgufFile> Parse(std::shared_ptr<const MappedFile> file);
  static absl::StatusOr<GgufFile> Open(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::shared_ptr<const MappedFile>& file() const { return file_; }
  const std::string& name() const { return file_->name(); }

  // Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  const GgufValue* Find(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed getters. NotFound when absent; InvalidArgument (naming the key,
  // the expected and the actual type) when of the wrong type or out of range.
  // The array getters decode from the mapping; InvalidArgument naming the
  // key, its element count and the cap past kGgufMaxArrayElements.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(
      std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

 private:
  GgufFile() = default;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  absl::flat_hash_map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_H_

// GgufWriter: writes GGUF v3 files the way llama.cpp's gguf writer lays them
// out (metadata in insertion order, then tensor infos, then tensor data, each
// tensor padded to the alignment, general.alignment = 32 unless changed).
// Used by the model maker (tools/kvmodel) and by tests to build files.
//
// Thread-safety: not thread-safe; one writer per thread.
#ifndef KVSERVE_CORE_MODEL_GGUF_WRITER_H_
#define KVSERVE_CORE_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/model/gguf.h"

namespace kvserve {

class GgufWriter {
 public:
  // Fills `out` (already sized to the tensor's byte count) with its data.
  using Producer = std::function<void(uint8_t* out, uint64_t n_bytes)>;

  GgufWriter() = default;

  // REQUIRES: a power of two. Written as the general.alignment key.
  void SetAlignment(uint32_t alignment) { alignment_ = alignment; }

  // Metadata, in the order added. A key added twice is written twice (tests
  // use that to make malformed files); callers normally avoid it.
  void Add(std::string key, GgufValue value);
  void AddString(std::string key, std::string value);
  void AddUint32(std::string key, uint32_t value);
  void AddInt32(std::string key, int32_t value);
  void AddFloat32(std::string key, float value);
  void AddBool(std::string key, bool value);
  void AddStringArray(std::string key, const std::vector<std::string>& values);
  void AddFloat32Array(std::string key, const std::vector<float>& values);
  void AddInt32Array(std::string key, const std::vector<int32_t>& values);

  // A tensor with ggml dims `ne` (row length first) of `type`. REQUIRES:
  // ne[0] a multiple of the type's block size. The data comes from `bytes`
  // (which must be exactly the tensor's size) or, at write time, `produce`.
  void AddTensor(std::string name, std::vector<int64_t> ne, GgmlType type,
                 std::string bytes);
  void AddTensor(std::string name, std::vector<int64_t> ne, GgmlType type,
                 Producer produce);

  // The whole file in memory (small files, tests).
  std::string Serialize() const;
  // Streams the file to `path` (one tensor buffer in memory at a time).
  absl::Status WriteFile(const std::string& path) const;

  // Bytes of a tensor of `type` with dims `ne`.
  static uint64_t TensorBytes(const std::vector<int64_t>& ne, GgmlType type);

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t n_bytes;
    Producer produce;
  };
  // Header, metadata and tensor infos, padded to the alignment.
  std::string Head() const;

  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_WRITER_H_

// Fuzzes the GGUF reader (GgufFile::Parse over in-memory bytes) and the
// model loader on top of it (LoadModelFromFile: config keys, tensor shapes,
// offsets and types, quantized blocks' scales, the vocabulary and the
// tokenizer built from it). gguf.h promises "never an out-of-bounds read":
// every tensor Parse accepts lies inside the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/gguf.h"
#include "core/model/loader.h"
#include "core/util/mapped_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

void CheckParsed(const GgufFile& gguf, size_t size) {
  const uint8_t* base = gguf.file()->data();
  // (A file without tensors may end before its data section's padding.)
  FUZZ_CHECK(gguf.tensors().empty() || gguf.data_offset() <= size,
             "data offset %llu past %zu",
             static_cast<unsigned long long>(gguf.data_offset()), size);
  for (const GgufTensorInfo& t : gguf.tensors()) {
    FUZZ_CHECK(t.file_offset <= size && t.n_bytes <= size - t.file_offset,
               "tensor %s [%llu, +%llu) outside %zu bytes", t.name.c_str(),
               static_cast<unsigned long long>(t.file_offset),
               static_cast<unsigned long long>(t.n_bytes), size);
    FUZZ_CHECK(t.data == base + t.file_offset, "tensor %s data pointer",
               t.name.c_str());
    FUZZ_CHECK(gguf.FindTensor(t.name) != nullptr, "tensor %s not found",
               t.name.c_str());
  }
  // Every typed getter on every key: wrong types are errors, not crashes.
  for (const std::string& key : gguf.keys()) {
    FUZZ_CHECK(gguf.Find(key) != nullptr, "key %s not found", key.c_str());
    (void)gguf.GetString(key);
    (void)gguf.GetInt(key);
    (void)gguf.GetFloat(key);
    (void)gguf.GetBool(key);
    (void)gguf.GetStringArray(key);
    (void)gguf.GetFloatArray(key);
    (void)gguf.GetIntArray(key);
  }
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  std::shared_ptr<const MappedFile> file =
      MappedFile::FromBytes(fuzz::AsView(data, size), "fuzz.gguf");
  absl::StatusOr<GgufFile> gguf = GgufFile::Parse(file);
  if (!gguf.ok()) return 0;
  CheckParsed(*gguf, size);

  // The loader, in one of its three weight modes (by size, so that the
  // input's bytes all stay the file's).
  static const char* const kModes[] = {"auto", "f32", "bf16"};
  LoadOptions options;
  options.weight_dtype = kModes[size % 3];
  absl::StatusOr<LoadedModel> model = LoadModelFromFile(file, options);
  if (!model.ok()) return 0;
  FUZZ_CHECK(model->weights != nullptr && model->tokenizer != nullptr,
             "loaded model without weights or tokenizer");
  const Tokenizer& tok = *model->tokenizer;
  std::vector<int32_t> ids = tok.Encode("Once upon a time <s>\xff", {});
  int32_t prev = -1;
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "id %d outside vocab %d", id,
               tok.vocab_size());
    (void)tok.DecodeToken(prev, id);
    prev = id;
  }
  return 0;
}

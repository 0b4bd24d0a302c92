// Fuzzes llama2.c's two file formats: the checkpoint (LoadLlama2cWeights:
// header, implied size, weights) and the tokenizer file (ParseLlama2cVocab,
// then the tokenizer made from it). The first byte picks the reader; the
// rest is the file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/model/gguf_tensor.h"
#include "core/model/llama2c.h"
#include "core/tokenizer/llama2c_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "core/util/mapped_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

void FuzzCheckpoint(std::string_view bytes, uint8_t selector) {
  static const WeightDTypeMode kModes[] = {
      WeightDTypeMode::kAuto, WeightDTypeMode::kF32, WeightDTypeMode::kBF16};
  std::shared_ptr<const MappedFile> file =
      MappedFile::FromBytes(bytes, "fuzz.bin");
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      LoadLlama2cWeights(file, kModes[(selector >> 1) % 3]);
  if (!weights.ok()) return;
  const ModelConfig& c = (*weights)->config;
  FUZZ_CHECK(c.dim > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.n_layers > 0 &&
                 c.vocab_size > 0,
             "accepted a checkpoint with a non-positive dimension");
}

void FuzzVocab(std::string_view bytes, uint8_t selector) {
  // Half the inputs with the vocabulary size a checkpoint would impose.
  const int vocab_size = (selector & 2) != 0 ? 512 : 0;
  absl::StatusOr<Vocab> vocab = ParseLlama2cVocab(bytes, "fuzz", vocab_size);
  if (!vocab.ok()) return;
  FUZZ_CHECK(vocab->Validate().ok(), "parsed vocab fails Validate: %s",
             vocab->Validate().ToString().c_str());
  FUZZ_CHECK(vocab_size == 0 || vocab->size() == vocab_size,
             "vocab of %d tokens, want %d", vocab->size(), vocab_size);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = CreateTokenizer(*vocab);
  if (!tok.ok()) return;
  const std::vector<int32_t> ids =
      (*tok)->Encode("Once upon a time, \xe2\x96\x81 <s>\xff", {});
  int32_t prev = -1;
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && id < (*tok)->vocab_size(), "id %d outside %d", id,
               (*tok)->vocab_size());
    (void)(*tok)->DecodeToken(prev, id);
    (void)(*tok)->Piece(id);
    prev = id;
  }
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes = kvserve::fuzz::AsView(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    kvserve::FuzzVocab(bytes, data[0]);
  } else {
    kvserve::FuzzCheckpoint(bytes, data[0]);
  }
  return 0;
}

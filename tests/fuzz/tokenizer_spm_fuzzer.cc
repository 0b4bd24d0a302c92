// Fuzzes SpmTokenizer: Encode under every EncodeOptions combination, then
// DecodeToken over the ids. The vocabularies (loaded once) all have byte
// fallback for every byte, so without parse_special the bytes round-trip
// exactly (spm_tokenizer.h, tokenizer.h):
//   BOS + dummy prefix: the text (the "▁" after BOS is dropped);
//   no BOS:             " " + text when the dummy prefix applies, else text.
// BOS without the dummy prefix promises nothing (a leading space of the text
// is dropped after BOS), and a "▁" in the text may come back as a space.
// Vocabularies: llama2.c's tok512.bin and stories260K.gguf's (the same 512
// pieces, from two readers; ../shared/models) and the built-in byte-level
// one (no dummy prefix).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/gguf.h"
#include "core/model/gguf_vocab.h"
#include "core/tokenizer/llama2c_vocab.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/tokenizer_common.h"

namespace kvserve {
namespace {

struct Case {
  Vocab vocab;
  std::unique_ptr<SpmTokenizer> tokenizer;
  std::vector<std::string> specials;
};

std::vector<Case>& Cases() {
  static std::vector<Case> cases;
  return cases;
}

void Add(absl::StatusOr<Vocab> vocab, const char* what) {
  if (!vocab.ok()) {
    std::fprintf(stderr, "tokenizer_spm_fuzzer: skipping %s: %s\n", what,
                 vocab.status().ToString().c_str());
    return;
  }
  absl::StatusOr<std::unique_ptr<SpmTokenizer>> t =
      SpmTokenizer::Create(*vocab);
  FUZZ_CHECK(t.ok(), "%s: %s", what, t.status().ToString().c_str());
  Case c;
  c.specials = fuzz::SpecialTexts(*vocab);
  c.vocab = *std::move(vocab);
  c.tokenizer = *std::move(t);
  Cases().push_back(std::move(c));
}

absl::StatusOr<Vocab> GgufVocab(const std::string& path) {
  absl::StatusOr<GgufFile> gguf = GgufFile::Open(path);
  if (!gguf.ok()) return gguf.status();
  return VocabFromGguf(*gguf);
}

bool RoundTrip(const Vocab& vocab, const EncodeOptions& o,
               std::string_view text, std::string* want) {
  const bool bos = o.add_bos && vocab.add_bos && vocab.bos_id >= 0;
  const bool dummy =
      o.add_dummy_prefix && vocab.add_space_prefix && !text.empty();
  if (bos && !dummy && vocab.add_space_prefix) return false;
  *want = (dummy && !bos ? " " : "") + std::string(text);
  return true;
}

// A "▁" (U+2581) in the text itself is SentencePiece's space symbol: it may
// come back as a space (tok512 has "▁" pieces; the byte-level vocabulary
// has none, so there it falls back to its bytes). Compared with every "▁"
// read as a space.
std::string SpacesForMeta(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, 3) == "\xe2\x96\x81") {
      out += ' ';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  Add(ReadLlama2cVocab(fuzz::SharedPath("models/tok512.bin")), "tok512.bin");
  Add(GgufVocab(fuzz::SharedPath("models/stories260K.gguf")),
      "stories260K.gguf");
  Add(ByteLevelVocab(), "byte-level vocab");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const std::string_view text = fuzz::AsView(data, size);
  for (const Case& c : Cases()) {
    fuzz::CheckEncodeDecode(
        *c.tokenizer, c.vocab, c.specials, text,
        [&](const EncodeOptions& o, std::string_view t, std::string* want) {
          return RoundTrip(c.vocab, o, t, want);
        },
        SpacesForMeta);
  }
  return 0;
}

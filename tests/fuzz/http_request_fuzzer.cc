// Fuzzes the HTTP API's request parsers (server/http/openai_json.h): the
// body as JSON (ParseBody), then every endpoint's parser on it, and the
// response builders that echo request data (Dump, TokenizeJson,
// Detokenize). Promises checked: a parse error is INVALID_ARGUMENT (or
// NOT_FOUND for an unknown model); Dump always yields valid UTF-8 JSON that
// parses back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/text/utf8_stream_decoder.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "core/tokenizer/vocab.h"
#include "server/http/openai_json.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

std::unique_ptr<SpmTokenizer>& ByteTokenizer() {
  static std::unique_ptr<SpmTokenizer> t;
  return t;
}

void CheckError(const absl::Status& s, const char* what) {
  FUZZ_CHECK(s.ok() || absl::IsInvalidArgument(s) || absl::IsNotFound(s) ||
                 absl::IsOutOfRange(s),
             "%s: %s", what, s.ToString().c_str());
}

void CheckDump(const http::Json& j) {
  const std::string text = http::Dump(j);
  FUZZ_CHECK(IsValidUtf8(text), "Dump is not valid UTF-8");
  FUZZ_CHECK(!http::Json::parse(text, nullptr, false).is_discarded(),
             "Dump does not parse back");
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  absl::StatusOr<std::unique_ptr<kvserve::SpmTokenizer>> t =
      kvserve::SpmTokenizer::Create(kvserve::ByteLevelVocab());
  FUZZ_CHECK(t.ok(), "%s", t.status().ToString().c_str());
  kvserve::ByteTokenizer() = *std::move(t);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  absl::StatusOr<http::Json> body = http::ParseBody(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!body.ok()) {
    CheckError(body.status(), "ParseBody");
    return 0;
  }
  FUZZ_CHECK(body->is_object(), "ParseBody returned a non-object");
  CheckDump(*body);
  const Tokenizer& tok = *ByteTokenizer();

  absl::StatusOr<http::GenerationRequest> chat =
      http::ParseChatRequest(*body, 16);
  CheckError(chat.status(), "ParseChatRequest");
  absl::StatusOr<http::GenerationRequest> completion =
      http::ParseCompletionRequest(*body, 16);
  CheckError(completion.status(), "ParseCompletionRequest");
  if (chat.ok()) CheckError(http::CheckModel(chat->model, "m"), "CheckModel");
  if (const auto it = body->find("messages"); it != body->end()) {
    CheckError(http::ParseMessages(*it).status(), "ParseMessages");
  }

  absl::StatusOr<http::TokenizeRequest> tokenize =
      http::ParseTokenizeRequest(*body);
  CheckError(tokenize.status(), "ParseTokenizeRequest");
  if (tokenize.ok()) {
    const std::vector<int32_t> ids =
        tok.Encode(tokenize->content, tokenize->options);
    CheckDump(http::TokenizeJson(tok, ids, tokenize->with_pieces));
  }
  absl::StatusOr<std::vector<int32_t>> detokenize =
      http::ParseDetokenizeRequest(*body, tok.vocab_size());
  CheckError(detokenize.status(), "ParseDetokenizeRequest");
  if (detokenize.ok()) {
    for (int32_t id : *detokenize) {
      FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "detokenize id %d", id);
    }
    const std::string text = http::Detokenize(tok, *detokenize);
    FUZZ_CHECK(IsValidUtf8(text), "Detokenize is not valid UTF-8");
  }
  CheckError(http::ParseApplyTemplateRequest(*body).status(),
             "ParseApplyTemplateRequest");
  CheckError(http::ParseCreateSessionRequest(*body).status(),
             "ParseCreateSessionRequest");
  return 0;
}

// llama.cpp's tokenizer reference suites (its models/ggml-vocab-*.gguf.inp
// and .out, kept in the shared folder's vocab/): the texts and the token ids
// the model's own Hugging Face tokenizer gives them, without BOS.
#ifndef KVSERVE_TESTS_TESTING_VOCAB_SUITE_H_
#define KVSERVE_TESTS_TESTING_VOCAB_SUITE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The vocabularies with a suite, as in SharedDir()/vocab/ggml-vocab-NAME.gguf.
inline const std::vector<std::string>& VocabSuiteNames() {
  static const std::vector<std::string> names = {"gpt-2", "deepseek-llm",
                                                 "starcoder"};
  return names;
}

inline std::string VocabSuiteGguf(const std::string& name) {
  return SharedDir() + "/vocab/ggml-vocab-" + name + ".gguf";
}

// The cases of `gguf_path`.inp / .out, read as llama.cpp's
// tests/test-tokenizer-0.cpp reads them: the .inp is cut at every
// "\n__ggml_vocab_test__\n" (a text after the last separator is one more
// case; nothing is stripped from a text, so a case may be empty or end in a
// newline of its own); each .out line, stripped of surrounding whitespace, is
// the ids separated by single spaces. nullopt when a file is missing, a line
// does not parse or the counts differ.
inline std::optional<std::vector<VocabCase>> ReadVocabSuite(
    const std::string& gguf_path) {
  std::optional<std::string> inp = ReadWholeFile(gguf_path + ".inp");
  std::optional<std::string> out = ReadWholeFile(gguf_path + ".out");
  if (!inp.has_value() || !out.has_value()) return std::nullopt;
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp->size();) {
    const size_t next = inp->find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp->substr(pos));
      break;
    }
    texts.push_back(inp->substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines = absl::StrSplit(*out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() != texts.size()) return std::nullopt;
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) {
    VocabCase c{texts[i], {}};
    for (absl::string_view id : absl::StrSplit(
             absl::StripAsciiWhitespace(lines[i]), ' ', absl::SkipEmpty())) {
      int32_t v = 0;
      if (!absl::SimpleAtoi(id, &v)) return std::nullopt;
      c.ids.push_back(v);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_VOCAB_SUITE_H_

// Fuzzes the JSON Schema compiler (core/constrain/json_schema.h), its regex
// subset (regex_gbnf.h) and the grammar it makes.
//
// The input is a schema's JSON text (most inputs that parse are schemas of
// some sort; the seeds are real ones). Promises checked: a refusal is
// INVALID_ARGUMENT; a schema that compiles gives a grammar whose automaton
// starts and walks a few bytes without a crash or a hang (the compiler's
// limits bound size and depth).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/constrain/grammar_automaton.h"
#include "core/constrain/json_schema.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view schema = fuzz::AsView(data, size);
  constrain::JsonSchemaLimits limits;
  limits.max_count = 200;
  limits.max_grammar_bytes = 1 << 20;
  absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
      constrain::CompileJsonSchema(schema, limits);
  if (!g.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(g.status()), "%s",
               g.status().ToString().c_str());
    return 0;
  }
  constrain::GrammarAutomaton a(
      *g, constrain::AutomatonLimits{.max_states = 2000, .max_stacks = 200000});
  int32_t s = a.start();
  for (char c : std::string_view("{\"a\": [1, \"x\", true, null]}")) {
    if (s < 0) break;
    s = a.Next(s, static_cast<uint8_t>(c));
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

// Fuzzes the GBNF compiler and the automaton that walks its grammars
// (core/constrain/grammar.h, grammar_automaton.h).
//
// The input up to a NUL is a grammar; after it, bytes to walk. Promises
// checked: every failure to compile is INVALID_ARGUMENT; a compiled grammar
// is walked without a crash or a hang (small automaton limits bound it),
// and a state the walk reaches that can end is not dead.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/constrain/grammar.h"
#include "core/constrain/grammar_automaton.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::AsView(data, size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view walk =
      nul == std::string_view::npos ? "" : input.substr(nul + 1);
  constrain::GrammarLimits limits;
  limits.max_elements = 20000;
  limits.max_repetition = 50;
  absl::StatusOr<constrain::Grammar> g =
      constrain::ParseGbnf(text, "root", limits);
  if (!g.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(g.status()), "%s",
               g.status().ToString().c_str());
    return 0;
  }
  constrain::GrammarAutomaton a(
      std::make_shared<const constrain::Grammar>(*std::move(g)),
      constrain::AutomatonLimits{.max_states = 2000, .max_stacks = 200000});
  int32_t s = a.start();
  for (char c : walk) {
    if (s < 0) break;
    FUZZ_CHECK(!a.IsFinal(s) || a.CanEnd(s), "a final state that cannot end");
    s = a.Next(s, static_cast<uint8_t>(c));
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

// Random sentences of a grammar, for tests that check what a grammar
// allows (each sentence must validate, parse, ...).
#ifndef KVSERVE_TESTS_TESTING_RANDOM_SENTENCE_H_
#define KVSERVE_TESTS_TESTING_RANDOM_SENTENCE_H_

#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "core/constrain/grammar_automaton.h"

namespace kvserve::testing {

// A random text of the grammar: `prefix` (nullopt if the grammar does not
// allow it), up to `random_bytes` random bytes among
// those allowed (printable ASCII where the grammar allows any, else any
// byte), then the shortest completion (breadth-first over the automaton's
// states, printable ASCII first; past `max_states`, the completion that
// closes quotes and brackets first). nullopt when none is found.
std::optional<std::string> RandomSentence(constrain::GrammarAutomaton& a,
                                          std::mt19937& rng, int random_bytes,
                                          size_t max_states = 50000,
                                          std::string_view prefix = "");

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_RANDOM_SENTENCE_H_

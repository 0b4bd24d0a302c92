#include "tests/testing/random_sentence.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvserve::testing {
namespace {

// Every byte value, printable ASCII first.
const std::vector<uint8_t>& ByteOrder() {
  static const auto* const order = [] {
    auto* v = new std::vector<uint8_t>;
    for (int b = 0x20; b < 0x7F; ++b) v->push_back(b);
    for (int b = 0x80; b < 0x100; ++b) v->push_back(b);
    for (int b = 0; b < 0x20; ++b) v->push_back(b);
    v->push_back(0x7F);
    return v;
  }();
  return *order;
}

// A completion that closes what is open as soon as the grammar lets it:
// for grammars whose shortest completion lies past more states than a
// breadth-first search can visit (a long closing marker after an object
// with free-form keys).
std::optional<std::string> GreedyCompletion(constrain::GrammarAutomaton& a,
                                            int32_t s) {
  static const auto* const order = [] {
    auto* v = new std::vector<uint8_t>{'"', '}', ']'};
    for (int b = '0'; b <= '9'; ++b) v->push_back(b);
    for (int b = 'a'; b <= 'z'; ++b) v->push_back(b);
    for (uint8_t b : ByteOrder()) {
      if (std::find(v->begin(), v->end(), b) == v->end() && b != ' ' &&
          b != '\n' && b != '\t' && b != '\r') {
        v->push_back(b);
      }
    }
    for (uint8_t b : {' ', '\n', '\t', '\r'}) v->push_back(b);
    return v;
  }();
  std::string tail;
  for (int step = 0; step < 10000; ++step) {
    if (a.CanEnd(s)) return tail;
    int32_t next = -1;
    for (uint8_t b : *order) {
      next = a.Next(s, b);
      if (next >= 0) {
        tail.push_back(static_cast<char>(b));
        break;
      }
    }
    if (next < 0) return std::nullopt;
    s = next;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> RandomSentence(constrain::GrammarAutomaton& a,
                                          std::mt19937& rng, int random_bytes,
                                          size_t max_states,
                                          std::string_view prefix) {
  std::string text(prefix);
  int32_t s = a.Walk(a.start(), prefix);
  if (s < 0) return std::nullopt;
  for (int i = 0; i < random_bytes && !a.IsFinal(s); ++i) {
    std::vector<std::pair<uint8_t, int32_t>> printable, other;
    for (uint8_t b : ByteOrder()) {
      const int32_t t = a.Next(s, b);
      if (t < 0) continue;
      (b >= 0x20 && b < 0x7F ? printable : other).emplace_back(b, t);
    }
    const auto& next = printable.empty() ? other : printable;
    if (next.empty()) break;
    const auto [b, t] = next[rng() % next.size()];
    text.push_back(static_cast<char>(b));
    s = t;
  }
  // Breadth-first to a state that can end.
  absl::flat_hash_map<int32_t, std::pair<int32_t, char>> from;
  std::deque<int32_t> queue = {s};
  from[s] = {-1, 0};
  while (!queue.empty() && from.size() < max_states) {
    const int32_t x = queue.front();
    queue.pop_front();
    if (a.CanEnd(x)) {
      std::string tail;
      for (int32_t y = x; from[y].first >= 0; y = from[y].first) {
        tail.push_back(from[y].second);
      }
      std::reverse(tail.begin(), tail.end());
      return text + tail;
    }
    for (uint8_t b : ByteOrder()) {
      const int32_t t = a.Next(x, b);
      if (t >= 0 && !from.count(t)) {
        from[t] = {x, static_cast<char>(b)};
        queue.push_back(t);
      }
    }
  }
  std::optional<std::string> tail = GreedyCompletion(a, s);
  if (tail.has_value()) return text + *tail;
  return std::nullopt;
}

}  // namespace kvserve::testing

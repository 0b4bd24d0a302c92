#include "core/tokenizer/special_tokens.h"

#include <algorithm>
#include <string>

namespace kvserve {
namespace {

bool IsSpecial(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

// The end-of-turn texts llama.cpp recognizes when it loads a vocabulary (its
// end-of-generation list and its eot auto-detection list together).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
};

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const Vocab& vocab, Kinds kinds) {
  first_byte_.fill(-1);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    const TokenType type = vocab.type(id);
    if (!IsSpecial(type) || text.empty() ||
        (kinds == Kinds::kUserDefinedOnly && type != TokenType::kUserDefined)) {
      continue;
    }
    int32_t& first = first_byte_[static_cast<uint8_t>(text[0])];
    if (first < 0) {
      first = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    int32_t node = first;
    for (size_t i = 1; i < text.size(); ++i) {
      const auto byte = static_cast<uint8_t>(text[i]);
      std::vector<std::pair<uint8_t, int32_t>>& children =
          nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), byte,
                                 [](const std::pair<uint8_t, int32_t>& c,
                                    uint8_t b) { return c.first < b; });
      if (it != children.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const auto child = static_cast<int32_t>(nodes_.size());
      children.insert(it, {byte, child});
      nodes_.emplace_back();  // invalidates `children`; not used again
      node = child;
    }
    nodes_[node].id = id;
  }
}

std::pair<int32_t, size_t> SpecialTokenMatcher::LongestAt(std::string_view text,
                                                          size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = first_byte_[static_cast<uint8_t>(text[pos])];
  for (size_t i = pos + 1; node >= 0; ++i) {
    const Node& n = nodes_[node];
    if (n.id >= 0) best = {n.id, i - pos};
    if (i == text.size()) break;
    const auto byte = static_cast<uint8_t>(text[i]);
    auto it = std::lower_bound(n.children.begin(), n.children.end(), byte,
                               [](const std::pair<uint8_t, int32_t>& c,
                                  uint8_t b) { return c.first < b; });
    node = it != n.children.end() && it->first == byte ? it->second : -1;
  }
  return best;
}

std::vector<SpecialTokenMatcher::Fragment> SpecialTokenMatcher::Split(
    std::string_view text) const {
  std::vector<Fragment> out;
  size_t run_start = 0;  // of the ordinary text not yet emitted
  for (size_t pos = 0; pos < text.size();) {
    if (first_byte_[static_cast<uint8_t>(text[pos])] < 0) {
      ++pos;
      continue;
    }
    const auto [id, len] = LongestAt(text, pos);
    if (id < 0) {
      ++pos;
      continue;
    }
    if (pos > run_start) {
      out.push_back({text.substr(run_start, pos - run_start), -1});
    }
    out.push_back({text.substr(pos, len), id});
    pos += len;
    run_start = pos;
  }
  if (run_start < text.size()) out.push_back({text.substr(run_start), -1});
  return out;
}

std::vector<SpecialTokenMatcher::Fragment> SpecialTokenMatcher::SplitWithin(
    std::string_view text, const std::vector<ByteRange>& ranges,
    const SpecialTokenMatcher* outside) const {
  std::vector<Fragment> out;
  size_t run_start = 0;  // of the ordinary text not yet emitted
  size_t r = 0;          // the first range that ends after pos
  for (size_t pos = 0; pos < text.size();) {
    while (r < ranges.size() && ranges[r].end <= pos) ++r;
    std::pair<int32_t, size_t> match{-1, 0};
    if (r < ranges.size() && ranges[r].begin <= pos &&
        first_byte_[static_cast<uint8_t>(text[pos])] >= 0) {
      // Bounded by the range: a text running past it is not matched.
      match =
          LongestAt(text.substr(0, std::min(ranges[r].end, text.size())), pos);
    }
    if (match.first < 0 && outside != nullptr && !outside->empty() &&
        outside->first_byte_[static_cast<uint8_t>(text[pos])] >= 0) {
      match = outside->LongestAt(text, pos);
    }
    const auto [id, len] = match;
    if (id < 0) {
      ++pos;
      continue;
    }
    if (pos > run_start) {
      out.push_back({text.substr(run_start, pos - run_start), -1});
    }
    out.push_back({text.substr(pos, len), id});
    pos += len;
    run_start = pos;
  }
  if (run_start < text.size()) out.push_back({text.substr(run_start), -1});
  return out;
}

std::vector<bool> EndOfGenerationMask(const Vocab& vocab) {
  std::vector<bool> mask(vocab.tokens.size(), false);
  for (int32_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
    if (id >= 0 && id < vocab.size()) mask[id] = true;
  }
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.type(id) != TokenType::kControl) continue;
    const std::string& text = vocab.tokens[id];
    for (std::string_view eot : kEndOfTurnTexts) {
      if (text == eot) mask[id] = true;
    }
  }
  return mask;
}

}  // namespace kvserve

#include "core/text/stop_matcher.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve {
namespace {

bool IsContinuationByte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Length of the longest suffix of `text` that is a proper prefix of `stop`.
size_t LongestSuffixThatStartsStop(std::string_view text,
                                   std::string_view stop) {
  for (size_t n = std::min(text.size(), stop.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == stop.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

StopMatcher::Result StopMatcher::Push(std::string_view text) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  held_.append(text);

  size_t match = std::string::npos;
  for (const std::string& stop : stops_) {
    match = std::min(match, held_.find(stop));
  }
  if (match != std::string::npos) {
    held_.resize(match);
    result.text = std::move(held_);
    held_.clear();
    result.stopped = stopped_ = true;
    return result;
  }

  size_t hold = 0;
  for (const std::string& stop : stops_) {
    hold = std::max(hold, LongestSuffixThatStartsStop(held_, stop));
  }
  size_t cut = held_.size() - hold;
  // Back to the start of the character the cut falls in: at most 3
  // continuation bytes, as no character has more. (Walking back over every
  // continuation byte held a run of stray ones, invalid UTF-8, forever:
  // found by tests/fuzz/utf8_fuzzer.cc.)
  for (int back = 0; back < 3 && cut > 0 && cut < held_.size() &&
                     IsContinuationByte(held_[cut]);
       ++back) {
    --cut;
  }
  result.text = held_.substr(0, cut);
  held_.erase(0, cut);
  return result;
}

std::string StopMatcher::Flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace kvserve

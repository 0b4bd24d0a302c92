// StopMatcher: finds stop strings in streamed text across piece boundaries.
//
// Text that could still be the beginning of a stop string is held back; text
// before a match is released; the stop string itself and anything after it
// are never released. The stream stops at the first push that completes any
// stop string; when several complete in the same push, the one starting
// earliest wins. Held-back text is always a suffix shorter than the longest
// stop string (extended only to the start of a UTF-8 character), so nothing
// is held back forever and the released text never ends inside a character
// that the input had complete.
//
// Thread-safety: not thread-safe; one matcher per stream.
#ifndef KVSERVE_CORE_TEXT_STOP_MATCHER_H_
#define KVSERVE_CORE_TEXT_STOP_MATCHER_H_

#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored; with no stops, text passes through.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;  // safe to emit now
    bool stopped = false;
  };
  // After a push returned stopped, every later push returns {"", true}.
  Result Push(std::string_view text);
  // The held-back text when the stream ends without a match (empty after a
  // match). Clears the held-back text.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty; constant after construction
  std::string held_;                // a possible beginning of a stop string
  bool stopped_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TEXT_STOP_MATCHER_H_

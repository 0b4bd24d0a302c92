// TokenQueue: the TokenSinks of one HTTP generation's choices (one per
// choice: a request's n choices of each of its prompts). The engine thread
// pushes tokens and each choice's final result (never blocking: a short
// critical section); the request's handler thread takes them with Next(),
// in the order each choice made them.
//
// Lifetime: the engine holds only raw TokenSink pointers, so the queue must
// outlive every choice's OnFinish; its owner calls WaitFinished() (after
// cancelling, if the request is abandoned) before letting it go.
//
// Thread-safety: all methods are thread-safe.
#ifndef KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_
#define KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/requests.h"

namespace kvserve::http {

class TokenQueue {
 public:
  // A token of choice `index`, or its result (its last event, given once).
  struct Event {
    int index = 0;
    std::variant<GeneratedToken, absl::StatusOr<GenerateResult>> what;
  };

  // REQUIRES: choices >= 1.
  explicit TokenQueue(int choices = 1);
  TokenQueue(const TokenQueue&) = delete;
  TokenQueue& operator=(const TokenQueue&) = delete;

  // The sink of choice `index`, for its GenerateCall.
  TokenSink* sink(int index) { return &sinks_[index]; }

  // The next event, waiting at most `timeout`; nullopt when none came.
  std::optional<Event> Next(std::chrono::milliseconds timeout);
  // Returns once every choice's OnFinish has run.
  void WaitFinished();

 private:
  class ChoiceSink final : public TokenSink {
   public:
    ChoiceSink(TokenQueue* queue, int index) : queue_(queue), index_(index) {}
    void OnToken(GeneratedToken token) override;
    void OnFinish(absl::StatusOr<GenerateResult> result) override;

   private:
    TokenQueue* const queue_;
    const int index_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;  // guarded by mu_
  int unfinished_;            // guarded by mu_; choices before OnFinish
  std::vector<ChoiceSink> sinks_;
};

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_

// TokenQueue: the TokenSink of one HTTP generation. The engine thread pushes
// tokens and the final result (never blocking: a short critical section);
// the request's handler thread takes them in order with Next().
//
// Lifetime: the engine holds only a raw TokenSink*, so the queue must
// outlive OnFinish; its owner calls WaitFinished() (after Cancel(), if the
// request is abandoned) before letting it go.
//
// Thread-safety: all methods are thread-safe.
#ifndef KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_
#define KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <variant>

#include "absl/status/statusor.h"
#include "core/engine/requests.h"

namespace kvserve::http {

class TokenQueue final : public TokenSink {
 public:
  // A token, or the result (always the last event, given once).
  using Event = std::variant<GeneratedToken, absl::StatusOr<GenerateResult>>;

  // TokenSink, on the engine thread.
  void OnToken(GeneratedToken token) override;
  void OnFinish(absl::StatusOr<GenerateResult> result) override;

  // The next event, waiting at most `timeout`; nullopt when none came (or
  // the result was already taken).
  std::optional<Event> Next(std::chrono::milliseconds timeout);
  // Returns once OnFinish has run.
  void WaitFinished();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GeneratedToken> tokens_;                     // guarded by mu_
  std::optional<absl::StatusOr<GenerateResult>> result_;  // guarded by mu_
  bool finished_ = false;  // guarded by mu_; OnFinish has run
};

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_TOKEN_QUEUE_H_

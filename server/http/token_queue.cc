#include "server/http/token_queue.h"

#include <utility>

namespace kvserve::http {

void TokenQueue::OnToken(GeneratedToken token) {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_.push_back(std::move(token));
  cv_.notify_all();
}

// Notifies under mu_: the owner may destroy the queue as soon as it sees
// finished_, which it can only do after this releases mu_, the last use of
// `this` here.
void TokenQueue::OnFinish(absl::StatusOr<GenerateResult> result) {
  std::lock_guard<std::mutex> lock(mu_);
  result_ = std::move(result);
  finished_ = true;
  cv_.notify_all();
}

std::optional<TokenQueue::Event> TokenQueue::Next(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout,
               [&] { return !tokens_.empty() || result_.has_value(); });
  if (!tokens_.empty()) {
    Event event = std::move(tokens_.front());
    tokens_.pop_front();
    return event;
  }
  if (result_.has_value()) {
    Event event = *std::move(result_);
    result_.reset();
    return event;
  }
  return std::nullopt;
}

void TokenQueue::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
}

}  // namespace kvserve::http

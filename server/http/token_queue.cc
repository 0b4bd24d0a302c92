#include "server/http/token_queue.h"

#include <utility>

namespace kvserve::http {

TokenQueue::TokenQueue(int choices) : unfinished_(choices) {
  sinks_.reserve(choices);
  for (int i = 0; i < choices; ++i) sinks_.emplace_back(this, i);
}

void TokenQueue::ChoiceSink::OnToken(GeneratedToken token) {
  std::lock_guard<std::mutex> lock(queue_->mu_);
  queue_->events_.push_back(Event{index_, std::move(token)});
  queue_->cv_.notify_all();
}

// Notifies under mu_: the owner may destroy the queue as soon as it sees
// the last choice finished, which it can only do after this releases mu_,
// the last use of the queue here.
void TokenQueue::ChoiceSink::OnFinish(absl::StatusOr<GenerateResult> result) {
  std::lock_guard<std::mutex> lock(queue_->mu_);
  queue_->events_.push_back(Event{index_, std::move(result)});
  --queue_->unfinished_;
  queue_->cv_.notify_all();
}

std::optional<TokenQueue::Event> TokenQueue::Next(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  if (events_.empty()) return std::nullopt;
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void TokenQueue::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return unfinished_ == 0; });
}

}  // namespace kvserve::http

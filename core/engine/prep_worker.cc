#include "core/engine/prep_worker.h"

#include <utility>

namespace kvserve {

PrepWorker::PrepWorker() : thread_([this] { Run(); }) {}

PrepWorker::~PrepWorker() { Stop(); }

void PrepWorker::Post(absl::AnyInvocable<void() &&> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      changed_.notify_one();
      return;
    }
  }
  std::move(task)();
}

void PrepWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void PrepWorker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::move(task)();
    lock.lock();
  }
}

}  // namespace kvserve

// PrepWorker: a thread that turns requests' input into tokens (tokenizing
// text, rendering and tokenizing chat conversations), so that the engine
// thread, which steps every running sequence, never spends a long prompt's
// tokenization between two steps.
//
// Thread-safety: Post() and Stop() may be called from any thread.
#ifndef KVSERVE_CORE_ENGINE_PREP_WORKER_H_
#define KVSERVE_CORE_ENGINE_PREP_WORKER_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/functional/any_invocable.h"

namespace kvserve {

class PrepWorker {
 public:
  PrepWorker();
  ~PrepWorker();  // Stop()
  PrepWorker(const PrepWorker&) = delete;
  PrepWorker& operator=(const PrepWorker&) = delete;

  // Runs `task` on the worker thread, after the tasks posted before it.
  // After Stop() it runs on the caller's thread.
  void Post(absl::AnyInvocable<void() &&> task);
  // Runs the tasks still queued, then ends the thread.
  void Stop();

 private:
  void Run();

  // std::mutex, not absl::Mutex: ThreadSanitizer sees these.
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_;  // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_ENGINE_PREP_WORKER_H_

// StreamWatchdog: cancels the server streams of clients that stopped
// reading, so that their queued responses do not pile up.
//
// A stream reports each write it starts and each that completes, and says
// when its engine work has finished while responses still wait to be
// written ("unflushed"). The watchdog's thread cancels a stream whose write
// has not completed within Options::write_timeout, and, while more than
// Options::max_unflushed_streams streams are unflushed, the one unflushed
// longest. A cancelled stream is forgotten at once, and each cancellation
// is logged on stderr naming the limit.
//
// Lock order: a stream may call the watchdog while holding its own lock; the
// watchdog calls Stream::Ref under its lock and Stream::Cancel and
// Stream::Unref without it.
//
// Thread-safety: thread-safe.
#ifndef KVSERVE_SERVER_STREAM_WATCHDOG_H_
#define KVSERVE_SERVER_STREAM_WATCHDOG_H_

#include <list>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvserve {

class StreamWatchdog {
 public:
  struct Options {
    // A write still pending after this long cancels its stream; zero or
    // less: never (--stream_write_timeout_seconds).
    absl::Duration write_timeout = absl::Seconds(30);
    // The most streams kept unflushed; beyond it the oldest is cancelled.
    // Zero or less: no limit (--max_unflushed_streams).
    int max_unflushed_streams = 256;
  };

  // What the watchdog watches; the server's Generate reactor.
  class Stream {
   public:
    virtual ~Stream() = default;
    // Keep the stream alive until the matching Unref.
    virtual void Ref() = 0;
    virtual void Unref() = 0;
    // Cancels the stream (its engine call and its RPC) and drops its queued
    // responses, unless it is already finishing. `why` names the limit.
    virtual void Cancel(const std::string& why) = 0;

   private:
    friend class StreamWatchdog;
    // Guarded by the watchdog's mu_.
    bool writing_ = false;
    std::list<Stream*>::iterator write_pos_;
    absl::Time write_deadline_;
    bool unflushed_ = false;
    std::list<Stream*>::iterator unflushed_pos_;
  };

  explicit StreamWatchdog(const Options& options);
  // REQUIRES: every stream was Removed.
  ~StreamWatchdog();
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // REQUIRES: no write of `stream` is pending.
  void WriteStarted(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void WriteDone(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // The stream's engine work finished; its last responses wait.
  void Unflushed(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `stream` (before it is deleted).
  void Remove(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);

  // For tests and metrics.
  int unflushed_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  int cancelled_streams() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetLocked(Stream* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  // Streams with a write pending, oldest first (write_timeout is the same
  // for all, so this is also deadline order).
  std::list<Stream*> writes_ ABSL_GUARDED_BY(mu_);
  // Unflushed streams, oldest first.
  std::list<Stream*> unflushed_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_STREAM_WATCHDOG_H_

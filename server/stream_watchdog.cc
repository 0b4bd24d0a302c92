#include "server/stream_watchdog.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace kvserve {

StreamWatchdog::StreamWatchdog(const Options& options)
    : options_(options), thread_([this] { Run(); }) {}

StreamWatchdog::~StreamWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.Signal();
  }
  thread_.join();
}

void StreamWatchdog::WriteStarted(Stream* stream) {
  if (options_.write_timeout <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  stream->writing_ = true;
  stream->write_deadline_ = absl::Now() + options_.write_timeout;
  stream->write_pos_ = writes_.insert(writes_.end(), stream);
  if (writes_.size() == 1) changed_.Signal();  // a first deadline
}

void StreamWatchdog::WriteDone(Stream* stream) {
  if (options_.write_timeout <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  if (!stream->writing_) return;  // cancelled meanwhile
  stream->writing_ = false;
  writes_.erase(stream->write_pos_);
}

void StreamWatchdog::Unflushed(Stream* stream) {
  if (options_.max_unflushed_streams <= 0) return;
  absl::MutexLock lock(&mu_);
  if (stream->unflushed_) return;
  stream->unflushed_ = true;
  stream->unflushed_pos_ = unflushed_.insert(unflushed_.end(), stream);
  if (static_cast<int>(unflushed_.size()) > options_.max_unflushed_streams) {
    changed_.Signal();
  }
}

void StreamWatchdog::Remove(Stream* stream) {
  absl::MutexLock lock(&mu_);
  ForgetLocked(stream);
}

int StreamWatchdog::unflushed_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(unflushed_.size());
}

int StreamWatchdog::cancelled_streams() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void StreamWatchdog::ForgetLocked(Stream* stream) {
  if (stream->writing_) {
    stream->writing_ = false;
    writes_.erase(stream->write_pos_);
  }
  if (stream->unflushed_) {
    stream->unflushed_ = false;
    unflushed_.erase(stream->unflushed_pos_);
  }
}

void StreamWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    std::vector<std::pair<Stream*, std::string>> victims;
    while (!writes_.empty() && writes_.front()->write_deadline_ <= now) {
      victims.emplace_back(
          writes_.front(),
          absl::StrFormat("a response waited more than %s for the client to "
                          "read it (--stream_write_timeout_seconds=%d)",
                          absl::FormatDuration(options_.write_timeout),
                          absl::ToInt64Seconds(options_.write_timeout)));
      ForgetLocked(writes_.front());
    }
    while (options_.max_unflushed_streams > 0 &&
           static_cast<int>(unflushed_.size()) >
               options_.max_unflushed_streams) {
      victims.emplace_back(
          unflushed_.front(),
          absl::StrFormat("more than %d finished streams had responses the "
                          "client had not read; this was the oldest "
                          "(--max_unflushed_streams=%d)",
                          options_.max_unflushed_streams,
                          options_.max_unflushed_streams));
      ForgetLocked(unflushed_.front());
    }
    if (!victims.empty()) {
      cancelled_ += static_cast<int>(victims.size());
      // Alive until Unref, though gRPC may end them meanwhile.
      for (auto& [stream, why] : victims) stream->Ref();
      mu_.Unlock();
      for (auto& [stream, why] : victims) {
        std::fprintf(stderr, "kvserve: warning: cancelled a stream: %s\n",
                     why.c_str());
        stream->Cancel(why);
        stream->Unref();
      }
      std::fflush(stderr);
      mu_.Lock();
      continue;
    }
    const absl::Time deadline = writes_.empty()
                                    ? absl::InfiniteFuture()
                                    : writes_.front()->write_deadline_;
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

}  // namespace kvserve

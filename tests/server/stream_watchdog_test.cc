#include "server/stream_watchdog.h"

#include <atomic>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

class FakeStream : public StreamWatchdog::Stream {
 public:
  void Ref() override { refs_.fetch_add(1); }
  void Unref() override { refs_.fetch_sub(1); }
  void Cancel(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    ++cancels_;
    why_ = why;
    cancel_time_ = absl::Now();
  }
  int cancels() const {
    absl::MutexLock lock(&mu_);
    return cancels_;
  }
  std::string why() const {
    absl::MutexLock lock(&mu_);
    return why_;
  }
  absl::Time cancel_time() const {
    absl::MutexLock lock(&mu_);
    return cancel_time_;
  }
  int refs() const { return refs_.load(); }

  // Waits until cancelled or `timeout`.
  bool WaitCancelled(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](const int* n) { return *n > 0; }, &cancels_),
        timeout);
  }

 private:
  std::atomic<int> refs_{0};
  mutable absl::Mutex mu_;
  int cancels_ = 0;
  std::string why_;
  absl::Time cancel_time_;
};

TEST(StreamWatchdogTest, StalledWriteIsCancelledAfterTheTimeout) {
  StreamWatchdog watchdog(
      {.write_timeout = absl::Milliseconds(200), .max_unflushed_streams = 0});
  FakeStream stalled, reading;
  const absl::Time start = absl::Now();
  watchdog.WriteStarted(&stalled);
  watchdog.WriteStarted(&reading);
  watchdog.WriteDone(&reading);
  ASSERT_TRUE(stalled.WaitCancelled(absl::Seconds(10)));
  EXPECT_GE(stalled.cancel_time() - start, absl::Milliseconds(200));
  EXPECT_THAT(stalled.why(), HasSubstr("--stream_write_timeout_seconds"));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(stalled.refs(), 0);     // referenced only while cancelled
  EXPECT_EQ(stalled.cancels(), 1);  // forgotten once cancelled
  EXPECT_EQ(reading.cancels(), 0);
  EXPECT_EQ(watchdog.cancelled_streams(), 1);
  watchdog.WriteDone(&stalled);  // late: a no-op
  watchdog.Remove(&stalled);
  watchdog.Remove(&reading);
}

TEST(StreamWatchdogTest, EveryWriteGetsItsOwnTimeout) {
  StreamWatchdog watchdog(
      {.write_timeout = absl::Milliseconds(300), .max_unflushed_streams = 0});
  FakeStream slow_reader;
  // Many writes, each completing in time, add up to more than the timeout.
  for (int i = 0; i < 10; ++i) {
    watchdog.WriteStarted(&slow_reader);
    absl::SleepFor(absl::Milliseconds(50));
    watchdog.WriteDone(&slow_reader);
  }
  EXPECT_FALSE(slow_reader.WaitCancelled(absl::Milliseconds(600)));
  watchdog.Remove(&slow_reader);
}

TEST(StreamWatchdogTest, RemovedStreamIsNeverCancelled) {
  StreamWatchdog watchdog(
      {.write_timeout = absl::Milliseconds(50), .max_unflushed_streams = 1});
  FakeStream gone;
  watchdog.WriteStarted(&gone);
  watchdog.Unflushed(&gone);
  watchdog.Remove(&gone);
  EXPECT_FALSE(gone.WaitCancelled(absl::Milliseconds(300)));
  EXPECT_EQ(watchdog.unflushed_streams(), 0);
}

TEST(StreamWatchdogTest, OldestUnflushedBeyondTheLimitIsCancelled) {
  StreamWatchdog watchdog(
      {.write_timeout = absl::ZeroDuration(), .max_unflushed_streams = 2});
  FakeStream first, second, third;
  watchdog.Unflushed(&first);
  watchdog.Unflushed(&second);
  watchdog.Unflushed(&second);  // counted once
  EXPECT_EQ(watchdog.unflushed_streams(), 2);
  EXPECT_FALSE(first.WaitCancelled(absl::Milliseconds(100)));
  watchdog.Unflushed(&third);
  ASSERT_TRUE(first.WaitCancelled(absl::Seconds(10)));
  EXPECT_THAT(first.why(), HasSubstr("--max_unflushed_streams=2"));
  EXPECT_EQ(second.cancels(), 0);
  EXPECT_EQ(third.cancels(), 0);
  EXPECT_EQ(watchdog.unflushed_streams(), 2);
  for (FakeStream* s : {&first, &second, &third}) watchdog.Remove(s);
  EXPECT_EQ(watchdog.unflushed_streams(), 0);
}

TEST(StreamWatchdogTest, ZeroTimeoutNeverCancels) {
  StreamWatchdog watchdog(
      {.write_timeout = absl::ZeroDuration(), .max_unflushed_streams = 0});
  FakeStream stalled;
  watchdog.WriteStarted(&stalled);
  for (int i = 0; i < 1000; ++i) {
    FakeStream s;
    watchdog.Unflushed(&s);
    watchdog.Remove(&s);
  }
  EXPECT_FALSE(stalled.WaitCancelled(absl::Milliseconds(200)));
  watchdog.Remove(&stalled);
}

}  // namespace
}  // namespace kvserve

// Waiting for the engine in tests: its callbacks and sinks run on the engine
// thread; these hand the result to the test's thread. Plus a Tokenizer that
// forwards to another, for fakes that change one behaviour.
#ifndef KVSERVE_TESTS_TESTING_ENGINE_WAITERS_H_
#define KVSERVE_TESTS_TESTING_ENGINE_WAITERS_H_

#include <chrono>
#include <future>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/engine/engine.h"

namespace kvserve::testing {

// A Callback<T> whose result Wait() returns.
template <typename T>
class Waiter {
 public:
  Callback<T> callback() {
    return [this](absl::StatusOr<T> r) { done_.set_value(std::move(r)); };
  }
  absl::StatusOr<T> Wait() { return done_.get_future().get(); }

 private:
  std::promise<absl::StatusOr<T>> done_;
};

// Collects one request's tokens and text (the held-back tail included);
// Wait() blocks until OnFinish.
class CollectingSink : public TokenSink {
 public:
  void OnToken(GeneratedToken token) override {
    tokens_.push_back(token.token_id);
    text_ += token.text;
  }
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    if (result.ok()) text_ += result->text;
    done_.set_value(std::move(result));
  }
  absl::StatusOr<GenerateResult> Wait() { return future_.get(); }
  // OnFinish has run.
  bool Done() const {
    return future_.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }
  // Read after Wait().
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& text() const { return text_; }

 private:
  std::vector<int32_t> tokens_;
  std::string text_;
  std::promise<absl::StatusOr<GenerateResult>> done_;
  std::future<absl::StatusOr<GenerateResult>> future_ = done_.get_future();
};

// An EngineObserver that ignores everything; tests override what they count.
class NullObserver : public EngineObserver {
 public:
  void OnStep(int64_t, int64_t, double) override {}
  void OnQueueWait(double) override {}
  void OnFirstToken(double) override {}
  void OnInterToken(double) override {}
  void OnPrompt(int64_t, int64_t) override {}
  void OnGenerated(int64_t) override {}
  void OnEviction(std::string_view) override {}
  void OnPreemption() override {}
  void OnSessionLogRecovered() override {}
  void OnStats(const EngineStats&) override {}
  void OnWarning(std::string_view) override {}
};

// Forwards every call to `base`; fakes override what they change.
class ForwardingTokenizer : public Tokenizer {
 public:
  explicit ForwardingTokenizer(const Tokenizer* base) : base_(base) {}
  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override {
    return base_->Encode(text, options);
  }
  std::string DecodeToken(int32_t prev, int32_t id) const override {
    return base_->DecodeToken(prev, id);
  }
  std::string Piece(int32_t id) const override { return base_->Piece(id); }
  int32_t vocab_size() const override { return base_->vocab_size(); }
  int32_t bos_id() const override { return base_->bos_id(); }
  int32_t eos_id() const override { return base_->eos_id(); }
  bool IsEndOfGeneration(int32_t id) const override {
    return base_->IsEndOfGeneration(id);
  }
  bool IsControl(int32_t id) const override { return base_->IsControl(id); }

 protected:
  const Tokenizer* base() const { return base_; }

 private:
  const Tokenizer* base_;
};

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_ENGINE_WAITERS_H_

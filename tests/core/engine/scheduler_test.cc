// The scheduler alone, in-process on the built-in model: admission limits,
// decode-first ordering, the chunked prefill budget, KV reservation with
// spilling and preemption, and retiring after a failed forward pass.
#include "core/engine/scheduler.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/util/status_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"

namespace kvserve {
namespace {

constexpr int kBlockTokens = 16;

// How a finished sequence ended; nullopt for an error or no outcome.
std::optional<FinishReason> EndOf(const Sequence& seq) {
  if (!seq.outcome.has_value() || !seq.outcome->ok()) return std::nullopt;
  return **seq.outcome;
}

class NullSink : public TokenSink {
 public:
  void OnToken(GeneratedToken) override {}
  void OnFinish(absl::StatusOr<GenerateResult>) override {}
};

class CountingObserver : public testing::NullObserver {
 public:
  void OnPrompt(int64_t prompt, int64_t cached) override {
    prompt_tokens += prompt;
    cached_tokens += cached;
  }
  void OnEviction(std::string_view reason) override {
    evictions.push_back(std::string(reason));
  }
  void OnPreemption() override { ++preemptions; }

  int64_t prompt_tokens = 0, cached_tokens = 0;
  int preemptions = 0;
  std::vector<std::string> evictions;
};

class SchedulerTest : public ::testing::Test {
 protected:
  // A pool of `blocks` blocks of kBlockTokens positions.
  void Start(SchedulerOptions options, int blocks) {
    const ModelConfig& c = loaded_->weights->config;
    BlockPoolOptions o{.n_layers = c.n_layers,
                       .n_kv_heads = c.n_kv_heads,
                       .head_dim = c.head_dim,
                       .block_tokens = kBlockTokens,
                       .dtype = DType::kF32,
                       .capacity_bytes = int64_t{blocks} * kBlockTokens *
                                         c.KvBytesPerToken(DType::kF32)};
    auto pool = BlockPool::Create(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    auto model = Model::Create(loaded_->weights.get(), pool_.get(),
                               {.max_batch_tokens = options.max_batch_tokens});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    store_ = std::make_unique<SessionStore>(pool_.get());
    prefix_cache_ = std::make_unique<PrefixCache>(pool_.get());
    auto tiers = SessionTiers::Create(
        SessionTiersOptions{.vocab_size = c.vocab_size, .max_context = 2048},
        store_.get(), prefix_cache_.get(), [](std::string_view) {});
    ASSERT_TRUE(tiers.ok()) << tiers.status();
    tiers_ = *std::move(tiers);
    scheduler_ = std::make_unique<Scheduler>(
        options, pool_.get(), prefix_cache_.get(), tiers_.get(), &observer_);
  }

  void TearDown() override {
    if (scheduler_) scheduler_->TakeAll();
  }

  // A sequence on a new ephemeral session holding `prompt` tokens (token
  // ids derived from `seed`), queued.
  Sequence* Enqueue(int64_t prompt, int seed = 0, bool generate = true,
                    int max_tokens = 4) {
    Session* s = store_->Create("", std::nullopt, absl::Now());
    s->ephemeral = true;
    s->busy = true;
    for (int64_t i = 0; i < prompt; ++i) {
      s->tokens.push_back(static_cast<int32_t>((i * 7 + seed * 13 + 1) % 250));
    }
    GenerateParams p;
    p.generate = generate;
    p.max_tokens = max_tokens;
    auto call = std::make_shared<GenerateCall>(std::move(p), &sink_);
    // A queue place as the engine's: counted in queued_ until given back.
    ++queued_;
    call->HoldQueuePlace(
        std::shared_ptr<void>(nullptr, [this](void*) { --queued_; }));
    auto seq =
        std::make_unique<Sequence>(std::move(call), s, absl::Now(), nullptr);
    Sequence* raw = seq.get();
    scheduler_->Enqueue(std::move(seq));
    return raw;
  }

  // Runs the plan's forward pass; emits argmax for chunks that want
  // logits, marking sequences done after max_tokens.
  StepResult Execute(const StepPlan& plan) {
    StepResult result;
    if (plan.batch.empty()) return result;
    absl::StatusOr<absl::Span<const float>> logits =
        model_->Forward(plan.batch);
    result.forward = logits.status();
    result.seconds = 0.01;
    if (!logits.ok()) return result;
    const int vocab = loaded_->weights->config.vocab_size;
    int row = 0;
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      if (!plan.batch[i].want_logits) continue;
      absl::Span<const float> r = logits->subspan(row++ * vocab, vocab);
      Sequence& seq = *plan.seqs[i];
      seq.session->tokens.push_back(std::max_element(r.begin(), r.end()) -
                                    r.begin());
      if (++seq.usage.generated_tokens >= seq.params().max_tokens) {
        seq.outcome = FinishReason::kLength;
      }
    }
    return result;
  }

  // Steps until every sequence is done; returns them in finishing order.
  std::vector<std::unique_ptr<Sequence>> RunToEnd(int max_steps = 200) {
    std::vector<std::unique_ptr<Sequence>> done;
    for (int i = 0; i < max_steps && !scheduler_->idle(); ++i) {
      scheduler_->Admit();
      StepPlan plan = scheduler_->Plan();
      StepResult result = Execute(plan);
      for (auto& seq : scheduler_->Retire(plan, result)) {
        done.push_back(std::move(seq));
      }
    }
    return done;
  }

  // Executes and retires one planned step.
  void Retire(const StepPlan& plan) {
    StepResult result = Execute(plan);
    for (auto& seq : scheduler_->Retire(plan, result)) {
      retired_.push_back(std::move(seq));
    }
  }

  static int64_t ChunkTokens(const StepPlan& plan, const Sequence* seq) {
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      if (plan.seqs[i] == seq) return plan.batch[i].tokens.size();
    }
    return 0;
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  NullSink sink_;
  CountingObserver observer_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SessionStore> store_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::unique_ptr<SessionTiers> tiers_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> retired_;
  int queued_ = 0;  // queue places the calls hold
};

TEST_F(SchedulerTest, AdmitsAtMostMaxRunningAndCountsTheQueued) {
  Start({.max_batch_tokens = 64, .max_running = 2}, 64);
  Enqueue(5, 0);
  Enqueue(5, 1);
  Enqueue(5, 2);
  EXPECT_EQ(queued_, 3);
  scheduler_->Admit();
  EXPECT_EQ(scheduler_->num_running(), 2);
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  EXPECT_EQ(queued_, 1);  // the admitted gave their queue places back
  EXPECT_EQ(observer_.prompt_tokens, 10);
}

TEST_F(SchedulerTest, EveryQueuedSequenceRunsToItsEnd) {
  Start({.max_batch_tokens = 32, .max_running = 2}, 64);
  for (int i = 0; i < 5; ++i) Enqueue(20 + i, i, true, 3);
  std::vector<std::unique_ptr<Sequence>> done = RunToEnd();
  ASSERT_EQ(done.size(), 5u);
  for (const auto& seq : done) {
    ASSERT_TRUE(seq->outcome.has_value());
    EXPECT_EQ(EndOf(*seq), FinishReason::kLength);
    EXPECT_EQ(seq->usage.generated_tokens, 3);
  }
  EXPECT_TRUE(scheduler_->idle());
}

TEST_F(SchedulerTest, DecodeTokensComeFirstAndPrefillIsChunked) {
  Start({.max_batch_tokens = 16, .max_running = 4, .max_step_slowdown = 0}, 64);
  Sequence* a = Enqueue(3, 0);
  scheduler_->Admit();
  // a's prompt, and its first token is sampled: then it decodes.
  StepPlan first = scheduler_->Plan();
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_EQ(first.tokens, 3);
  Retire(first);
  Sequence* b = Enqueue(40, 1);
  scheduler_->Admit();
  StepPlan plan = scheduler_->Plan();
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0], a);  // decode first
  EXPECT_EQ(plan.decode_tokens, 1);
  EXPECT_EQ(ChunkTokens(plan, a), 1);
  EXPECT_EQ(ChunkTokens(plan, b), 15);  // what is left of max_batch_tokens
  EXPECT_FALSE(plan.batch[1].want_logits);
  EXPECT_EQ(plan.tokens, 16);
}

TEST_F(SchedulerTest, PrefillBudgetFollowsMeasuredStepCosts) {
  Start({.max_batch_tokens = 512, .max_running = 4, .max_step_slowdown = 2},
        256);
  // No decode: the whole batch.
  EXPECT_EQ(scheduler_->PrefillBudget(0), 512);
  // Decoding but no costs measured yet: a probe chunk.
  EXPECT_EQ(scheduler_->PrefillBudget(1), 8);
  Sequence* a = Enqueue(2, 0, true, 100);
  scheduler_->Admit();
  StepPlan prompt = scheduler_->Plan();
  ASSERT_EQ(prompt.tokens, 2);
  ASSERT_EQ(prompt.decode_tokens, 0);
  a->session->tokens.push_back(5);
  // A prefill-only step of 2 ms: 1 ms per prefill token.
  scheduler_->Retire(prompt,
                     StepResult{.forward = absl::OkStatus(), .seconds = 0.002});
  EXPECT_EQ(scheduler_->PrefillBudget(1), 8);  // no decode cost yet
  for (int i = 0; i < 3; ++i) {
    StepPlan plan = scheduler_->Plan();
    ASSERT_EQ(plan.decode_tokens, 1);
    ASSERT_EQ(plan.tokens, 1);
    a->session->tokens.push_back(5);
    scheduler_->Retire(
        plan, StepResult{.forward = absl::OkStatus(), .seconds = 0.010});
  }
  // A step may take 2x a 10 ms decode step: 10 ms more, 10 tokens.
  EXPECT_EQ(scheduler_->PrefillBudget(1), 10);
  Sequence* b = Enqueue(400, 1);
  scheduler_->Admit();
  StepPlan mixed = scheduler_->Plan();
  EXPECT_EQ(mixed.decode_tokens, 1);
  EXPECT_EQ(ChunkTokens(mixed, b), 10);
  // Each prompt waiting is allowed that slowdown: with b and two more
  // waiting, a step carries 30 prefill tokens, in admission order.
  EXPECT_EQ(scheduler_->PrefillBudget(1, 3), 30);
  scheduler_->Retire(mixed,
                     StepResult{.forward = absl::OkStatus(), .seconds = 0.020});
  a->session->tokens.push_back(5);
  Sequence* c = Enqueue(12, 2);
  Sequence* d = Enqueue(400, 3);
  scheduler_->Admit();
  EXPECT_EQ(scheduler_->PrefillBudget(1, 3), 30);
  StepPlan burst = scheduler_->Plan();
  EXPECT_EQ(burst.decode_tokens, 1);
  EXPECT_EQ(ChunkTokens(burst, b), 30);
  EXPECT_EQ(ChunkTokens(burst, c), 0);
  EXPECT_EQ(ChunkTokens(burst, d), 0);
  EXPECT_EQ(burst.tokens, 31);
}

TEST_F(SchedulerTest, PreemptsTheMostRecentlyAdmittedSequence) {
  // 6 blocks of 16: two 40-token prompts (3 blocks each) fill the pool.
  Start({.max_batch_tokens = 64, .max_running = 4, .max_step_slowdown = 0}, 6);
  Sequence* older = Enqueue(40, 0, true, 20);
  Sequence* newer = Enqueue(40, 1, true, 20);
  scheduler_->Admit();
  StepPlan first = scheduler_->Plan();
  ASSERT_EQ(first.seqs.size(), 2u);  // 64 tokens: older's 40, newer's 24
  ASSERT_EQ(first.tokens, 64);
  Retire(first);
  // older decodes past its third block and needs a fourth: newer, which
  // holds blocks and was admitted later, gives its blocks up.
  for (int i = 0; i < 12 && observer_.preemptions == 0; ++i) {
    Retire(scheduler_->Plan());
  }
  EXPECT_EQ(observer_.preemptions, 1);
  EXPECT_EQ(newer->session->kv.table.num_tokens(), 0);
  EXPECT_GT(older->session->kv.table.num_tokens(), 40);
  EXPECT_EQ(scheduler_->num_waiting(), 1);  // newer waits again, first
  EXPECT_EQ(queued_, 0);                    // but holds no queue place again
}

TEST_F(SchedulerTest, SpillsAnIdleSessionBeforePreempting) {
  Start({.max_batch_tokens = 64, .max_running = 4, .max_step_slowdown = 0}, 4);
  // An idle session holding 3 of the 4 blocks.
  Session* idle = store_->Create("", std::nullopt, absl::Now());
  for (int i = 0; i < 40; ++i) idle->tokens.push_back(i + 3);
  ASSERT_TRUE(idle->kv.table.Extend(40).ok());
  Enqueue(40, 1, true, 2);
  std::vector<std::unique_ptr<Sequence>> done = RunToEnd();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(EndOf(*done[0]), FinishReason::kLength);
  EXPECT_EQ(observer_.preemptions, 0);
  EXPECT_THAT(observer_.evictions, ::testing::ElementsAre("memory"));
  EXPECT_EQ(idle->kv.table.num_tokens(), 0);
  EXPECT_EQ(tiers_->TierOf(*idle), Tier::kTokens);
}

TEST_F(SchedulerTest, AContextLargerThanThePoolFailsWithItsReason) {
  Start({.max_batch_tokens = 64, .max_running = 4}, 2);
  Enqueue(40, 0);  // 3 blocks > 2
  std::vector<std::unique_ptr<Sequence>> done = RunToEnd(5);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_FALSE(done[0]->outcome->ok());
  EXPECT_TRUE(absl::IsResourceExhausted(done[0]->outcome->status()));
  EXPECT_EQ(ReasonOf(done[0]->outcome->status()), kReasonKvCacheFull);
  EXPECT_THAT(done[0]->outcome->status().message(),
              ::testing::HasSubstr("--kv_cache_bytes"));
}

TEST_F(SchedulerTest, RetireAfterAFailedForwardFailsTheBatchAndDropsItsKv) {
  Start({.max_batch_tokens = 16, .max_running = 4, .max_step_slowdown = 0}, 64);
  Sequence* a = Enqueue(10, 0);
  Sequence* b = Enqueue(30, 1);
  Sequence* c = Enqueue(30, 2);
  scheduler_->Admit();
  StepPlan first = scheduler_->Plan();  // a's 10 tokens and 6 of b's
  ASSERT_EQ(first.seqs.size(), 2u);
  Retire(first);
  const int64_t b_valid = b->session->kv.table.num_tokens();
  ASSERT_EQ(b_valid, 6);
  StepPlan plan = scheduler_->Plan();
  ASSERT_EQ(plan.seqs.size(), 2u);  // a decodes, b's next chunk; not c
  std::vector<std::unique_ptr<Sequence>> done = scheduler_->Retire(
      plan, StepResult{.forward = absl::InternalError("oneDNN failed"),
                       .seconds = 0});
  ASSERT_EQ(done.size(), 2u);
  for (const auto& seq : done) {
    ASSERT_FALSE(seq->outcome->ok());
    EXPECT_TRUE(absl::IsInternal(seq->outcome->status()));
    EXPECT_FALSE(seq->call->cancelled());  // a failure is not a cancel
  }
  EXPECT_EQ(a->session->kv.table.num_tokens(), 10);  // what a had
  EXPECT_EQ(b->session->kv.table.num_tokens(), b_valid);
  // The others go on.
  EXPECT_EQ(scheduler_->num_running(), 1);
  EXPECT_EQ(c->session->kv.table.num_tokens(), 0);
  std::vector<std::unique_ptr<Sequence>> rest = RunToEnd();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].get(), c);
}

TEST_F(SchedulerTest, CancelledSequencesLeaveWithoutComputing) {
  Start({.max_batch_tokens = 64, .max_running = 4}, 64);
  Sequence* a = Enqueue(10, 0);
  scheduler_->Admit();
  a->call->Cancel();
  StepPlan plan = scheduler_->Plan();
  EXPECT_TRUE(plan.batch.empty());
  std::vector<std::unique_ptr<Sequence>> done = scheduler_->Retire(plan, {});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(EndOf(*done[0]), FinishReason::kCancelled);
}

TEST_F(SchedulerTest, AnAppendFinishesOnceItsInputIsPrefilled) {
  Start({.max_batch_tokens = 16, .max_running = 4}, 64);
  Sequence* a = Enqueue(40, 0, /*generate=*/false);
  std::vector<std::unique_ptr<Sequence>> done = RunToEnd();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(EndOf(*done[0]), FinishReason::kLength);
  EXPECT_EQ(a->session->kv.table.num_tokens(), 40);  // all of it, no logits
  EXPECT_EQ(a->usage.generated_tokens, 0);
}

TEST_F(SchedulerTest, ASecondSequenceReusesTheFirstsFullBlocks) {
  Start({.max_batch_tokens = 64, .max_running = 4}, 64);
  Enqueue(40, 0, true, 1);
  std::vector<std::unique_ptr<Sequence>> first = RunToEnd();
  ASSERT_EQ(first.size(), 1u);
  // Its session goes; its full blocks stay cached.
  first[0]->session->busy = false;
  store_->Delete(first[0]->session->id);
  EXPECT_EQ(pool_->num_cached_blocks(), 2);
  Sequence* b = Enqueue(40, 0, true, 1);  // the same prompt
  scheduler_->Admit();
  EXPECT_EQ(b->usage.cached_prompt_tokens, 2 * kBlockTokens);
}

}  // namespace
}  // namespace kvserve

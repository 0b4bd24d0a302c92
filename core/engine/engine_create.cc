// Building the engine from its options (and taking it down): the block
// pool, model, session store and tiers, prefix cache, scheduler and the
// engine thread. The loop itself is engine.cc.
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/engine/engine.h"

namespace kvserve {
namespace {

// The template's tool-call format and reasoning; whether its generation
// prompt opens the reasoning block is seen by rendering one.
constrain::ReplyFormat ReplyFormatOf(const ChatTemplate& chat_template) {
  constrain::ReplyFormat f =
      constrain::DetectReplyFormat(chat_template.source());
  ChatTemplateInput probe;
  probe.messages.push_back({.role = "user", .content = "Hi"});
  absl::StatusOr<std::string> prompt = chat_template.Render(probe);
  f.reasoning_open =
      f.reasoning && prompt.ok() && constrain::ReasoningOpenAfter(*prompt);
  return f;
}

// Whether the template renders a system message (Gemma 2's raises an
// error for one).
bool TakesSystemMessages(const ChatTemplate& chat_template) {
  constexpr char kMark[] = "kvserve-probe-3f9a";
  ChatTemplateInput probe;
  probe.messages.push_back({.role = "system", .content = kMark});
  probe.messages.push_back({.role = "user", .content = "Hi"});
  absl::StatusOr<std::string> prompt = chat_template.Render(probe);
  return prompt.ok() && prompt->find(kMark) != std::string::npos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineOptions& options, const ModelWeights* weights,
    const Tokenizer* tokenizer, EngineObserver* observer) {
  const ModelConfig& c = weights->config;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  if (options.max_context < 0 || options.max_context > c.context_length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max_context=%d must be in [1, %d] (the model's context length)",
        options.max_context, c.context_length));
  }
  if (options.max_batch_tokens < 1 || options.max_running < 1 ||
      options.max_queued_requests < 0 || options.kv_block_tokens < 1 ||
      options.default_max_tokens < 1 || options.kv_cache_bytes < 0 ||
      options.max_prompt_bytes < 0 || options.max_sessions < 0 ||
      options.max_sessions_per_owner < 0 ||
      (options.default_ttl.has_value() &&
       *options.default_ttl <= absl::ZeroDuration()) ||
      !(options.max_step_slowdown == 0 || options.max_step_slowdown >= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "engine limits must be positive: max_batch_tokens=%d max_running=%d "
        "max_queued_requests=%d kv_block_tokens=%d kv_cache_bytes=%d "
        "max_prompt_bytes=%d max_sessions=%d max_sessions_per_owner=%d "
        "default_ttl=%s (and max_step_slowdown=%g must be 0 or at least 1)",
        options.max_batch_tokens, options.max_running,
        options.max_queued_requests, options.kv_block_tokens,
        options.kv_cache_bytes, options.max_prompt_bytes, options.max_sessions,
        options.max_sessions_per_owner,
        options.default_ttl.has_value()
            ? absl::FormatDuration(*options.default_ttl)
            : "none",
        options.max_step_slowdown));
  }
  std::unique_ptr<Engine> e(new Engine(options, weights, tokenizer, observer));
  const int64_t per_token = c.KvBytesPerToken(options.kv_dtype);
  BlockPoolOptions pool_options;
  pool_options.n_layers = c.n_layers;
  pool_options.n_kv_heads = c.n_kv_heads;
  pool_options.head_dim = c.head_dim;
  pool_options.block_tokens = options.kv_block_tokens;
  pool_options.dtype = options.kv_dtype;
  pool_options.capacity_bytes = options.kv_cache_bytes > 0
                                    ? options.kv_cache_bytes
                                    : 8 * e->max_context_ * per_token;
  auto pool = BlockPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  e->pool_ = *std::move(pool);
  auto model = Model::Create(weights, e->pool_.get(),
                             {.max_batch_tokens = options.max_batch_tokens,
                              .llama_order = options.llama_order});
  if (!model.ok()) return model.status();
  e->model_ = *std::move(model);
  e->sessions_ = std::make_unique<SessionStore>(e->pool_.get());
  e->prefix_cache_ = std::make_unique<PrefixCache>(e->pool_.get());
  auto tiers = SessionTiers::Create(
      SessionTiersOptions{
          .session_dir = options.session_dir,
          .snapshot_key =
              KvSnapshotKey{.model_fingerprint = weights->fingerprint,
                            .dtype = options.kv_dtype,
                            .n_layers = c.n_layers,
                            .n_kv_heads = c.n_kv_heads,
                            .head_dim = c.head_dim},
          .vocab_size = c.vocab_size,
          .max_context = e->max_context_,
          .session_dir_max_bytes = options.session_dir_max_bytes,
          .on_evicted =
              [observer](std::string_view reason) {
                if (observer != nullptr) observer->OnEviction(reason);
              },
          .on_log_recovered =
              [observer] {
                if (observer != nullptr) observer->OnSessionLogRecovered();
              }},
      e->sessions_.get(), e->prefix_cache_.get(),
      [e = e.get()](std::string_view message) { e->Warn(message); });
  if (!tiers.ok()) return tiers.status();
  e->tiers_ = *std::move(tiers);
  e->tiers_->LoadAll();
  e->chat_template_ = options.chat_template;
  if (e->chat_template_ == nullptr) {
    auto chatml = CreateChatTemplate(kChatMlTemplate, *tokenizer);
    if (!chatml.ok()) return chatml.status();
    e->chatml_ = *std::move(chatml);
    e->chat_template_ = e->chatml_.get();
  }
  e->reply_format_ = ReplyFormatOf(*e->chat_template_);
  e->template_takes_system_ = TakesSystemMessages(*e->chat_template_);
  e->matchers_ = std::make_unique<constrain::MatcherCache>(
      std::make_shared<const constrain::ConstraintVocabulary>(*tokenizer));
  e->scheduler_ = std::make_unique<Scheduler>(
      SchedulerOptions{.max_batch_tokens = options.max_batch_tokens,
                       .max_running = options.max_running,
                       .max_step_slowdown = options.max_step_slowdown},
      e->pool_.get(), e->prefix_cache_.get(), e->tiers_.get(), observer);
  e->ReportStats();
  e->thread_ = std::thread([e = e.get()] { e->Loop(); });
  return e;
}

Engine::Engine(const EngineOptions& options, const ModelWeights* weights,
               const Tokenizer* tokenizer, EngineObserver* observer)
    : options_(options),
      weights_(weights),
      tokenizer_(tokenizer),
      observer_(observer),
      max_context_(options.max_context > 0 ? options.max_context
                                           : weights->config.context_length),
      max_prompt_bytes_(options.max_prompt_bytes > 0
                            ? options.max_prompt_bytes
                            : kPromptBytesPerToken * max_context_),
      prep_(std::make_unique<PrepWorker>()) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int64_t Engine::kv_bytes_per_token() const { return pool_->bytes_per_token(); }
int64_t Engine::kv_capacity_bytes() const { return pool_->capacity_bytes(); }

}  // namespace kvserve

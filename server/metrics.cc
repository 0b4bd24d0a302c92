#include "server/metrics.h"

#include <cstdio>

namespace kvserve {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Latency buckets from 1 ms to 10 s.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
      0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
  return *b;
}

const Histogram::BucketBoundaries& BatchBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  return *b;
}

Histogram& LatencyHistogram(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, LatencyBuckets());
}

// Adds to `counter` how much the cumulative `total` grew since the last
// call (`last` holds it).
void AddIncrease(prometheus::Counter& counter, std::atomic<int64_t>& last,
                 int64_t total) {
  const int64_t previous = last.exchange(total);
  if (total > previous)
    counter.Increment(static_cast<double>(total - previous));
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      ttft_(LatencyHistogram(
          *registry_, "kvserve_time_to_first_token_seconds",
          "Time from a Generate's arrival to its first token being sampled.")),
      itl_(LatencyHistogram(*registry_, "kvserve_inter_token_latency_seconds",
                            "Time between consecutive tokens of a stream.")),
      decode_step_(LatencyHistogram(
          *registry_, "kvserve_decode_step_seconds",
          "Duration of one engine step (one batched forward pass).")),
      queue_wait_(LatencyHistogram(
          *registry_, "kvserve_queue_wait_seconds",
          "Time a request waited before the engine admitted it.")),
      batch_size_(BuildHistogram()
                      .Name("kvserve_batch_size")
                      .Help("Tokens processed per engine step.")
                      .Register(*registry_)
                      .Add({}, BatchBuckets())),
      request_duration_(
          BuildHistogram()
              .Name("kvserve_request_duration_seconds")
              .Help("RPC duration by method and gRPC status code.")
              .Register(*registry_)),
      prompt_tokens_(BuildCounter()
                         .Name("kvserve_prompt_tokens_total")
                         .Help("Prompt tokens of all turns (context the turn "
                               "started from).")
                         .Register(*registry_)
                         .Add({})),
      cached_prompt_tokens_(
          BuildCounter()
              .Name("kvserve_cached_prompt_tokens_total")
              .Help("Prompt tokens whose KV was reused, not recomputed.")
              .Register(*registry_)
              .Add({})),
      generated_tokens_(BuildCounter()
                            .Name("kvserve_generated_tokens_total")
                            .Help("Tokens generated.")
                            .Register(*registry_)
                            .Add({})),
      kv_used_bytes_(BuildGauge()
                         .Name("kvserve_kv_cache_used_bytes")
                         .Help("Bytes of KV cache blocks in use.")
                         .Register(*registry_)
                         .Add({})),
      kv_capacity_bytes_(BuildGauge()
                             .Name("kvserve_kv_cache_capacity_bytes")
                             .Help("Bytes of the KV cache block pool.")
                             .Register(*registry_)
                             .Add({})),
      kv_blocks_(
          BuildGauge()
              .Name("kvserve_kv_cache_blocks")
              .Help("KV cache blocks by state: used (held by a sequence), "
                    "cached (held by none, kept for prefix reuse, reclaimed "
                    "before any session is spilled), free (empty); used + "
                    "cached + free is the pool. shared: used by more than "
                    "one sequence (part of used).")
              .Register(*registry_)),
      kv_blocks_used_(kv_blocks_.Add({{"state", "used"}})),
      kv_blocks_free_(kv_blocks_.Add({{"state", "free"}})),
      kv_blocks_cached_(kv_blocks_.Add({{"state", "cached"}})),
      kv_blocks_shared_(kv_blocks_.Add({{"state", "shared"}})),
      prefix_cache_queries_(
          BuildCounter()
              .Name("kvserve_prefix_cache_queries_total")
              .Help("Prompt tokens looked up in the prefix cache (those past "
                    "what the sequence already held).")
              .Register(*registry_)
              .Add({})),
      prefix_cache_hits_(
          BuildCounter()
              .Name("kvserve_prefix_cache_hits_total")
              .Help("Prompt tokens found in the prefix cache: their KV "
                    "blocks were adopted, not recomputed.")
              .Register(*registry_)
              .Add({})),
      sessions_(
          BuildGauge()
              .Name("kvserve_sessions")
              .Help("Sessions by tier (ram: KV held; disk: KV in a snapshot "
                    "file; tokens: history only, re-prefilled on next use).")
              .Register(*registry_)),
      sessions_ram_(sessions_.Add({{"tier", "ram"}})),
      sessions_disk_(sessions_.Add({{"tier", "disk"}})),
      sessions_tokens_(sessions_.Add({{"tier", "tokens"}})),
      evictions_(BuildCounter()
                     .Name("kvserve_session_evictions_total")
                     .Help("Sessions or their KV removed, by reason (ttl, "
                           "memory, deleted).")
                     .Register(*registry_)),
      preemptions_(BuildCounter()
                       .Name("kvserve_preemptions_total")
                       .Help("Running sequences whose KV was freed for "
                             "room and recomputed later.")
                       .Register(*registry_)
                       .Add({})),
      log_recoveries_(
          BuildCounter()
              .Name("kvserve_session_log_recoveries_total")
              .Help("Damaged session logs read (a torn or corrupt record, "
                    "or header): what could be replayed was kept, the rest "
                    "dropped with a warning, and the log rewritten.")
              .Register(*registry_)
              .Add({})),
      requests_in_flight_(BuildGauge()
                              .Name("kvserve_requests_in_flight")
                              .Help("RPCs being served.")
                              .Register(*registry_)
                              .Add({})),
      rejected_(BuildCounter()
                    .Name("kvserve_requests_rejected_total")
                    .Help("Requests refused by admission control, by reason.")
                    .Register(*registry_)),
      weight_bytes_(BuildGauge()
                        .Name("kvserve_model_weight_bytes")
                        .Help("Bytes of the served model's weights.")
                        .Register(*registry_)
                        .Add({})),
      build_info_(BuildGauge()
                      .Name("kvserve_build_info")
                      .Help("Always 1; the labels say what runs: version, "
                            "git commit and the ISA level the kernels use.")
                      .Register(*registry_)),
      kv_bytes_per_token_(
          BuildGauge()
              .Name("kvserve_kv_cache_bytes_per_token")
              .Help("Bytes of K and V of one token over all layers, in the "
                    "KV cache's element type (the dtype label: f32, bf16, "
                    "q8_0 or q4_0).")
              .Register(*registry_)) {
  for (const char* reason : {"ttl", "memory", "deleted"}) {
    evictions_.Add({{"reason", reason}});
  }
  rejected_.Add({{"reason", "queue_full"}});
  rejected_.Add({{"reason", "kv_cache_full"}});
}

void Metrics::RecordRequest(std::string_view method, std::string_view code,
                            double seconds) {
  request_duration_
      .Add({{"method", std::string(method)}, {"code", std::string(code)}},
           LatencyBuckets())
      .Observe(seconds);
}

void Metrics::RecordRejected(std::string_view reason) {
  rejected_.Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::RequestStarted() {
  ++in_flight_;
  requests_in_flight_.Increment();
}

void Metrics::RequestFinished() {
  --in_flight_;
  requests_in_flight_.Decrement();
}
void Metrics::SetWeightBytes(int64_t bytes) { weight_bytes_.Set(bytes); }

void Metrics::SetKvCacheFormat(std::string_view dtype,
                               int64_t bytes_per_token) {
  kv_bytes_per_token_.Add({{"dtype", std::string(dtype)}})
      .Set(static_cast<double>(bytes_per_token));
}

void Metrics::SetBuildInfo(std::string_view version, std::string_view commit,
                           std::string_view isa) {
  build_info_
      .Add({{"version", std::string(version)},
            {"commit", std::string(commit)},
            {"isa", std::string(isa)}})
      .Set(1);
}

void Metrics::OnStep(int64_t batch_tokens, int64_t, double seconds) {
  decode_step_.Observe(seconds);
  batch_size_.Observe(batch_tokens);
}

void Metrics::OnQueueWait(double seconds) { queue_wait_.Observe(seconds); }
void Metrics::OnFirstToken(double seconds) { ttft_.Observe(seconds); }
void Metrics::OnInterToken(double seconds) { itl_.Observe(seconds); }

void Metrics::OnPrompt(int64_t prompt_tokens, int64_t cached_tokens) {
  prompt_tokens_.Increment(prompt_tokens);
  cached_prompt_tokens_.Increment(cached_tokens);
}

void Metrics::OnGenerated(int64_t tokens) {
  generated_tokens_.Increment(tokens);
}

void Metrics::OnEviction(std::string_view reason) {
  evictions_.Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::OnPreemption() { preemptions_.Increment(); }

void Metrics::OnSessionLogRecovered() { log_recoveries_.Increment(); }

void Metrics::OnStats(const EngineStats& s) {
  kv_used_bytes_.Set(s.kv_used_bytes);
  kv_capacity_bytes_.Set(s.kv_capacity_bytes);
  kv_blocks_used_.Set(s.kv_blocks_used);
  kv_blocks_free_.Set(s.kv_blocks_free);
  kv_blocks_cached_.Set(s.kv_blocks_cached);
  kv_blocks_shared_.Set(s.kv_blocks_shared);
  AddIncrease(prefix_cache_queries_, last_queried_tokens_,
              s.prefix_cache_queried_tokens);
  AddIncrease(prefix_cache_hits_, last_hit_tokens_, s.prefix_cache_hit_tokens);
  sessions_ram_.Set(s.sessions_ram);
  sessions_disk_.Set(s.sessions_disk);
  sessions_tokens_.Set(s.sessions_tokens);
}

void Metrics::OnWarning(std::string_view message) {
  std::fprintf(stderr, "kvserve: warning: %.*s\n",
               static_cast<int>(message.size()), message.data());
}

}  // namespace kvserve

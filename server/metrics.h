// Metrics: every kvserve_* Prometheus family, defined in this one file pair,
// in base units. The engine reports through EngineObserver; the RPC layer
// through RecordRequest. Label sets are small and bounded.
//
// Thread-safety: all methods are thread-safe (prometheus-cpp metrics are).
#ifndef KVSERVE_SERVER_METRICS_H_
#define KVSERVE_SERVER_METRICS_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "core/engine/engine_observer.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kvserve {

class Metrics : public EngineObserver {
 public:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // One finished RPC: method name (e.g. "Generate") and gRPC code name.
  void RecordRequest(std::string_view method, std::string_view code,
                     double seconds);
  void RecordRejected(std::string_view reason);
  void RequestStarted();
  void RequestFinished();
  int64_t in_flight() const { return in_flight_.load(); }
  void SetWeightBytes(int64_t bytes);
  // kvserve_kv_cache_bytes_per_token{dtype} = K and V of one token, all
  // layers. Call once, at start.
  void SetKvCacheFormat(std::string_view dtype, int64_t bytes_per_token);
  // kvserve_build_info{version,commit,isa} = 1. Call once, at start.
  void SetBuildInfo(std::string_view version, std::string_view commit,
                    std::string_view isa);

  // EngineObserver.
  void OnStep(int64_t batch_tokens, int64_t batch_sequences,
              double seconds) override;
  void OnQueueWait(double seconds) override;
  void OnFirstToken(double seconds_since_submit) override;
  void OnInterToken(double seconds) override;
  void OnPrompt(int64_t prompt_tokens, int64_t cached_tokens) override;
  void OnGenerated(int64_t tokens) override;
  void OnEviction(std::string_view reason) override;
  void OnPreemption() override;
  void OnSessionLogRecovered() override;
  void OnStats(const EngineStats& stats) override;
  // Printed to stderr.
  void OnWarning(std::string_view message) override;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& itl_;
  prometheus::Histogram& decode_step_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& batch_size_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& cached_prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Gauge& kv_used_bytes_;
  prometheus::Gauge& kv_capacity_bytes_;
  prometheus::Family<prometheus::Gauge>& kv_blocks_;
  prometheus::Gauge& kv_blocks_used_;
  prometheus::Gauge& kv_blocks_free_;
  prometheus::Gauge& kv_blocks_cached_;
  prometheus::Gauge& kv_blocks_shared_;
  prometheus::Counter& prefix_cache_queries_;
  prometheus::Counter& prefix_cache_hits_;
  prometheus::Family<prometheus::Gauge>& sessions_;
  prometheus::Gauge& sessions_ram_;
  prometheus::Gauge& sessions_disk_;
  prometheus::Gauge& sessions_tokens_;
  prometheus::Family<prometheus::Counter>& evictions_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& log_recoveries_;
  prometheus::Gauge& requests_in_flight_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Gauge& weight_bytes_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& kv_bytes_per_token_;
  std::atomic<int64_t> in_flight_{0};
  // The cumulative EngineStats counts of the last OnStats, whose increase
  // the prefix cache counters add.
  std::atomic<int64_t> last_queried_tokens_{0};
  std::atomic<int64_t> last_hit_tokens_{0};
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_METRICS_H_

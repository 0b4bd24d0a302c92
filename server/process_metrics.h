// ProcessMetrics: the process_* families that Prometheus client libraries
// export by convention (client_golang's process collector, the Python
// client's ProcessCollector), read from procfs at every scrape:
//
//   process_cpu_seconds_total      counter  user + system CPU time
//   process_resident_memory_bytes  gauge    resident set size
//   process_virtual_memory_bytes   gauge    virtual memory size
//   process_open_fds               gauge    open file descriptors
//   process_max_fds                gauge    soft RLIMIT_NOFILE
//   process_start_time_seconds     gauge    start time, seconds since epoch
//
// A family whose source cannot be read or parsed is left out of that scrape;
// Collect() never fails. Register it next to the kvserve registry:
//   exposer->RegisterCollectable(process_metrics);  // a shared_ptr kept alive
//
// Thread-safety: Collect() is const and keeps no state; safe from any thread.
#ifndef KVSERVE_SERVER_PROCESS_METRICS_H_
#define KVSERVE_SERVER_PROCESS_METRICS_H_

#include <optional>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvserve {

// What one read of procfs found; a field is empty when its source failed.
struct ProcessStats {
  std::optional<double> cpu_seconds;
  std::optional<double> resident_memory_bytes;
  std::optional<double> virtual_memory_bytes;
  std::optional<double> open_fds;
  std::optional<double> max_fds;
  std::optional<double> start_time_seconds;
};

class ProcessMetrics : public prometheus::Collectable {
 public:
  struct Options {
    // procfs mount point; tests point it at a fake tree.
    std::string proc_root = "/proc";
    // The process directory under proc_root: "self" or a pid.
    std::string pid = "self";
    // sysconf(_SC_CLK_TCK) and sysconf(_SC_PAGESIZE) when 0.
    long clock_ticks_per_second = 0;
    long page_size_bytes = 0;
  };

  ProcessMetrics() : ProcessMetrics(Options()) {}
  explicit ProcessMetrics(Options options);

  // Reads <proc_root>/<pid>/{stat,limits,fd/} and <proc_root>/stat (btime).
  ProcessStats Read() const;

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Options options_;
};

}  // namespace kvserve

#endif  // KVSERVE_SERVER_PROCESS_METRICS_H_

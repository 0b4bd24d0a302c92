#include "server/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/util/file.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace kvserve {
namespace {

// Fields of /proc/<pid>/stat after "pid (comm) ": index 0 is field 3 (state)
// in proc(5)'s numbering. comm may hold spaces and ')', so split after the
// last ')'.
std::optional<std::vector<absl::string_view>> StatFieldsAfterComm(
    absl::string_view stat) {
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  return std::vector<absl::string_view>(
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty()));
}

// Field `n` (1-based, proc(5) numbering) of /proc/<pid>/stat as a number.
std::optional<double> StatField(const std::vector<absl::string_view>& fields,
                                int n) {
  const size_t index = static_cast<size_t>(n - 3);
  if (n < 3 || index >= fields.size()) return std::nullopt;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[index]), &value)) {
    return std::nullopt;
  }
  return static_cast<double>(value);
}

// The soft "Max open files" limit of /proc/<pid>/limits. Linux bounds it by
// fs.nr_open, so it is never "unlimited"; anything unparsable is left out.
std::optional<double> MaxOpenFiles(absl::string_view limits) {
  for (absl::string_view line : absl::StrSplit(limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t soft = 0;
    if (words.empty() || !absl::SimpleAtoi(words[0], &soft)) {
      return std::nullopt;
    }
    return static_cast<double>(soft);
  }
  return std::nullopt;
}

// "btime N" of /proc/stat: boot time in seconds since the epoch.
std::optional<double> BootTimeSeconds(absl::string_view proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "btime ")) continue;
    uint64_t btime = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &btime)) {
      return std::nullopt;
    }
    return static_cast<double>(btime);
  }
  return std::nullopt;
}

std::optional<double> CountDirectoryEntries(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  // Like the Go and Python clients, the count includes the descriptor that
  // reads the directory.
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (name != "." && name != "..") ++count;
  }
  closedir(dir);
  return count;
}

void AddFamily(std::vector<prometheus::MetricFamily>& families,
               const std::optional<double>& value, const char* name,
               const char* help, prometheus::MetricType type) {
  if (!value.has_value()) return;
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = *value;
  } else {
    metric.gauge.value = *value;
  }
  family.metric.push_back(std::move(metric));
  families.push_back(std::move(family));
}

}  // namespace

ProcessMetrics::ProcessMetrics(Options options)
    : options_([&options] {
        if (options.clock_ticks_per_second <= 0) {
          options.clock_ticks_per_second = sysconf(_SC_CLK_TCK);
        }
        if (options.page_size_bytes <= 0) {
          options.page_size_bytes = sysconf(_SC_PAGESIZE);
        }
        return std::move(options);
      }()) {}

ProcessStats ProcessMetrics::Read() const {
  ProcessStats stats;
  const std::string dir = options_.proc_root + "/" + options_.pid;
  const double ticks = static_cast<double>(options_.clock_ticks_per_second);

  if (std::optional<std::string> stat = ReadFileIfPresent(dir + "/stat")) {
    if (auto fields = StatFieldsAfterComm(*stat)) {
      // proc(5): 14 utime, 15 stime, 22 starttime (clock ticks since boot),
      // 23 vsize (bytes), 24 rss (pages).
      const std::optional<double> utime = StatField(*fields, 14);
      const std::optional<double> stime = StatField(*fields, 15);
      if (utime && stime) stats.cpu_seconds = (*utime + *stime) / ticks;
      stats.virtual_memory_bytes = StatField(*fields, 23);
      if (auto rss = StatField(*fields, 24)) {
        stats.resident_memory_bytes =
            *rss * static_cast<double>(options_.page_size_bytes);
      }
      const std::optional<std::string> proc_stat =
          ReadFileIfPresent(options_.proc_root + "/stat");
      const std::optional<double> btime =
          proc_stat ? BootTimeSeconds(*proc_stat) : std::nullopt;
      if (auto start = StatField(*fields, 22); start && btime) {
        stats.start_time_seconds = *btime + *start / ticks;
      }
    }
  }
  if (std::optional<std::string> limits = ReadFileIfPresent(dir + "/limits")) {
    stats.max_fds = MaxOpenFiles(*limits);
  }
  stats.open_fds = CountDirectoryEntries(dir + "/fd");
  return stats;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  const ProcessStats s = Read();
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  AddFamily(families, s.cpu_seconds, "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            MetricType::Counter);
  AddFamily(families, s.resident_memory_bytes, "process_resident_memory_bytes",
            "Resident memory size in bytes.", MetricType::Gauge);
  AddFamily(families, s.virtual_memory_bytes, "process_virtual_memory_bytes",
            "Virtual memory size in bytes.", MetricType::Gauge);
  AddFamily(families, s.open_fds, "process_open_fds",
            "Number of open file descriptors.", MetricType::Gauge);
  AddFamily(families, s.max_fds, "process_max_fds",
            "Maximum number of open file descriptors.", MetricType::Gauge);
  AddFamily(families, s.start_time_seconds, "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            MetricType::Gauge);
  return families;
}

}  // namespace kvserve

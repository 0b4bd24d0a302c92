#include "server/process_metrics.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fake procfs tree in a fresh temporary directory, removed at the end.
class FakeProc {
 public:
  FakeProc() {
    std::string tmpl = (fs::temp_directory_path() / "procXXXXXX").string();
    root_ = mkdtemp(tmpl.data());
    fs::create_directories(root_ / "self" / "fd");
  }
  ~FakeProc() { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    std::ofstream(root_ / relative) << text;
  }
  void AddFds(int n) {
    for (int i = 0; i < n; ++i) {
      std::ofstream(root_ / "self" / "fd" / std::to_string(i)) << "";
    }
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

// A /proc/<pid>/stat line whose comm holds spaces and parentheses; fields 14,
// 15, 22, 23 and 24 carry the given values, every other field is 0.
std::string StatLine(int utime, int stime, long starttime, long vsize,
                     long rss) {
  std::string line = "4242 (kv serve) (x)) S";
  for (int field = 4; field <= 52; ++field) {
    long value = 0;
    if (field == 14) value = utime;
    if (field == 15) value = stime;
    if (field == 22) value = starttime;
    if (field == 23) value = vsize;
    if (field == 24) value = rss;
    absl::StrAppend(&line, " ", value);
  }
  line.push_back('\n');
  return line;
}

constexpr char kLimits[] =
    "Limit                     Soft Limit           Hard Limit           "
    "Units\n"
    "Max cpu time              unlimited            unlimited            "
    "seconds\n"
    "Max open files            1024                 524288               "
    "files\n"
    "Max address space         unlimited            unlimited            "
    "bytes\n";

ProcessMetrics::Options FakeOptions(const FakeProc& proc) {
  ProcessMetrics::Options options;
  options.proc_root = proc.root();
  options.clock_ticks_per_second = 100;
  options.page_size_bytes = 4096;
  return options;
}

std::map<std::string, prometheus::MetricFamily> ByName(
    const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, prometheus::MetricFamily> by_name;
  for (const auto& f : families) by_name[f.name] = f;
  return by_name;
}

TEST(ProcessMetricsTest, ReadsEveryFamilyFromFakeProc) {
  FakeProc proc;
  proc.Write("self/stat", StatLine(/*utime=*/250, /*stime=*/125,
                                   /*starttime=*/12345, /*vsize=*/987654321,
                                   /*rss=*/1000));
  proc.Write("self/limits", kLimits);
  proc.Write("stat", "cpu  1 2 3 4\nctxt 99\nbtime 1700000000\nprocesses 7\n");
  proc.AddFds(7);

  const ProcessStats s = ProcessMetrics(FakeOptions(proc)).Read();
  ASSERT_TRUE(s.cpu_seconds.has_value());
  EXPECT_DOUBLE_EQ(*s.cpu_seconds, 3.75);  // (250 + 125) / 100
  ASSERT_TRUE(s.resident_memory_bytes.has_value());
  EXPECT_DOUBLE_EQ(*s.resident_memory_bytes, 1000.0 * 4096);
  ASSERT_TRUE(s.virtual_memory_bytes.has_value());
  EXPECT_DOUBLE_EQ(*s.virtual_memory_bytes, 987654321.0);
  ASSERT_TRUE(s.open_fds.has_value());
  EXPECT_DOUBLE_EQ(*s.open_fds, 7);
  ASSERT_TRUE(s.max_fds.has_value());
  EXPECT_DOUBLE_EQ(*s.max_fds, 1024);
  ASSERT_TRUE(s.start_time_seconds.has_value());
  EXPECT_DOUBLE_EQ(*s.start_time_seconds, 1700000000 + 123.45);
}

TEST(ProcessMetricsTest, CollectNamesTypesAndValuesAsClientLibraries) {
  FakeProc proc;
  proc.Write("self/stat", StatLine(1, 2, 300, 4096, 3));
  proc.Write("self/limits", kLimits);
  proc.Write("stat", "btime 1000\n");
  proc.AddFds(2);

  auto by_name = ByName(ProcessMetrics(FakeOptions(proc)).Collect());
  using prometheus::MetricType;
  const std::map<std::string, std::pair<MetricType, double>> want = {
      {"process_cpu_seconds_total", {MetricType::Counter, 0.03}},
      {"process_resident_memory_bytes", {MetricType::Gauge, 3 * 4096}},
      {"process_virtual_memory_bytes", {MetricType::Gauge, 4096}},
      {"process_open_fds", {MetricType::Gauge, 2}},
      {"process_max_fds", {MetricType::Gauge, 1024}},
      {"process_start_time_seconds", {MetricType::Gauge, 1003}},
  };
  ASSERT_EQ(by_name.size(), want.size());
  for (const auto& [name, type_value] : want) {
    SCOPED_TRACE(name);
    ASSERT_EQ(by_name.count(name), 1u);
    const prometheus::MetricFamily& f = by_name[name];
    EXPECT_EQ(f.type, type_value.first);
    EXPECT_FALSE(f.help.empty());
    ASSERT_EQ(f.metric.size(), 1u);
    EXPECT_TRUE(f.metric[0].label.empty());
    const double value = f.type == MetricType::Counter
                             ? f.metric[0].counter.value
                             : f.metric[0].gauge.value;
    EXPECT_DOUBLE_EQ(value, type_value.second);
  }
}

TEST(ProcessMetricsTest, LeavesOutWhatCannotBeRead) {
  FakeProc proc;
  // No stat, no limits, no /proc/stat: only the fd count is readable.
  proc.AddFds(3);
  auto by_name = ByName(ProcessMetrics(FakeOptions(proc)).Collect());
  ASSERT_EQ(by_name.size(), 1u);
  EXPECT_EQ(by_name.count("process_open_fds"), 1u);

  // A truncated stat line yields nothing from stat, and no crash.
  proc.Write("self/stat", "4242 (kvserve) S 1 2\n");
  proc.Write("stat", "btime 1000\n");
  const ProcessStats s = ProcessMetrics(FakeOptions(proc)).Read();
  EXPECT_FALSE(s.cpu_seconds.has_value());
  EXPECT_FALSE(s.resident_memory_bytes.has_value());
  EXPECT_FALSE(s.start_time_seconds.has_value());
}

// The real /proc/self of this test process.
TEST(ProcessMetricsTest, ReadsThisProcess) {
  ProcessMetrics metrics;
  const ProcessStats before = metrics.Read();
  ASSERT_TRUE(before.open_fds.has_value());
  ASSERT_TRUE(before.cpu_seconds.has_value());

  // Open files: the count rises by exactly as many as we open.
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  const ProcessStats opened = metrics.Read();
  for (int fd : fds) close(fd);
  ASSERT_TRUE(opened.open_fds.has_value());
  EXPECT_EQ(*opened.open_fds, *before.open_fds + 5);

  // Max fds is this process's soft RLIMIT_NOFILE.
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_TRUE(before.max_fds.has_value());
  EXPECT_EQ(*before.max_fds, static_cast<double>(limit.rlim_cur));

  // Resident memory grows when we touch 64 MiB.
  ASSERT_TRUE(before.resident_memory_bytes.has_value());
  EXPECT_GT(*before.resident_memory_bytes, 0);
  constexpr size_t kTouched = 64 << 20;
  std::vector<char> big(kTouched, 1);
  const ProcessStats touched = metrics.Read();
  ASSERT_TRUE(touched.resident_memory_bytes.has_value());
  EXPECT_GE(*touched.resident_memory_bytes,
            *before.resident_memory_bytes + kTouched / 2);
  ASSERT_TRUE(touched.virtual_memory_bytes.has_value());
  EXPECT_GE(*touched.virtual_memory_bytes, *touched.resident_memory_bytes);

  // CPU seconds grow with this process's own CPU time (clock ticks: 10 ms).
  timespec start{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  volatile double sink = 0;
  for (;;) {
    for (int i = 0; i < 1000000; ++i) sink = sink + big[i % kTouched] * 1e-9;
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    if (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) * 1e-9 >
        0.2) {
      break;
    }
  }
  const ProcessStats busy = metrics.Read();
  ASSERT_TRUE(busy.cpu_seconds.has_value());
  EXPECT_GE(*busy.cpu_seconds, *before.cpu_seconds + 0.15);

  // Started before now, and not before the machine booted (not in the
  // future, not in the 1970s).
  ASSERT_TRUE(busy.start_time_seconds.has_value());
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(*busy.start_time_seconds, now + 1);
  timespec since_boot{};
  clock_gettime(CLOCK_BOOTTIME, &since_boot);
  EXPECT_GE(*busy.start_time_seconds, now - since_boot.tv_sec - 2);
}

TEST(ProcessMetricsTest, SerializesAsPrometheusText) {
  const std::string text =
      prometheus::TextSerializer().Serialize(ProcessMetrics().Collect());
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_open_fds gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_max_fds gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_virtual_memory_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_start_time_seconds gauge\n"));
}

}  // namespace
}  // namespace kvserve

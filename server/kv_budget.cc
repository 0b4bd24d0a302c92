#include "server/kv_budget.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/util/file.h"

namespace kvserve {
namespace {

constexpr int64_t kFullContexts = 8;
// cgroup v1 writes "no limit" as a huge page-rounded number (2^63 - 4096).
constexpr int64_t kNoLimitAbove = int64_t{1} << 62;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::optional<int64_t> ReadInt(const std::string& path) {
  std::optional<std::string> text = ReadFileIfPresent(path);
  int64_t value = 0;
  if (!text.has_value() ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) {
    return std::nullopt;
  }
  return value;
}

// "MemAvailable:   24335648 kB" of /proc/meminfo, in bytes.
std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, "kB")) return std::nullopt;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return std::nullopt;
    }
    return kib * 1024;
  }
  return std::nullopt;
}

// The cgroup path of `controller` in /proc/self/cgroup ("0::/a/b" for v2,
// "4:memory:/a/b" for v1); empty when absent.
std::string CgroupPath(absl::string_view proc_cgroup, bool v2) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ':');
    if (f.size() != 3) continue;
    const std::vector<absl::string_view> controllers =
        absl::StrSplit(f[1], ',');
    const bool memory = std::find(controllers.begin(), controllers.end(),
                                  "memory") != controllers.end();
    if (v2 ? (f[0] == "0" && f[1].empty()) : memory) {
      return std::string(f[2]);
    }
  }
  return "";
}

// The cgroup directory under `mount`: the process's own when visible, else
// the mount's root (a container sees its own cgroup there).
std::string CgroupDir(const std::string& mount, const std::string& path) {
  if (!path.empty() && path != "/" && IsDirectory(mount + path)) {
    return mount + path;
  }
  return mount;
}

}  // namespace

std::optional<int64_t> MachineMemory::FreeBytes() const {
  std::optional<int64_t> free = available_bytes;
  if (cgroup_limit_bytes.has_value()) {
    const int64_t left = std::max<int64_t>(
        0, *cgroup_limit_bytes - std::max<int64_t>(0, cgroup_usage_bytes));
    free = free.has_value() ? std::min(*free, left) : left;
  }
  return free;
}

std::string MachineMemory::FreeSource() const {
  const bool cgroup_less =
      cgroup_limit_bytes.has_value() &&
      (!available_bytes.has_value() ||
       *cgroup_limit_bytes - cgroup_usage_bytes < *available_bytes);
  return cgroup_less ? absl::StrFormat("the cgroup limit in %s minus its usage",
                                       cgroup_limit_file)
                     : "MemAvailable";
}

MachineMemory ReadMachineMemory(const std::string& root) {
  MachineMemory memory;
  if (std::optional<std::string> meminfo =
          ReadFileIfPresent(root + "/proc/meminfo")) {
    memory.available_bytes = ParseMemAvailable(*meminfo);
  }
  const std::string proc_cgroup =
      ReadFileIfPresent(root + "/proc/self/cgroup").value_or("");
  const std::string v2 =
      CgroupDir(root + "/sys/fs/cgroup", CgroupPath(proc_cgroup, true));
  const std::string v1 =
      CgroupDir(root + "/sys/fs/cgroup/memory", CgroupPath(proc_cgroup, false));
  const std::pair<std::string, std::string> files[] = {
      {v2 + "/memory.max", v2 + "/memory.current"},
      {v1 + "/memory.limit_in_bytes", v1 + "/memory.usage_in_bytes"}};
  for (const auto& [limit_file, usage_file] : files) {
    std::optional<std::string> text = ReadFileIfPresent(limit_file);
    if (!text.has_value()) continue;
    // The first hierarchy with a limit file decides; "max": no limit.
    int64_t limit = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &limit) &&
        limit > 0 && limit < kNoLimitAbove) {
      memory.cgroup_limit_bytes = limit;
      memory.cgroup_usage_bytes = ReadInt(usage_file).value_or(0);
      memory.cgroup_limit_file = limit_file.substr(root.size());
    }
    break;
  }
  return memory;
}

KvCacheBudget DefaultKvCacheBudget(const KvCacheShape& shape,
                                   const MachineMemory& memory) {
  const int64_t per_token = shape.bytes_per_token;
  const int64_t contexts = kFullContexts * shape.max_context * per_token;
  const int64_t floor = shape.max_running * shape.block_tokens * per_token;
  const std::string contexts_text =
      absl::StrFormat("%d full contexts of %d tokens (%s)", kFullContexts,
                      shape.max_context, HumanBytes(contexts));
  const std::optional<int64_t> free = memory.FreeBytes();
  const std::string half_text =
      free.has_value() ? absl::StrFormat("half of the %s free (%s)",
                                         HumanBytes(*free), memory.FreeSource())
                       : "free memory unknown";

  KvCacheBudget budget{contexts, ""};
  if (free.has_value() && *free / 2 < contexts) {
    budget = {*free / 2,
              absl::StrFormat("%s, less than %s", half_text, contexts_text)};
  } else {
    budget.explanation =
        absl::StrFormat("%s, %s %s", contexts_text,
                        free.has_value() ? "within" : "with", half_text);
  }
  if (budget.bytes < floor) {
    budget = {floor, absl::StrFormat("one block of %d tokens for each of the "
                                     "--max_running=%d sequences; more than %s",
                                     shape.block_tokens, shape.max_running,
                                     budget.explanation)};
  }
  budget.explanation = absl::StrFormat(
      "KV cache budget %s (%d bytes, %d tokens at %d bytes per token): %s; "
      "--kv_cache_bytes sets it",
      HumanBytes(budget.bytes), budget.bytes, budget.bytes / per_token,
      per_token, budget.explanation);
  return budget;
}

KvCacheBudget ExplicitKvCacheBudget(int64_t bytes, const KvCacheShape& shape) {
  return {bytes, absl::StrFormat(
                     "KV cache budget %s (%d bytes, %d tokens at %d bytes "
                     "per token): set by --kv_cache_bytes",
                     HumanBytes(bytes), bytes, bytes / shape.bytes_per_token,
                     shape.bytes_per_token)};
}

std::vector<std::string> KvCacheBudgetWarnings(int64_t bytes,
                                               const KvCacheShape& shape,
                                               const MachineMemory& memory) {
  std::vector<std::string> warnings;
  // The pool holds whole blocks only.
  const int64_t block_bytes = shape.block_tokens * shape.bytes_per_token;
  const int64_t tokens = bytes / block_bytes * shape.block_tokens;
  if (tokens < shape.max_context) {
    warnings.push_back(absl::StrFormat(
        "the KV cache holds %d tokens, less than one full context of %d "
        "(--max_context): longer sessions fail with RESOURCE_EXHAUSTED; raise "
        "--kv_cache_bytes, lower --max_context or use a smaller --kv_dtype",
        tokens, shape.max_context));
  }
  const std::optional<int64_t> free = memory.FreeBytes();
  if (free.has_value() && bytes > *free) {
    warnings.push_back(absl::StrFormat(
        "the KV cache budget %s is more than the %s free (%s): the process "
        "may be killed when the cache fills up",
        HumanBytes(bytes), HumanBytes(*free), memory.FreeSource()));
  }
  return warnings;
}

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrFormat("%d bytes", bytes);
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace kvserve

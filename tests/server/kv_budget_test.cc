#include "server/kv_budget.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kGiB = int64_t{1} << 30;

// Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128, 128k context, f32 KV:
// 2 * 32 * 8 * 128 * 4 = 262144 bytes per token.
KvCacheShape Llama8B() {
  return {.bytes_per_token = 262144,
          .max_context = 131072,
          .block_tokens = 128,
          .max_running = 64};
}

// The built-in model: 4 layers, 2 KV heads, head_dim 32, f32.
KvCacheShape Tiny() {
  return {.bytes_per_token = 2048,
          .max_context = 2048,
          .block_tokens = 128,
          .max_running = 64};
}

MachineMemory Available(int64_t bytes) {
  MachineMemory m;
  m.available_bytes = bytes;
  return m;
}

TEST(DefaultKvCacheBudgetTest, EightFullContextsWhenMemoryAllows) {
  const KvCacheBudget b = DefaultKvCacheBudget(Tiny(), Available(16 * kGiB));
  EXPECT_EQ(b.bytes, 8 * 2048 * 2048);
  EXPECT_THAT(b.explanation, HasSubstr("8 full contexts of 2048 tokens"));
  EXPECT_THAT(b.explanation, HasSubstr("--kv_cache_bytes"));
}

TEST(DefaultKvCacheBudgetTest, HalfOfAvailableMemoryForALargeModel) {
  // 8 contexts would be 256 GiB (274877906944 bytes): the start-up failure
  // this rule fixes.
  const KvCacheBudget b = DefaultKvCacheBudget(Llama8B(), Available(24 * kGiB));
  EXPECT_EQ(b.bytes, 12 * kGiB);
  EXPECT_THAT(b.explanation, HasSubstr("half of the 24.0 GiB free"));
  EXPECT_THAT(b.explanation, HasSubstr("MemAvailable"));
  EXPECT_THAT(b.explanation, HasSubstr("256.0 GiB"));
  EXPECT_THAT(b.explanation, HasSubstr("49152 tokens"));
}

TEST(DefaultKvCacheBudgetTest, CgroupLimitBelowAvailableMemoryWins) {
  MachineMemory m = Available(24 * kGiB);
  m.cgroup_limit_bytes = 10 * kGiB;
  m.cgroup_usage_bytes = 2 * kGiB;
  m.cgroup_limit_file = "/sys/fs/cgroup/memory.max";
  const KvCacheBudget b = DefaultKvCacheBudget(Llama8B(), m);
  EXPECT_EQ(b.bytes, 4 * kGiB);  // (10 - 2) / 2
  EXPECT_THAT(b.explanation, HasSubstr("/sys/fs/cgroup/memory.max"));

  // A limit above what the machine has changes nothing.
  m.cgroup_limit_bytes = 100 * kGiB;
  EXPECT_EQ(DefaultKvCacheBudget(Llama8B(), m).bytes, 12 * kGiB);
}

TEST(DefaultKvCacheBudgetTest, NeverBelowOneBlockPerRunningSequence) {
  const KvCacheShape shape = Llama8B();
  const int64_t floor = int64_t{64} * 128 * 262144;  // 2 GiB
  const KvCacheBudget b = DefaultKvCacheBudget(shape, Available(kGiB));
  EXPECT_EQ(b.bytes, floor);
  EXPECT_THAT(b.explanation, HasSubstr("--max_running=64"));

  // Short contexts: 8 of them hold fewer blocks than max_running needs.
  KvCacheShape short_context = Tiny();
  short_context.max_context = 256;
  EXPECT_EQ(DefaultKvCacheBudget(short_context, Available(16 * kGiB)).bytes,
            64 * 128 * 2048);
}

TEST(DefaultKvCacheBudgetTest, UnknownMemoryKeepsEightContexts) {
  const KvCacheBudget b = DefaultKvCacheBudget(Llama8B(), MachineMemory());
  EXPECT_EQ(b.bytes, int64_t{274877906944});
  EXPECT_THAT(b.explanation, HasSubstr("unknown"));
}

TEST(KvCacheBudgetWarningsTest, BelowOneContextAndAboveFreeMemory) {
  const MachineMemory m = Available(16 * kGiB);
  EXPECT_THAT(KvCacheBudgetWarnings(8 * 2048 * 2048, Tiny(), m), IsEmpty());
  KvCacheShape small_blocks = Tiny();
  small_blocks.block_tokens = 16;  // 32768 bytes per block
  // 5.5 blocks: the pool keeps 5 whole ones, 80 tokens.
  std::vector<std::string> w =
      KvCacheBudgetWarnings(5 * 32768 + 16384, small_blocks, m);
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_THAT(w[0], HasSubstr("holds 80 tokens"));
  EXPECT_THAT(w[0], HasSubstr("less than one full context of 2048"));
  EXPECT_THAT(w[0], HasSubstr("--kv_cache_bytes"));
  w = KvCacheBudgetWarnings(32 * kGiB, Tiny(), m);
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_THAT(w[0], HasSubstr("more than the 16.0 GiB free"));
}

TEST(ExplicitKvCacheBudgetTest, KeepsTheGivenBytes) {
  const KvCacheBudget b = ExplicitKvCacheBudget(163840, Tiny());
  EXPECT_EQ(b.bytes, 163840);
  EXPECT_THAT(b.explanation, HasSubstr("80 tokens"));
  EXPECT_THAT(b.explanation, HasSubstr("--kv_cache_bytes"));
}

TEST(HumanBytesTest, PicksTheUnit) {
  EXPECT_EQ(HumanBytes(100), "100 bytes");
  EXPECT_EQ(HumanBytes(4096), "4.0 KiB");
  EXPECT_EQ(HumanBytes(int64_t{512} << 20), "512.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{274877906944}), "256.0 GiB");
}

// A fake root with /proc and /sys/fs/cgroup files, removed at the end.
class FakeRoot {
 public:
  FakeRoot() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/kv_budget_test_",
                         getpid(), "_", ++counter_);
    fs::remove_all(root_);
  }
  ~FakeRoot() { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  const std::string& root() const { return root_; }

 private:
  static inline int counter_ = 0;
  std::string root_;
};

constexpr char kMeminfo[] =
    "MemTotal:       25276510 kB\n"
    "MemFree:        24239036 kB\n"
    "MemAvailable:   24335648 kB\n";

TEST(ReadMachineMemoryTest, MemAvailableWithoutCgroupLimit) {
  FakeRoot fake;
  fake.Write("/proc/meminfo", kMeminfo);
  fake.Write("/proc/self/cgroup", "0::/\n");
  fake.Write("/sys/fs/cgroup/memory.max", "max\n");
  const MachineMemory m = ReadMachineMemory(fake.root());
  ASSERT_TRUE(m.available_bytes.has_value());
  EXPECT_EQ(*m.available_bytes, int64_t{24335648} * 1024);
  EXPECT_FALSE(m.cgroup_limit_bytes.has_value());
  EXPECT_EQ(m.FreeBytes(), m.available_bytes);
}

TEST(ReadMachineMemoryTest, CgroupV2LimitOfTheProcessCgroup) {
  FakeRoot fake;
  fake.Write("/proc/meminfo", kMeminfo);
  fake.Write("/proc/self/cgroup", "0::/kubepods/pod1\n");
  fake.Write("/sys/fs/cgroup/memory.max", "max\n");
  fake.Write("/sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n");
  fake.Write("/sys/fs/cgroup/kubepods/pod1/memory.current", "1073741824\n");
  const MachineMemory m = ReadMachineMemory(fake.root());
  EXPECT_EQ(m.cgroup_limit_bytes, int64_t{4294967296});
  EXPECT_EQ(m.cgroup_usage_bytes, int64_t{1073741824});
  EXPECT_EQ(m.cgroup_limit_file, "/sys/fs/cgroup/kubepods/pod1/memory.max");
  EXPECT_EQ(m.FreeBytes(), int64_t{3221225472});
  EXPECT_THAT(m.FreeSource(), HasSubstr("cgroup"));
}

TEST(ReadMachineMemoryTest, CgroupV1LimitAtTheRootOfAContainer) {
  FakeRoot fake;
  fake.Write("/proc/meminfo", kMeminfo);
  // The process's path is not visible inside the container's mount.
  fake.Write("/proc/self/cgroup", "4:memory:/docker/abc\n0::/\n");
  fake.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
  fake.Write("/sys/fs/cgroup/memory/memory.usage_in_bytes", "0\n");
  EXPECT_EQ(ReadMachineMemory(fake.root()).cgroup_limit_bytes,
            int64_t{2147483648});

  // cgroup v1's "no limit".
  fake.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "9223372036854771712\n");
  EXPECT_FALSE(ReadMachineMemory(fake.root()).cgroup_limit_bytes.has_value());
}

TEST(ReadMachineMemoryTest, NothingReadableIsUnknown) {
  FakeRoot fake;
  const MachineMemory m = ReadMachineMemory(fake.root());
  EXPECT_FALSE(m.FreeBytes().has_value());
}

}  // namespace
}  // namespace kvserve

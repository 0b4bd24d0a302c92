// Metadata memory is bounded whatever a GGUF file claims: an array the
// loader does not read is never decoded (the parsed file holds no copy of
// it, measured with malloc's own count of bytes in use), and what is
// decoded or held is capped with an error naming the key, its size and the
// cap.
//
// The files are sparse (ftruncate), so a 20 M-element array costs no disk
// and reads as zeros.
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/gguf.h"
#include "core/model/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Bytes that `f` left allocated on the heap (malloc's in-use bytes, those
// of chunks it mapped included): what a parsed file holds.
template <typename F>
int64_t HeldAfter(F f) {
  auto in_use = [] {
    const struct mallinfo2 m = mallinfo2();
    return static_cast<int64_t>(m.uordblks + m.hblkhd);
  };
  const int64_t before = in_use();
  f();
  return in_use() - before;
}

// A /proc/self/status field in bytes (-1 if missing).
int64_t StatusBytes(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::stoll(line.substr(field.size())) * 1024;
    }
  }
  return -1;
}

// How far the peak resident set rose above the resident set while `f`
// ran; -1 when the peak cannot be reset (/proc/self/clear_refs).
template <typename F>
int64_t PeakGrowth(F f) {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // resets VmHWM to VmRSS
  clear.close();
  if (!clear) return -1;
  const int64_t before = StatusBytes("VmRSS:");
  f();
  return StatusBytes("VmHWM:") - before;
}

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string& out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out.append(s);
}

// A GGUF v3 file with no tensors whose metadata is `entries` (each already
// encoded as key, type, value) followed by `tail_zeros` zero bytes, left
// sparse: the last entry's value may extend into them.
class SparseGguf {
 public:
  SparseGguf(uint64_t n_kv, const std::string& entries, uint64_t tail_zeros) {
    path_ = ::testing::TempDir() + "kvserve_gguf_metadata_" +
            std::to_string(::getpid()) + "_" + std::to_string(counter_++) +
            ".gguf";
    std::string head = "GGUF";
    Put<uint32_t>(head, 3);
    Put<uint64_t>(head, 0);  // tensors
    Put<uint64_t>(head, n_kv);
    head += entries;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, head.data(), head.size()),
              static_cast<ssize_t>(head.size()));
    EXPECT_EQ(::ftruncate(fd, head.size() + tail_zeros), 0);
    ::close(fd);
  }
  ~SparseGguf() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// key, array type, element type, count: the elements follow.
std::string ArrayEntry(std::string_view key, GgufType elem, uint64_t count) {
  std::string out;
  PutString(out, key);
  Put<uint32_t>(out, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(out, static_cast<uint32_t>(elem));
  Put<uint64_t>(out, count);
  return out;
}

std::string Uint32Entry(std::string_view key, uint32_t v) {
  std::string out;
  PutString(out, key);
  Put<uint32_t>(out, static_cast<uint32_t>(GgufType::kUint32));
  Put<uint32_t>(out, v);
  return out;
}

// The file: 20 M uint8 elements used to cost ~1 GB at load.
TEST(GgufMetadataMemoryTest, AnUnreadArrayIsNeverDecoded) {
  constexpr uint64_t kCount = 20'000'000;
  SparseGguf file(2,
                  Uint32Entry("general.alignment", 32) +
                      ArrayEntry("junk.bytes", GgufType::kUint8, kCount),
                  kCount);
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped =
      MappedFile::Open(file.path());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  absl::StatusOr<GgufFile> g = absl::InternalError("not parsed");
  const int64_t held = HeldAfter([&] { g = GgufFile::Parse(*mapped); });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(held, 64 << 10) << "heap bytes the parsed file holds";

  const GgufValue* v = g->Find("junk.bytes");
  ASSERT_NE(v, nullptr);
  ASSERT_TRUE(v->is_array());
  EXPECT_EQ(v->array_type, GgufType::kUint8);
  EXPECT_EQ(v->array_size(), kCount);
  // The parsed value is a view of the mapping, not a copy.
  const auto* ref = std::get_if<GgufArrayRef>(&v->value);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->encoded.size(), kCount);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(ref->encoded.data()),
            (*mapped)->data() + ref->file_offset);

  // Reading it whole is refused, naming the key, its size and the cap.
  const absl::StatusOr<std::vector<int64_t>> ints =
      g->GetIntArray("junk.bytes");
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ints.status().message(),
              AllOf(HasSubstr("'junk.bytes'"), HasSubstr("20000000"),
                    HasSubstr(absl::StrCat(kGgufMaxArrayElements))));
  EXPECT_THAT(v->Elements().status().message(), HasSubstr("cap"));
}

// Five million empty strings: an oversized vocabulary is refused by the
// getter the loader uses, and parsing it held nothing.
TEST(GgufMetadataMemoryTest, AnOversizedStringArrayIsRefusedByItsGetter) {
  constexpr uint64_t kCount = 5'000'000;
  SparseGguf file(
      1, ArrayEntry("tokenizer.ggml.tokens", GgufType::kString, kCount),
      8 * kCount);
  absl::StatusOr<GgufFile> g = absl::InternalError("not parsed");
  const int64_t held = HeldAfter([&] { g = GgufFile::Open(file.path()); });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(held, 64 << 10);
  const absl::StatusOr<std::vector<std::string>> tokens =
      g->GetStringArray("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokens.status().message(),
              AllOf(HasSubstr("'tokenizer.ggml.tokens'"), HasSubstr("5000000"),
                    HasSubstr(absl::StrCat(kGgufMaxArrayElements))));
}

TEST(GgufMetadataMemoryTest, StringValuesHeldAreCapped) {
  const uint64_t kLen = kGgufMaxMetadataBytes + 1;
  std::string entry;
  PutString(entry, "tokenizer.chat_template");
  Put<uint32_t>(entry, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(entry, kLen);
  SparseGguf file(1, entry, kLen);
  absl::StatusOr<GgufFile> g = absl::InternalError("not parsed");
  const int64_t peak = PeakGrowth([&] { g = GgufFile::Open(file.path()); });
  if (peak >= 0) {
    EXPECT_LT(peak, 16 << 20);  // refused before any copy
  }
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(),
              AllOf(HasSubstr("'tokenizer.chat_template'"),
                    HasSubstr(absl::StrCat(kLen)),
                    HasSubstr(absl::StrCat(kGgufMaxMetadataBytes))));
}

TEST(GgufMetadataMemoryTest, TheKeyCountIsCapped) {
  const uint64_t kKeys = kGgufMaxMetadataKeys + 1;
  SparseGguf file(kKeys, "", 13 * kKeys);
  absl::StatusOr<GgufFile> g = GgufFile::Open(file.path());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(),
              AllOf(HasSubstr(absl::StrCat(kKeys)),
                    HasSubstr(absl::StrCat(kGgufMaxMetadataKeys))));
}

// Tools copy metadata from a parsed file (kvmodel quantize): a parsed
// array is written out as it was encoded, nested arrays included.
TEST(GgufMetadataMemoryTest, AParsedArrayCopiesThroughTheWriter) {
  GgufWriter w;
  w.AddStringArray("strs", {"a", "", "ccc"});
  w.AddFloat32Array("floats", {0.5f, -2.0f});
  GgufValue inner;
  inner.type = GgufType::kArray;
  inner.array_type = GgufType::kInt32;
  inner.value = std::vector<GgufValue>(2);
  for (int i = 0; i < 2; ++i) {
    std::get<std::vector<GgufValue>>(inner.value)[i].type = GgufType::kInt32;
    std::get<std::vector<GgufValue>>(inner.value)[i].value = int64_t{i - 7};
  }
  GgufValue nested;
  nested.type = GgufType::kArray;
  nested.array_type = GgufType::kArray;
  nested.value = std::vector<GgufValue>{inner};
  w.Add("nested", nested);
  const std::string src_bytes = w.Serialize();
  absl::StatusOr<GgufFile> src =
      GgufFile::Parse(MappedFile::FromBytes(src_bytes, "src.gguf"));
  ASSERT_TRUE(src.ok()) << src.status();
  GgufWriter copy;
  for (const std::string& key : src->keys()) {
    if (key != "general.alignment") copy.Add(key, *src->Find(key));
  }
  const std::string copy_bytes = copy.Serialize();
  absl::StatusOr<GgufFile> g =
      GgufFile::Parse(MappedFile::FromBytes(copy_bytes, "copy.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g->GetStringArray("strs"),
            (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*g->GetFloatArray("floats"), (std::vector<double>{0.5, -2.0}));
  absl::StatusOr<std::vector<GgufValue>> outer = g->Find("nested")->Elements();
  ASSERT_TRUE(outer.ok()) << outer.status();
  ASSERT_EQ(outer->size(), 1u);
  absl::StatusOr<std::vector<GgufValue>> ints = (*outer)[0].Elements();
  ASSERT_TRUE(ints.ok()) << ints.status();
  ASSERT_EQ(ints->size(), 2u);
  int64_t x = 0;
  ASSERT_TRUE((*ints)[1].AsInt64(&x));
  EXPECT_EQ(x, -6);
}

}  // namespace
}  // namespace kvserve

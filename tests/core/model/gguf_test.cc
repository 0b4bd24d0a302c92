#include "core/model/gguf.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/model/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

GgufValue Int(GgufType t, int64_t v) {
  GgufValue out;
  out.type = t;
  if (t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
      t == GgufType::kInt64) {
    out.value = v;
  } else {
    out.value = static_cast<uint64_t>(v);
  }
  return out;
}

GgufValue Array(GgufType elem, std::vector<GgufValue> elems) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.array_type = elem;
  out.value = std::move(elems);
  return out;
}

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

absl::StatusOr<GgufFile> ParseBytes(const std::string& bytes) {
  return GgufFile::Parse(MappedFile::FromBytes(bytes, "test.gguf"));
}

// A file using every metadata type, nested arrays and two tensors.
GgufWriter EveryTypeWriter(uint32_t alignment) {
  GgufWriter w;
  w.SetAlignment(alignment);
  w.Add("u8", Int(GgufType::kUint8, 200));
  w.Add("i8", Int(GgufType::kInt8, -100));
  w.Add("u16", Int(GgufType::kUint16, 60000));
  w.Add("i16", Int(GgufType::kInt16, -30000));
  w.AddUint32("u32", 4000000000u);
  w.AddInt32("i32", -2000000000);
  w.Add("u64", Int(GgufType::kUint64, int64_t{1} << 60));
  w.Add("i64", Int(GgufType::kInt64, -(int64_t{1} << 60)));
  w.AddFloat32("f32", 0.25f);
  GgufValue f64;
  f64.type = GgufType::kFloat64;
  f64.value = 1e300;
  w.Add("f64", f64);
  w.AddBool("yes", true);
  w.AddString("str", "h\xC3\xA9llo");
  w.AddStringArray("strs", {"a", "", "ccc"});
  w.Add("nested", Array(GgufType::kArray,
                        {Array(GgufType::kInt16, {Int(GgufType::kInt16, -1),
                                                  Int(GgufType::kInt16, 2)}),
                         Array(GgufType::kInt16, {})}));
  w.AddTensor("vec", {3}, GgmlType::kF32, F32Bytes({1, 2, 3}));
  w.AddTensor("mat", {2, 2}, GgmlType::kF32, F32Bytes({4, 5, 6, 7}));
  return w;
}

TEST(GgufTest, ReadsEveryValueTypeAndTensor) {
  for (uint32_t alignment : {32u, 64u, 8u}) {
    std::string bytes = EveryTypeWriter(alignment).Serialize();
    absl::StatusOr<GgufFile> g = ParseBytes(bytes);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->version(), 3u);
    EXPECT_EQ(g->alignment(), alignment);
    EXPECT_EQ(g->data_offset() % alignment, 0u);
    EXPECT_EQ(*g->GetInt("u8"), 200);
    EXPECT_EQ(*g->GetInt("i8"), -100);
    EXPECT_EQ(*g->GetInt("u16"), 60000);
    EXPECT_EQ(*g->GetInt("i16"), -30000);
    EXPECT_EQ(*g->GetInt("u32"), 4000000000LL);
    EXPECT_EQ(*g->GetInt("i32"), -2000000000);
    EXPECT_EQ(*g->GetInt("u64"), int64_t{1} << 60);
    EXPECT_EQ(*g->GetInt("i64"), -(int64_t{1} << 60));
    EXPECT_EQ(*g->GetFloat("f32"), 0.25);
    EXPECT_EQ(*g->GetFloat("f64"), 1e300);
    EXPECT_EQ(*g->GetFloat("u8"), 200.0);  // integers read as numbers too
    EXPECT_TRUE(*g->GetBool("yes"));
    EXPECT_EQ(*g->GetString("str"), "h\xC3\xA9llo");
    EXPECT_EQ(*g->GetStringArray("strs"),
              (std::vector<std::string>{"a", "", "ccc"}));
    const GgufValue* nested = g->Find("nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->array_type, GgufType::kArray);
    ASSERT_EQ(nested->array_size(), 2u);
    absl::StatusOr<std::vector<GgufValue>> outer = nested->Elements();
    ASSERT_TRUE(outer.ok()) << outer.status();
    EXPECT_EQ((*outer)[0].array_type, GgufType::kInt16);
    absl::StatusOr<std::vector<GgufValue>> inner = (*outer)[0].Elements();
    ASSERT_TRUE(inner.ok()) << inner.status();
    int64_t x = 0;
    ASSERT_TRUE((*inner)[0].AsInt64(&x));
    EXPECT_EQ(x, -1);
    EXPECT_EQ((*outer)[1].array_size(), 0u);
    EXPECT_EQ(outer->size(), 2u);
    // Keys keep file order (general.alignment is written first).
    ASSERT_EQ(g->keys().size(), 15u);
    EXPECT_EQ(g->keys()[0], "general.alignment");
    EXPECT_EQ(g->keys()[1], "u8");

    const GgufTensorInfo* mat = g->FindTensor("mat");
    ASSERT_NE(mat, nullptr);
    EXPECT_EQ(mat->dims, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(mat->n_bytes, 16u);
    EXPECT_EQ(mat->file_offset % alignment, 0u);
    float v[4];
    std::memcpy(v, mat->data, 16);
    EXPECT_EQ(v[0], 4);
    EXPECT_EQ(v[3], 7);
    EXPECT_EQ(g->FindTensor("missing"), nullptr);
  }
}

TEST(GgufTest, TypedGettersNameKeyAndTypes) {
  std::string bytes = EveryTypeWriter(32).Serialize();
  absl::StatusOr<GgufFile> g = ParseBytes(bytes);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::string> s = g->GetString("u32");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("'u32'"));
  EXPECT_THAT(s.status().message(), HasSubstr("uint32"));
  EXPECT_EQ(g->GetInt("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(g->GetInt("f32").ok());
  EXPECT_FALSE(g->GetBool("u8").ok());
  EXPECT_FALSE(g->GetStringArray("nested").ok());
  EXPECT_FALSE(g->GetFloatArray("strs").ok());
}

// Patches the little-endian value at `offset`.
template <typename T>
std::string Patched(std::string bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
  return bytes;
}

void ExpectError(const std::string& bytes, const std::string& fragment) {
  absl::StatusOr<GgufFile> g = ParseBytes(bytes);
  ASSERT_FALSE(g.ok()) << "expected an error mentioning " << fragment;
  EXPECT_THAT(g.status().message(), HasSubstr(fragment));
  EXPECT_THAT(g.status().message(), HasSubstr("test.gguf"));
}

TEST(GgufTest, RejectsBadHeaders) {
  std::string good = EveryTypeWriter(32).Serialize();
  ExpectError("", "truncated at byte offset 0");
  ExpectError("GGU", "truncated");
  ExpectError("GGML" + good.substr(4), "wrong magic");
  ExpectError(Patched<uint32_t>(good, 4, 1), "unsupported GGUF version 1");
  ExpectError(Patched<uint32_t>(good, 4, 4), "unsupported GGUF version 4");
  ExpectError(Patched<uint32_t>(good, 4, 0x03000000), "version");
  ExpectError(Patched<uint64_t>(good, 8, uint64_t{1} << 62), "tensor count");
  ExpectError(Patched<uint64_t>(good, 16, uint64_t{1} << 62), "metadata count");
  // Version 2 has the same layout.
  EXPECT_TRUE(ParseBytes(Patched<uint32_t>(good, 4, 2)).ok());
}

TEST(GgufTest, EveryTruncationIsAnError) {
  std::string good = EveryTypeWriter(32).Serialize();
  absl::StatusOr<GgufFile> full = ParseBytes(good);
  ASSERT_TRUE(full.ok());
  // The last tensor ends at file_offset + n_bytes; any shorter file is bad.
  const GgufTensorInfo* mat = full->FindTensor("mat");
  size_t needed = mat->file_offset + mat->n_bytes;
  for (size_t n = 0; n < needed; ++n) {
    std::string cut = good.substr(0, n);
    absl::StatusOr<GgufFile> g = ParseBytes(cut);
    EXPECT_FALSE(g.ok()) << "accepted a file cut to " << n << " bytes";
  }
  EXPECT_TRUE(ParseBytes(good.substr(0, needed)).ok());
  // The error names the tensor, the bytes it needs and what is missing.
  absl::StatusOr<GgufFile> g = ParseBytes(good.substr(0, needed - 5));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(g.status().message());
  EXPECT_THAT(message, HasSubstr("test.gguf: tensor 'mat'"));
  EXPECT_THAT(message, HasSubstr(absl::StrFormat("needs bytes [%d, %d)",
                                                 mat->file_offset, needed)));
  EXPECT_THAT(message,
              HasSubstr(absl::StrFormat("runs past the end of the %d-byte "
                                        "file by 5 bytes",
                                        needed - 5)));
  EXPECT_THAT(message, HasSubstr(absl::StrFormat("info at byte offset %d",
                                                 mat->info_offset)));
}

TEST(GgufTest, RejectsBadTensorsAndMetadata) {
  GgufWriter w;
  w.AddTensor("t", {4}, GgmlType::kF32, F32Bytes({1, 2, 3, 4}));
  std::string good = w.Serialize();
  absl::StatusOr<GgufFile> g = ParseBytes(good);
  ASSERT_TRUE(g.ok());
  const uint64_t info = g->tensors()[0].info_offset;
  // name (8 + 1), n_dims (4), dim (8), type (4), offset (8)
  const size_t dims_at = info + 9, dim_at = info + 13, type_at = info + 21,
               offset_at = info + 25;
  ExpectError(Patched<uint32_t>(good, dims_at, 7), "7 dimensions");
  ExpectError(Patched<int64_t>(good, dim_at, -4), "dimension 0 is -4");
  ExpectError(Patched<int64_t>(good, dim_at, 1000), "runs past the end");
  ExpectError(Patched<uint32_t>(good, type_at, 99),
              "unsupported tensor type 99");
  ExpectError(Patched<uint64_t>(good, offset_at, 32), "runs past the end");
  ExpectError(Patched<uint64_t>(good, offset_at, 3), "not a multiple");
  ExpectError(Patched<uint64_t>(good, offset_at, ~uint64_t{0} - 31),
              "runs past the end");
  ExpectError(Patched<uint32_t>(good, type_at, 8), "block size");  // Q8_0

  GgufWriter dup;
  dup.AddUint32("k", 1);
  dup.AddUint32("k", 2);
  ExpectError(dup.Serialize(), "duplicate key");

  GgufWriter align;
  align.SetAlignment(48);
  ExpectError(align.Serialize(), "general.alignment");

  GgufWriter bad_bool;
  bad_bool.AddBool("b", true);
  std::string bb = bad_bool.Serialize();
  // The bool is the last byte of metadata before padding: find it.
  size_t at = bb.find("\x01", bb.find("b\x07") + 2);
  ASSERT_NE(at, std::string::npos);
  ExpectError(Patched<uint8_t>(bb, at, 5), "bool");

  GgufWriter long_array;
  long_array.AddInt32Array("a", {1, 2, 3});
  std::string la = long_array.Serialize();
  size_t count_at = la.find("a\x09") + 2 + 4;  // key's last char, type, elem
  ExpectError(Patched<uint64_t>(la, count_at, uint64_t{1} << 40), "claims");
}

TEST(GgufTest, DeeplyNestedArraysAreRefused) {
  GgufValue v = Array(GgufType::kInt8, {});
  for (int i = 0; i < 20; ++i) v = Array(GgufType::kArray, {v});
  GgufWriter w;
  w.Add("deep", v);
  ExpectError(w.Serialize(), "nested deeper");
}

TEST(MappedFileTest, OpenErrors) {
  EXPECT_EQ(MappedFile::Open("/nonexistent/model.gguf").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(MappedFile::Open("/").ok());
  EXPECT_EQ(MappedFile::Read("/nonexistent/model.gguf").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(MappedFile::Read("/").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MappedFileTest, ReadHoldsTheSameBytesAsAMappingAndOwnsThem) {
  const std::string path = ::testing::TempDir() + "kvserve_mapped_file_" +
                           std::to_string(::getpid()) + ".gguf";
  const std::string bytes = EveryTypeWriter(64).Serialize();
  ASSERT_TRUE(EveryTypeWriter(64).WriteFile(path).ok());
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped =
      MappedFile::Open(path);
  absl::StatusOr<std::shared_ptr<const MappedFile>> read =
      MappedFile::Read(path);
  ASSERT_TRUE(mapped.ok() && read.ok());
  EXPECT_EQ((*mapped)->bytes(), bytes);
  EXPECT_EQ((*read)->bytes(), bytes);
  EXPECT_EQ((*read)->name(), path);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*read)->data()) % 4096, 0u);
  mapped->reset();
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  EXPECT_EQ((*read)->bytes(), bytes);
  absl::StatusOr<std::shared_ptr<const MappedFile>> empty =
      MappedFile::Read(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvserve

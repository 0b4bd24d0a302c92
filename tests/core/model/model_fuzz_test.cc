// Corrupted and truncated variants of real model files (stories260K.gguf,
// stories260K.bin) and of a made model: loading each returns a Status (OK or
// an error naming the file), never crashes or reads out of bounds (run the
// asan build to make the last part strict).
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct FuzzStats {
  int ok = 0;
  int errors = 0;
};

// Loads `bytes`; on success checks the result is self-consistent and the
// tokenizer survives use.
void LoadVariant(const std::string& bytes, const std::string& name,
                 const LoadOptions& options, FuzzStats& stats) {
  absl::StatusOr<LoadedModel> m =
      LoadModelFromFile(MappedFile::FromBytes(bytes, name), options);
  if (!m.ok()) {
    ++stats.errors;
    EXPECT_THAT(m.status().message(), HasSubstr(name));
    return;
  }
  ++stats.ok;
  const ModelConfig& c = m->weights->config;
  ASSERT_TRUE(c.Validate().ok());
  ASSERT_EQ(m->tokenizer->vocab_size(), c.vocab_size);
  ASSERT_EQ(m->weights->layers.size(), static_cast<size_t>(c.n_layers));
  std::vector<int32_t> ids = m->tokenizer->Encode(
      "Once upon a time \xF0\x9F\x98\x80 \xE4\xBD\xA0", {});
  int32_t prev = -1;
  for (int32_t id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, c.vocab_size);
    m->tokenizer->DecodeToken(prev, id);
    prev = id;
  }
}

// Flips 1..8 random bytes, mostly in the first `hot` bytes (headers,
// metadata, tensor infos), where corruption changes the structure.
std::string Flipped(const std::string& good, size_t hot, std::mt19937_64& rng) {
  std::string b = good;
  int flips = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < flips; ++i) {
    size_t span = rng() % 4 != 0 ? std::min(hot, b.size()) : b.size();
    size_t at = rng() % span;
    b[at] = static_cast<char>(b[at] ^ static_cast<char>(1 + rng() % 255));
  }
  return b;
}

void Fuzz(const std::string& good, const std::string& name, size_t hot,
          const LoadOptions& options, int flip_variants, int cuts,
          uint64_t seed) {
  std::mt19937_64 rng(seed);
  FuzzStats flipped, truncated;
  for (int i = 0; i < flip_variants; ++i) {
    LoadVariant(Flipped(good, hot, rng), name, options, flipped);
  }
  for (int i = 0; i < cuts; ++i) {
    // Every short length near the start, then random ones.
    size_t n = i < 64 ? static_cast<size_t>(i) : rng() % good.size();
    LoadVariant(good.substr(0, n), name, options, truncated);
  }
  // A truncated file is never accepted; corruption is caught often.
  EXPECT_EQ(truncated.ok, 0) << name;
  EXPECT_GT(flipped.errors, flip_variants / 10) << name;
}

TEST(ModelFuzzTest, StoriesGguf) {
  std::string good =
      ReadFile(kvserve::testing::SharedDir() + "/models/stories260K.gguf");
  if (good.empty()) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf";
  LoadOptions o;
  FuzzStats base;
  LoadVariant(good, "stories260K.gguf", o, base);
  ASSERT_EQ(base.ok, 1);
  Fuzz(good, "stories260K.gguf", 14200, o, 4000, 1000, 1);
  o.weight_dtype = "bf16";
  Fuzz(good, "stories260K.gguf", 14200, o, 200, 100, 2);
}

TEST(ModelFuzzTest, StoriesBin) {
  std::string dir = kvserve::testing::SharedDir() + "/models/";
  std::string good = ReadFile(dir + "stories260K.bin");
  if (good.empty()) GTEST_SKIP() << "needs ../shared/models/stories260K.bin";
  LoadOptions o;
  o.tokenizer_path = dir + "tok512.bin";
  FuzzStats base;
  LoadVariant(good, "stories260K.bin", o, base);
  ASSERT_EQ(base.ok, 1);
  Fuzz(good, "stories260K.bin", 28, o, 1000, 500, 3);
}

TEST(ModelFuzzTest, MadeModelEveryDtype) {
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    RandomModelOptions ro;
    ro.dtype = dtype;
    ro.n_layers = 2;
    ro.dim = 32;
    ro.n_heads = 4;
    ro.n_kv_heads = 2;
    ro.hidden_dim = 48;
    absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
    ASSERT_TRUE(w.ok()) << w.status();
    std::string good = (*w)->Serialize();
    LoadOptions o;
    FuzzStats base;
    LoadVariant(good, "made.gguf", o, base);
    ASSERT_EQ(base.ok, 1);
    Fuzz(good, "made.gguf", 8000, o, 1000, 300, 4);
  }
}

}  // namespace
}  // namespace kvserve

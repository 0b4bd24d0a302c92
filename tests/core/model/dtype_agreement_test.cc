// F16 and BF16 files served with default flags agree with the same seed's
// F32 model (the model maker writes each tensor's values rounded from the
// same f32 values), by the goldens' rule: greedy tokens agree until a near
// tie, and the top-5 logits relative to the top-1 are within 0.1. Run under
// every ISA level (ctest registers this binary again with
// KVSERVE_MAX_ISA=avx2).
#include <memory>
#include <string>

#include "core/kv/block_pool.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "core/util/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/testing/greedy_reference.h"

namespace kvserve {
namespace {

struct Served {
  std::string bytes;  // outlives the zero-copy tensors
  LoadedModel files;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Model> model;
};

std::unique_ptr<Served> Serve(const std::string& dtype) {
  RandomModelOptions ro;
  ro.n_layers = 4;
  ro.dim = 256;
  ro.n_heads = 8;
  ro.n_kv_heads = 2;
  ro.hidden_dim = 512;
  ro.context_length = 256;
  ro.dtype = dtype;
  ro.seed = 20261201;
  auto s = std::make_unique<Served>();
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  s->bytes = (*w)->Serialize();
  absl::StatusOr<LoadedModel> m = LoadModelFromFile(
      MappedFile::FromBytes(s->bytes, dtype + ".gguf"), LoadOptions{});
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  s->files = std::move(*m);
  const ModelConfig& c = s->files.weights->config;
  s->pool = *BlockPool::Create(
      {.n_layers = c.n_layers,
       .n_kv_heads = c.n_kv_heads,
       .head_dim = c.head_dim,
       .block_tokens = 16,
       .capacity_bytes = c.context_length * c.KvBytesPerToken(DType::kF32)});
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(s->files.weights.get(), s->pool.get());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  s->model = std::move(*model);
  return s;
}

class DtypeAgreementTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DtypeAgreementTest, GreedyAndTop5MatchTheF32Model) {
  std::unique_ptr<Served> f32 = Serve("f32");
  std::unique_ptr<Served> other = Serve(GetParam());
  ASSERT_TRUE(f32 && other);
  const std::vector<int32_t> prompt = {1, 72, 101, 108, 108, 111, 32, 119};
  testing::OurRun ref =
      testing::RunGreedy(*f32->model, f32->pool.get(), prompt, 32);
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  testing::OurRun got =
      testing::RunGreedy(*other->model, other->pool.get(), prompt, 32);
  int compared = 0;
  EXPECT_TRUE(testing::AgreesWithReference(testing::AsReference(prompt, ref),
                                           got, 0.1, 0.1, &compared))
      << GetParam() << " on " << CpuSummary();
  EXPECT_GE(compared, 4) << "too few steps before a near tie to judge";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DtypeAgreementTest,
                         ::testing::Values("f16", "bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvserve

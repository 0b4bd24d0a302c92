#include "core/model/loader.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/model/gguf_random_model.h"
#include "core/model/gguf_writer.h"
#include "core/model/model.h"
#include "core/util/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

std::string Models() { return kvserve::testing::SharedDir() + "/models/"; }

bool HaveStories() {
  return MappedFile::Open(Models() + "stories260K.gguf").ok() &&
         MappedFile::Open(Models() + "stories260K.bin").ok() &&
         MappedFile::Open(Models() + "tok512.bin").ok();
}

#define SKIP_WITHOUT_STORIES()                                        \
  if (!HaveStories()) {                                               \
    GTEST_SKIP() << "needs stories260K.{gguf,bin} and tok512.bin in " \
                 << Models();                                         \
  }

LoadedModel MustLoad(const LoadOptions& options) {
  absl::StatusOr<LoadedModel> m = LoadModel(options);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  return std::move(*m);
}

LoadOptions Gguf(std::string dtype = "auto") {
  LoadOptions o;
  o.model_path = Models() + "stories260K.gguf";
  o.weight_dtype = std::move(dtype);
  return o;
}
LoadOptions Bin(std::string dtype = "auto") {
  return {.model_path = Models() + "stories260K.bin",
          .tokenizer_path = Models() + "tok512.bin",
          .weight_dtype = std::move(dtype)};
}

std::vector<const WeightTensor*> AllTensors(const ModelWeights& w) {
  std::vector<const WeightTensor*> out = {&w.token_embd};
  for (const LayerWeights& l : w.layers) {
    for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo,
                                  &l.ffn_norm, &l.w_gate, &l.w_down, &l.w_up}) {
      out.push_back(t);
    }
  }
  out.push_back(&w.output_norm);
  out.push_back(&w.output);
  return out;
}

TEST(LoaderTest, StoriesConfigFromBothFormats) {
  SKIP_WITHOUT_STORIES();
  for (const LoadOptions& o : {Gguf(), Bin()}) {
    LoadedModel m = MustLoad(o);
    ASSERT_NE(m.weights, nullptr);
    const ModelConfig& c = m.weights->config;
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.context_length, 512);
    EXPECT_EQ(c.rotary_dim(), 8);
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
    EXPECT_EQ(c.rope_theta, 10000.0f);  // absent in the GGUF: the default
    EXPECT_TRUE(m.weights->rope_freq_factors.empty());
    EXPECT_EQ(m.weights->layers.size(), 5u);
    EXPECT_EQ(m.tokenizer->vocab_size(), 512);
    EXPECT_EQ(m.tokenizer->bos_id(), 1);
    EXPECT_EQ(m.tokenizer->eos_id(), 2);
    EXPECT_EQ(m.weights->fingerprint.size(), 16u);
    EXPECT_FALSE(m.weights->name.empty());
  }
}

TEST(LoaderTest, ChatTemplateFromGgufOnly) {
  SKIP_WITHOUT_STORIES();
  // stories260K has no template, and llama2.c files never do.
  EXPECT_EQ(MustLoad(Gguf()).chat_template, "");
  EXPECT_EQ(MustLoad(Bin()).chat_template, "");

  RandomModelOptions ro;
  ro.n_layers = 1;
  ro.special_tokens = {"<|im_start|>", "<|im_end|>"};
  ro.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
  ASSERT_TRUE(w.ok()) << w.status();
  std::string bytes = (*w)->Serialize();
  absl::StatusOr<LoadedModel> m =
      LoadModelFromFile(MappedFile::FromBytes(bytes, "chat.gguf"), {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->chat_template, ro.chat_template);

  // A template that is not a string is an error naming the key.
  ro.chat_template.clear();
  w = MakeRandomModel(ro);
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->AddUint32("tokenizer.chat_template", 7);
  bytes = (*w)->Serialize();
  m = LoadModelFromFile(MappedFile::FromBytes(bytes, "bad.gguf"), {});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("tokenizer.chat_template"));
}

TEST(LoaderTest, BothFormatsGiveIdenticalF32Tensors) {
  SKIP_WITHOUT_STORIES();
  LoadedModel g = MustLoad(Gguf());
  LoadedModel b = MustLoad(Bin());
  ASSERT_NE(g.weights, nullptr);
  ASSERT_NE(b.weights, nullptr);
  std::vector<const WeightTensor*> gt = AllTensors(*g.weights);
  std::vector<const WeightTensor*> bt = AllTensors(*b.weights);
  ASSERT_EQ(gt.size(), bt.size());
  for (size_t i = 0; i < gt.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(gt[i]->type, quant::Type::kF32);
    EXPECT_EQ(bt[i]->type, quant::Type::kF32);
    ASSERT_EQ(gt[i]->rows, bt[i]->rows);
    ASSERT_EQ(gt[i]->cols, bt[i]->cols);
    EXPECT_EQ(std::memcmp(gt[i]->data, bt[i]->data, gt[i]->bytes()), 0);
  }
  // Shapes as the forward pass reads them.
  const LayerWeights& l = g.weights->layers[0];
  EXPECT_EQ(l.wq.rows, 64);
  EXPECT_EQ(l.wk.rows, 32);
  EXPECT_EQ(l.wk.cols, 64);
  EXPECT_EQ(l.wo.cols, 64);
  EXPECT_EQ(l.w_gate.rows, 172);
  EXPECT_EQ(l.w_down.rows, 64);
  EXPECT_EQ(l.w_down.cols, 172);
  EXPECT_EQ(l.attn_norm.rows, 1);
  EXPECT_EQ(g.weights->token_embd.rows, 512);
  // The .bin shares its classifier; the GGUF stores a copy.
  EXPECT_EQ(b.weights->output.data, b.weights->token_embd.data);
  EXPECT_NE(g.weights->output.data, g.weights->token_embd.data);
  // Different files, different fingerprints; the same file, the same one.
  EXPECT_NE(g.weights->fingerprint, b.weights->fingerprint);
  EXPECT_EQ(MustLoad(Gguf()).weights->fingerprint, g.weights->fingerprint);
}

TEST(LoaderTest, F32TensorsAreZeroCopyIntoTheMapping) {
  SKIP_WITHOUT_STORIES();
  LoadedModel m = MustLoad(Gguf());
  ASSERT_NE(m.weights, nullptr);
  const auto* file =
      static_cast<const MappedFile*>(m.weights->storage.at(0).get());
  for (const WeightTensor* t : AllTensors(*m.weights)) {
    auto p = static_cast<const uint8_t*>(t->data);
    EXPECT_GE(p, file->data());
    EXPECT_LE(p + t->bytes(), file->data() + file->size());
  }
  EXPECT_EQ(m.weights->storage.size(), 1u);  // nothing was copied
}

TEST(LoaderTest, Bf16WeightsAreRoundedF32) {
  SKIP_WITHOUT_STORIES();
  LoadedModel f = MustLoad(Bin("f32"));
  for (const LoadOptions& o : {Bin("bf16"), Gguf("bf16")}) {
    LoadedModel h = MustLoad(o);
    ASSERT_NE(h.weights, nullptr);
    std::vector<const WeightTensor*> ft = AllTensors(*f.weights);
    std::vector<const WeightTensor*> ht = AllTensors(*h.weights);
    for (size_t i = 0; i < ft.size(); ++i) {
      const bool vector = ft[i]->rows == 1;
      ASSERT_EQ(ht[i]->type, vector ? quant::Type::kF32 : quant::Type::kBF16)
          << i;
      for (int64_t k = 0; k < ft[i]->rows * ft[i]->cols; k += 7) {
        float want = ft[i]->f32()[k];
        float got =
            vector ? ht[i]->f32()[k]
                   : Bf16ToFloat(static_cast<const uint16_t*>(ht[i]->data)[k]);
        ASSERT_EQ(got, vector ? want : Bf16ToFloat(FloatToBf16(want)))
            << "tensor " << i << " element " << k;
      }
    }
    EXPECT_EQ(h.weights->fingerprint,
              MustLoad(o.tokenizer_path.empty() ? Gguf() : Bin())
                  .weights->fingerprint)
        << "the fingerprint is of the stored bytes, not the compute dtype";
  }
}

TEST(LoaderTest, OptionErrors) {
  SKIP_WITHOUT_STORIES();
  LoadOptions o = Bin();
  o.tokenizer_path.clear();
  absl::StatusOr<LoadedModel> m = LoadModel(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("tokenizer"));
  o = Gguf();
  o.tokenizer_path = Models() + "tok512.bin";
  EXPECT_FALSE(LoadModel(o).ok());
  m = LoadModel(Gguf("f16"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("f16"));
  o = LoadOptions();
  o.model_path = "/nonexistent.gguf";
  m = LoadModel(o);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  // A tokenizer whose size disagrees with the model.
  o = Bin();
  o.tokenizer_path = Models() + "stories260K.gguf";
  EXPECT_FALSE(LoadModel(o).ok());
}

LoadOptions At(const std::string& path, bool no_mmap = false) {
  LoadOptions o;
  o.model_path = path;
  o.no_mmap = no_mmap;
  return o;
}

// A made model written to a file of its own (per process: ctest runs the
// /avx2 variant of a test at the same time), removed at the end.
class ModelFile {
 public:
  explicit ModelFile(const std::string& tag)
      : path_(::testing::TempDir() + "kvserve_" + tag + "_" +
              std::to_string(::getpid()) + ".gguf") {
    RandomModelOptions o;
    o.dtype = "q8_0";
    o.dim = 64;
    o.hidden_dim = 128;
    absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(o);
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) {
      EXPECT_TRUE((*w)->WriteFile(path_).ok());
    }
  }
  ~ModelFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  void Truncate(off_t size) const {
    ASSERT_EQ(::truncate(path_.c_str(), size), 0);
  }

 private:
  std::string path_;
};

// The logits after each token of a short prompt, on a fresh KV cache.
std::vector<float> PromptLogits(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  std::unique_ptr<BlockPool> pool = *BlockPool::Create(
      {.n_layers = c.n_layers,
       .n_kv_heads = c.n_kv_heads,
       .head_dim = c.head_dim,
       .block_tokens = 16,
       .capacity_bytes = 64 * c.KvBytesPerToken(DType::kF32)});
  std::unique_ptr<Model> model = *Model::Create(&w, pool.get());
  BlockTable kv(pool.get());
  const std::vector<int32_t> tokens = {1, 72, 101, 108, 108, 111};
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_TRUE(kv.Extend(i + 1).ok());
    const SeqChunk chunk{&kv, static_cast<int64_t>(i),
                         absl::MakeConstSpan(&tokens[i], 1), true};
    absl::StatusOr<absl::Span<const float>> logits = model->Forward({chunk});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (logits.ok()) out.insert(out.end(), logits->begin(), logits->end());
  }
  return out;
}

TEST(LoaderTest, NoMmapSurvivesTheFileBeingTruncated) {
  ModelFile file("no_mmap");
  LoadedModel mapped = MustLoad(At(file.path()));
  ASSERT_NE(mapped.weights, nullptr);
  const std::vector<float> want = PromptLogits(*mapped.weights);
  mapped = {};  // unmapped before the file changes
  LoadedModel read = MustLoad(At(file.path(), /*no_mmap=*/true));
  ASSERT_NE(read.weights, nullptr);
  EXPECT_EQ(read.weights->fingerprint,
            MustLoad(At(file.path())).weights->fingerprint);
  // The bytes are the process's own: truncating the file (which would
  // raise SIGBUS through a mapping) changes nothing.
  file.Truncate(0);
  EXPECT_EQ(PromptLogits(*read.weights), want);
  file.Truncate(4096);
  EXPECT_EQ(PromptLogits(*read.weights), want);
}

TEST(LoaderTest, NoMmapErrors) {
  LoadOptions o;
  o.model_path = "/nonexistent.gguf";
  o.no_mmap = true;
  EXPECT_EQ(LoadModel(o).status().code(), absl::StatusCode::kNotFound);
  o.model_path = ::testing::TempDir();
  EXPECT_EQ(LoadModel(o).status().code(), absl::StatusCode::kInvalidArgument);
  // A file truncated before the load is an error naming a tensor, either
  // way it is read.
  ModelFile file("no_mmap_cut");
  file.Truncate(20000);
  for (bool no_mmap : {false, true}) {
    absl::StatusOr<LoadedModel> m = LoadModel(At(file.path(), no_mmap));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()),
                HasSubstr("runs past the end of the 20000-byte file"));
  }
}

// What --no_mmap is for: a mapped model file truncated under the server
// kills it at the next forward pass.
TEST(LoaderDeathTest, TruncatingAMappedModelRaisesSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto truncate_and_run = [] {
    ModelFile file("mapped_cut");
    LoadedModel m = MustLoad(At(file.path()));
    file.Truncate(0);
    std::remove(file.path().c_str());  // the dying child runs no destructor
    PromptLogits(*m.weights);
  };
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer catches the signal, reports "BUS" and exits.
  EXPECT_DEATH(truncate_and_run(), "BUS");
#else
  EXPECT_EXIT(truncate_and_run(), ::testing::KilledBySignal(SIGBUS), "");
#endif
}

}  // namespace
}  // namespace kvserve

#include "core/model/gguf_quantize.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// Rows of 256 and 512 elements: every K-quant applies without fallback.
RandomModelOptions Small() {
  RandomModelOptions o;
  o.n_layers = 2;
  o.dim = 256;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.hidden_dim = 512;
  o.context_length = 256;
  o.seed = 7;
  return o;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/gguf_quantize_", getpid(), "_",
                      name);
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Writes MakeRandomModel(o) to a temp file; its path.
std::string MakeFile(const RandomModelOptions& o, const std::string& name) {
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(o);
  EXPECT_TRUE(w.ok()) << w.status();
  const std::string path = TempPath(name);
  if (w.ok()) {
    EXPECT_TRUE((*w)->WriteFile(path).ok());
  }
  return path;
}

std::unique_ptr<ModelWeights> Load(const std::string& path,
                                   std::unique_ptr<Tokenizer>* tokenizer) {
  LoadOptions lo;
  lo.model_path = path;
  absl::StatusOr<LoadedModel> m = LoadModel(lo);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  if (tokenizer != nullptr) *tokenizer = std::move(m->tokenizer);
  return std::move(m->weights);
}

TypeMix Mix(const char* name) {
  absl::StatusOr<TypeMix> mix = ParseTypeMix(name);
  EXPECT_TRUE(mix.ok()) << mix.status();
  return mix.value_or(TypeMix{});
}

// Every matrix of the model by its llama.cpp name.
std::vector<std::pair<std::string, const WeightTensor*>> Matrices(
    const ModelWeights& w) {
  std::vector<std::pair<std::string, const WeightTensor*>> out = {
      {"token_embd.weight", &w.token_embd}, {"output.weight", &w.output}};
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    auto n = [l](const char* t) {
      return absl::StrFormat("blk.%d.%s.weight", l, t);
    };
    out.insert(out.end(), {{n("attn_q"), &lw.wq},
                           {n("attn_k"), &lw.wk},
                           {n("attn_v"), &lw.wv},
                           {n("attn_output"), &lw.wo},
                           {n("ffn_gate"), &lw.w_gate},
                           {n("ffn_up"), &lw.w_up},
                           {n("ffn_down"), &lw.w_down}});
  }
  return out;
}

std::vector<const WeightTensor*> Norms(const ModelWeights& w) {
  std::vector<const WeightTensor*> out = {&w.output_norm};
  for (const LayerWeights& lw : w.layers) {
    out.push_back(&lw.attn_norm);
    out.push_back(&lw.ffn_norm);
  }
  return out;
}

// sqrt(Σ (q - ref)² / Σ ref²) over the whole matrix, in double.
double RelativeRmsError(const WeightTensor& q, const WeightTensor& ref) {
  std::vector<float> a(q.cols), b(ref.cols);
  double err = 0, norm = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    quant::Info(q.type)->dequantize(q.row(r), a.data(), q.cols);
    quant::Info(ref.type)->dequantize(ref.row(r), b.data(), ref.cols);
    for (int64_t j = 0; j < q.cols; ++j) {
      err += (double{a[j]} - b[j]) * (double{a[j]} - b[j]);
      norm += double{b[j]} * b[j];
    }
  }
  return std::sqrt(err / norm);
}

// A value as the writer serializes it (GgufValue has no operator==).
std::string Bytes(const GgufValue& v) {
  GgufWriter w;
  w.Add("key", v);
  return w.Serialize();
}

class QuantizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    f32_path_ = new std::string(MakeFile(Small(), "source_f32.gguf"));
  }
  static void TearDownTestSuite() {
    std::remove(f32_path_->c_str());
    delete f32_path_;
  }
  static const std::string& f32_path() { return *f32_path_; }

  // Quantizes the f32 model to `type` in a temp file (removed at TearDown).
  std::string Quantized(const char* type) {
    const std::string out = TempPath(absl::StrCat(type, ".gguf"));
    absl::Status s = QuantizeGguf(f32_path(), out, Mix(type));
    EXPECT_TRUE(s.ok()) << s;
    written_.push_back(out);
    return out;
  }
  void TearDown() override {
    for (const std::string& p : written_) std::remove(p.c_str());
  }

  std::vector<std::string> written_;

 private:
  static inline std::string* f32_path_ = nullptr;
};

// MakeRandomModel quantizes the same f32 values with the same reference
// quantizers, so converting its f32 model must give its model of that type
// byte for byte: keys (file_type included), tensor order, types and data.
TEST_F(QuantizeTest, MatchesTheModelMakersFileForEveryType) {
  for (const char* type :
       {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
        "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "q4_k_m", "q5_k_m"}) {
    SCOPED_TRACE(type);
    RandomModelOptions o = Small();
    o.dtype = type;
    absl::StatusOr<std::unique_ptr<GgufWriter>> made = MakeRandomModel(o);
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_TRUE(ReadAll(Quantized(type)) == (*made)->Serialize());
  }
}

TEST_F(QuantizeTest, Q4KMTypesFollowTheMix) {
  std::unique_ptr<ModelWeights> w = Load(Quantized("q4_k_m"), nullptr);
  ASSERT_NE(w, nullptr);
  // llama.cpp's q4_k_m on 2 layers: output, and attn_v and ffn_down of
  // layer 1 (>= 7/8 of the layers) get Q6_K; everything else Q4_K.
  for (const auto& [name, t] : Matrices(*w)) {
    const bool more_bits = name == "output.weight" ||
                           name == "blk.1.attn_v.weight" ||
                           name == "blk.1.ffn_down.weight";
    EXPECT_EQ(t->type, more_bits ? quant::Type::kQ6_K : quant::Type::kQ4_K)
        << name;
    EXPECT_EQ(static_cast<GgmlType>(t->type),
              Mix("q4_k_m").TypeFor(name, 2, t->cols))
        << name;
  }
  for (const WeightTensor* t : Norms(*w)) {
    EXPECT_EQ(t->type, quant::Type::kF32);
    for (int64_t i = 0; i < t->cols; ++i) ASSERT_EQ(t->f32()[i], 1.0f);
  }
  EXPECT_EQ(w->TypeSummary(), "f32 x 5, q4_K x 13, q6_K x 3");
}

TEST_F(QuantizeTest, SingleTypesApplyToEveryMatrix) {
  for (const char* type : {"q8_0", "f16"}) {
    SCOPED_TRACE(type);
    absl::StatusOr<GgufFile> g = GgufFile::Open(Quantized(type));
    ASSERT_TRUE(g.ok()) << g.status();
    const uint32_t want = static_cast<uint32_t>(
        type == std::string("f16") ? GgmlType::kF16 : GgmlType::kQ8_0);
    for (const GgufTensorInfo& t : g->tensors()) {
      EXPECT_EQ(t.type, t.dims.size() == 1 ? 0u : want) << t.name;
    }
  }
}

// Relative RMS error of every matrix against the f32 source, per type.
// Measured on this model: F16 0.02%, Q8_0 0.47%, Q6_K 1.6%, Q4_K 6.5% (the
// same for every matrix to 0.1%); the bounds leave 1.5-5x of room.
TEST_F(QuantizeTest, ValuesStayCloseToTheF32Source) {
  std::unique_ptr<ModelWeights> ref = Load(f32_path(), nullptr);
  ASSERT_NE(ref, nullptr);
  const auto ref_matrices = Matrices(*ref);
  auto bound = [](quant::Type t) {
    switch (t) {
      case quant::Type::kF16:
        return 0.001;
      case quant::Type::kQ8_0:
        return 0.01;
      case quant::Type::kQ6_K:
        return 0.03;
      case quant::Type::kQ4_K:
        return 0.10;
      default:
        return 0.0;  // not expected here
    }
  };
  for (const char* type : {"q8_0", "q4_k_m", "f16"}) {
    SCOPED_TRACE(type);
    std::unique_ptr<ModelWeights> w = Load(Quantized(type), nullptr);
    ASSERT_NE(w, nullptr);
    const auto matrices = Matrices(*w);
    ASSERT_EQ(matrices.size(), ref_matrices.size());
    for (size_t i = 0; i < matrices.size(); ++i) {
      const WeightTensor& q = *matrices[i].second;
      const WeightTensor& r = *ref_matrices[i].second;
      ASSERT_EQ(q.rows, r.rows);
      ASSERT_EQ(q.cols, r.cols);
      const double e = RelativeRmsError(q, r);
      EXPECT_LT(e, bound(q.type))
          << matrices[i].first << " " << quant::Info(q.type)->name;
      EXPECT_GT(e, 0.0) << matrices[i].first;  // it was really converted
    }
  }
}

TEST_F(QuantizeTest, KeysAreCopiedAndTheTokenizerAgrees) {
  absl::StatusOr<GgufFile> src = GgufFile::Open(f32_path());
  ASSERT_TRUE(src.ok()) << src.status();
  const std::string out = Quantized("q4_k_m");
  absl::StatusOr<GgufFile> dst = GgufFile::Open(out);
  ASSERT_TRUE(dst.ok()) << dst.status();
  EXPECT_EQ(dst->keys(), src->keys());
  for (const std::string& key : src->keys()) {
    if (key == "general.file_type") continue;
    ASSERT_NE(dst->Find(key), nullptr) << key;
    EXPECT_EQ(Bytes(*dst->Find(key)), Bytes(*src->Find(key))) << key;
  }
  EXPECT_EQ(*src->GetInt("general.file_type"), 0);
  EXPECT_EQ(*dst->GetInt("general.file_type"),
            15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  EXPECT_EQ(dst->alignment(), src->alignment());

  std::unique_ptr<Tokenizer> a, b;
  ASSERT_NE(Load(f32_path(), &a), nullptr);
  ASSERT_NE(Load(out, &b), nullptr);
  ASSERT_EQ(a->vocab_size(), b->vocab_size());
  for (const char* text : {"Hello, world!", " two  spaces", "ünïcödé ✓", ""}) {
    EXPECT_EQ(a->Encode(text, {}), b->Encode(text, {})) << text;
  }
  for (int32_t id = 0; id < a->vocab_size(); ++id) {
    ASSERT_EQ(a->Piece(id), b->Piece(id)) << id;
  }
}

// Rows that are not whole 256-element blocks: Q4_K -> Q5_0, Q6_K -> Q8_0,
// Q2_K -> IQ4_NL (rows of 288 = 9 blocks of 32); F16 when not even 32
// divides the row (100).
TEST(QuantizeFallbackTest, RowsThatAreNotWholeBlocksFallBack) {
  RandomModelOptions o = Small();
  o.hidden_dim = 288;
  const std::string in288 = MakeFile(o, "h288.gguf");
  o.hidden_dim = 100;
  const std::string in100 = MakeFile(o, "h100.gguf");
  struct Case {
    const std::string* in;
    const char* type;
    quant::Type gate, down0, down1;  // ffn_gate (rows of 256), ffn_down
  } cases[] = {
      {&in288, "q4_k_m", quant::Type::kQ4_K, quant::Type::kQ5_0,
       quant::Type::kQ8_0},
      {&in288, "q2_k", quant::Type::kQ2_K, quant::Type::kIQ4_NL,
       quant::Type::kIQ4_NL},
      {&in100, "q4_k_m", quant::Type::kQ4_K, quant::Type::kF16,
       quant::Type::kF16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(*c.in, " ", c.type));
    const std::string out = TempPath("fallback.gguf");
    ASSERT_TRUE(QuantizeGguf(*c.in, out, Mix(c.type)).ok());
    std::unique_ptr<ModelWeights> w = Load(out, nullptr);
    std::remove(out.c_str());
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->layers[0].w_gate.type, c.gate);
    EXPECT_EQ(w->layers[0].w_down.type, c.down0);
    EXPECT_EQ(w->layers[1].w_down.type, c.down1);
  }
  std::remove(in288.c_str());
  std::remove(in100.c_str());
}

// A quantized model converts through f32: Q8_0 -> Q4_K stays about as close
// to the original as Q4_K made from f32, and a matrix already in its target
// type is copied byte for byte.
TEST_F(QuantizeTest, QuantizedInputsAreDequantizedFirst) {
  const std::string q8 = Quantized("q8_0");
  const std::string q4 = TempPath("q8_to_q4.gguf");
  written_.push_back(q4);
  ASSERT_TRUE(QuantizeGguf(q8, q4, Mix("q4_k")).ok());
  std::unique_ptr<ModelWeights> ref = Load(f32_path(), nullptr);
  std::unique_ptr<ModelWeights> w = Load(q4, nullptr);
  ASSERT_TRUE(ref && w);
  EXPECT_EQ(w->layers[0].wq.type, quant::Type::kQ4_K);
  EXPECT_LT(RelativeRmsError(w->layers[0].wq, ref->layers[0].wq), 0.10);

  const std::string q4km = Quantized("q4_k_m");
  const std::string again = TempPath("q4km_again.gguf");
  written_.push_back(again);
  ASSERT_TRUE(QuantizeGguf(q4km, again, Mix("q4_k_m")).ok());
  EXPECT_TRUE(ReadAll(again) == ReadAll(q4km));
}

TEST_F(QuantizeTest, ConvertingAFileOntoItselfIsSafe) {
  const std::string path = TempPath("in_place.gguf");
  written_.push_back(path);
  ASSERT_TRUE(QuantizeGguf(f32_path(), path, Mix("q8_0")).ok());
  ASSERT_TRUE(QuantizeGguf(path, path, Mix("f16")).ok());
  absl::StatusOr<GgufFile> g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->FindTensor("blk.0.attn_q.weight")->type,
            static_cast<uint32_t>(GgmlType::kF16));
}

// A file with the llama keys the quantizer needs and the given tensors.
std::string WriteFileWith(const std::string& name, void (*add)(GgufWriter& w)) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  add(w);
  const std::string path = TempPath(name);
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

TEST(QuantizeErrorTest, BadInputsNameWhatIsWrong) {
  const std::string out = TempPath("never_written.gguf");
  const TypeMix q4 = Mix("q4_k");

  const std::string missing = TempPath("no_such_file.gguf");
  absl::Status s = QuantizeGguf(missing, out, q4);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(missing));

  const std::string garbage = TempPath("garbage.gguf");
  std::ofstream(garbage) << "this is not a model";
  s = QuantizeGguf(garbage, out, q4);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(garbage));
  std::remove(garbage.c_str());

  const std::string no_layers =
      WriteFileWith("no_layers.gguf", [](GgufWriter& w) {
        w.AddTensor("blk.0.attn_q.weight", {256, 2}, GgmlType::kF32,
                    std::string(256 * 2 * 4, '\0'));
      });
  s = QuantizeGguf(no_layers, out, q4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'llama.block_count'"));
  EXPECT_THAT(s.message(), HasSubstr(no_layers));
  std::remove(no_layers.c_str());

  // IQ2_XXS (ggml type 16): a GGUF type kvserve cannot dequantize.
  const std::string iq2 = WriteFileWith("iq2.gguf", [](GgufWriter& w) {
    w.AddUint32("llama.block_count", 1);
    w.AddTensor("blk.0.attn_norm.weight", {256}, GgmlType::kF32,
                std::string(256 * 4, '\0'));
    w.AddTensor("blk.0.attn_q.weight", {256, 2}, static_cast<GgmlType>(16),
                std::string(66 * 2, '\0'));
  });
  s = QuantizeGguf(iq2, out, q4);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("'blk.0.attn_q.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("IQ2_XXS"));
  EXPECT_THAT(s.message(), HasSubstr(iq2));
  std::remove(iq2.c_str());

  const std::string unwritable = "/nonexistent-dir/out.gguf";
  RandomModelOptions tiny = Small();
  tiny.hidden_dim = 256;
  tiny.n_layers = 1;
  const std::string in = MakeFile(tiny, "tiny.gguf");
  s = QuantizeGguf(in, unwritable, q4);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/out.gguf"));
  std::remove(in.c_str());

  EXPECT_FALSE(Exists(out));  // no failed run wrote anything
}

// The CLI is a thin layer over QuantizeGguf: exit 0 with a summary line, 1
// with the error, 2 on bad usage.
TEST_F(QuantizeTest, KvmodelQuantizeCommandLine) {
  const std::string kvmodel = testing::BinDir() + "/kvmodel";
  const std::string out = TempPath("cli.gguf");
  written_.push_back(out);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), kvmodel);
    absl::StatusOr<testing::CommandResult> r =
        testing::RunCommand(args, absl::Seconds(60));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(testing::CommandResult{});
  };
  testing::CommandResult r =
      run({"quantize", "--in=" + f32_path(), "--out=" + out, "--type=q8_0",
           "--mix=q4_k_m"});  // --mix wins
  EXPECT_EQ(r.status.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("q4_K x 13, q6_K x 3"));
  EXPECT_TRUE(ReadAll(out) == ReadAll(Quantized("q4_k_m")));

  r = run({"quantize", "--in=" + f32_path(), "--out=" + out, "--type=q7_k"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown type \"q7_k\""));
  r = run({"quantize", "--in=/no/such.gguf", "--out=" + out, "--type=q8_0"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("/no/such.gguf"));
  r = run({"quantize", "--in=" + f32_path(), "--out=" + out});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--type"));

  r = run({"--help"});
  EXPECT_EQ(r.status.code, 0);
  EXPECT_THAT(r.out, HasSubstr("kvmodel quantize"));
  EXPECT_THAT(r.out, HasSubstr(TypeMixNames()));
}

}  // namespace
}  // namespace kvserve

#include "core/model/loader.h"

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/model/fingerprint.h"
#include "core/model/gguf_vocab.h"
#include "core/model/llama2c.h"
#include "core/tokenizer/llama2c_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"

namespace kvserve {
namespace {

absl::Status GgufError(const GgufFile& g, const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrFormat("GGUF file %s: %s", g.name(), msg));
}

// A positive int key (`fallback` when absent and fallback > 0).
absl::StatusOr<int> PositiveInt(const GgufFile& g, const std::string& key,
                                int fallback, int64_t max) {
  if (g.Find(key) == nullptr) {
    if (fallback > 0) return fallback;
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s: required key '%s' is missing", g.name(), key));
  }
  absl::StatusOr<int64_t> v = g.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > max) {
    return GgufError(
        g, absl::StrFormat("key '%s' is %d (expected 1..%d)", key, *v, max));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<double> OptionalFloat(const GgufFile& g, const std::string& key,
                                     double fallback) {
  if (g.Find(key) == nullptr) return fallback;
  return g.GetFloat(key);
}

std::string Shape(const std::vector<int64_t>& dims) {
  return absl::StrFormat("[%s]", absl::StrJoin(dims, ", "));
}

std::string Stem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Reads tensors by name, checks their GGUF shape (ne order: row length
// first) and materializes them; also feeds the fingerprint.
class TensorLoader {
 public:
  TensorLoader(const GgufFile& g, WeightDTypeMode mode, ModelWeights& w,
               Fingerprint& fp)
      : g_(g), mode_(mode), w_(w), fp_(fp) {}

  bool Has(const std::string& name) const {
    return g_.FindTensor(name) != nullptr;
  }
  // Whether Load took the tensor (every tensor of the file must be taken).
  bool Used(const std::string& name) const { return used_.contains(name); }

  // `want` is the expected ne (cols first); `meaning` explains it in errors.
  absl::Status Load(const std::string& name, std::vector<int64_t> want,
                    const char* meaning, WeightTensor* out,
                    bool force_f32 = false) {
    const GgufTensorInfo* t = g_.FindTensor(name);
    if (t == nullptr) {
      return GgufError(g_, absl::StrFormat("tensor '%s' is missing", name));
    }
    used_.insert(name);
    std::vector<int64_t> dims = t->dims;
    while (dims.size() > want.size() && dims.back() == 1) dims.pop_back();
    if (dims != want) {
      return GgufError(
          g_, absl::StrFormat("tensor '%s' (info at byte offset %d) has "
                              "shape %s, expected %s %s",
                              name, t->info_offset, Shape(t->dims), Shape(want),
                              meaning));
    }
    StoredTensor src;
    src.name = name;
    src.type = t->type;
    src.cols = want[0];
    src.rows = want.size() > 1 ? want[1] : 1;
    src.data = t->data;
    src.n_bytes = t->n_bytes;
    fp_.Add(name);
    fp_.Add(&t->type, sizeof(t->type));
    fp_.Add(src.data, src.n_bytes);
    const quant::Type held = force_f32
                                 ? quant::Type::kF32
                                 : HeldType(src.type, want.size() == 1, mode_);
    absl::StatusOr<WeightTensor> wt = MaterializeTensor(src, held, w_);
    if (!wt.ok()) {
      return absl::Status(
          wt.status().code(),
          absl::StrFormat("GGUF file %s: %s (data at byte offset %d)",
                          g_.name(), wt.status().message(), t->file_offset));
    }
    *out = *wt;
    return absl::OkStatus();
  }

 private:
  const GgufFile& g_;
  const WeightDTypeMode mode_;
  ModelWeights& w_;
  Fingerprint& fp_;
  absl::flat_hash_set<std::string> used_;
};

// Rows [first, first + rows) of a matrix, as a view of its bytes.
WeightTensor RowRange(const WeightTensor& t, int64_t first, int64_t rows) {
  WeightTensor r = t;
  r.rows = rows;
  r.data = t.row(first);
  return r;
}

// What differs between the supported architectures, as data. Everything
// else (optional biases, fused or separate matrices, tied output, sliding
// window) follows from the file's tensors and keys.
struct Family {
  const char* arch;
  RopeStyle rope_style;  // llama.cpp's llama_model_rope_type for the arch
};
constexpr Family kFamilies[] = {
    {"llama", RopeStyle::kAdjacentPairs},
    {"qwen2", RopeStyle::kSplitHalves},
    {"phi3", RopeStyle::kSplitHalves},
};

// Keys that, present with a value other than `neutral` and `neutral2`
// (llama.cpp reads 0 as "unset" for some), describe a computation we do
// not do.
struct NeutralKey {
  const char* key;  // after "<arch>."
  double neutral;
  double neutral2;
  const char* what;
};
constexpr NeutralKey kNeutralKeys[] = {
    {"rope.scaling.factor", 1.0, 0.0, "RoPE scaling"},
    {"rope.scale_linear", 1.0, 0.0, "linear RoPE scaling"},
    {"rope.scaling.attn_factor", 1.0, 1.0, "a RoPE attention factor"},
    {"attention.logit_softcapping", 0.0, 0.0, "attention logit soft-capping"},
    {"final_logit_softcapping", 0.0, 0.0, "final logit soft-capping"},
};

// Tensors that name a feature we refuse, with what it is.
struct KnownUnsupportedTensor {
  const char* suffix;
  const char* what;
};
constexpr KnownUnsupportedTensor kUnsupportedTensors[] = {
    {"rope_factors_long.weight", "LongRoPE (rope_factors_long/short)"},
    {"rope_factors_short.weight", "LongRoPE (rope_factors_long/short)"},
    {"attn_output.bias", "an attention output bias"},
    {"attn_norm.bias", "LayerNorm biases"},
    {"ffn_norm.bias", "LayerNorm biases"},
    {"output_norm.bias", "LayerNorm biases"},
    {"ffn_up.bias", "feed-forward biases"},
    {"ffn_gate.bias", "feed-forward biases"},
    {"ffn_down.bias", "feed-forward biases"},
    {"attn_qkv.bias", "a fused QKV bias"},
    {"output.bias", "an output bias"},
    {"attn_q_norm.weight", "query/key norms"},
    {"attn_k_norm.weight", "query/key norms"},
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufWeights(
    const GgufFile& g, WeightDTypeMode mode) {
  if (g.Find("general.architecture") == nullptr) {
    return GgufError(g, "required key 'general.architecture' is missing");
  }
  absl::StatusOr<std::string> arch = g.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  const Family* family = nullptr;
  std::vector<std::string> supported;
  for (const Family& f : kFamilies) {
    supported.push_back(f.arch);
    if (*arch == f.arch) family = &f;
  }
  if (family == nullptr) {
    return absl::UnimplementedError(absl::StrFormat(
        "GGUF file %s: architecture '%s' (key 'general.architecture') is not "
        "supported (supported: %s)",
        g.name(), *arch, absl::StrJoin(supported, ", ")));
  }
  const std::string p = *arch + ".";
  ModelConfig c;
  c.rope_style = family->rope_style;
  struct {
    const char* key;
    int* out;
    int fallback;
    int64_t max;
  } ints[] = {
      {"context_length", &c.context_length, 0, 1 << 26},
      {"embedding_length", &c.dim, 0, 1 << 20},
      {"block_count", &c.n_layers, 0, 1 << 14},
      {"feed_forward_length", &c.hidden_dim, 0, 1 << 22},
      {"attention.head_count", &c.n_heads, 0, 1 << 14},
  };
  for (const auto& k : ints) {
    absl::StatusOr<int> v = PositiveInt(g, p + k.key, k.fallback, k.max);
    if (!v.ok()) return v.status();
    *k.out = *v;
  }
  absl::StatusOr<int> n_kv =
      PositiveInt(g, p + "attention.head_count_kv", c.n_heads, 1 << 14);
  if (!n_kv.ok()) return n_kv.status();
  c.n_kv_heads = *n_kv;
  if (c.dim % c.n_heads != 0) {
    return GgufError(g, absl::StrFormat("embedding_length %d is not a multiple "
                                        "of attention.head_count %d",
                                        c.dim, c.n_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  for (const char* key : {"attention.key_length", "attention.value_length"}) {
    absl::StatusOr<int> v = PositiveInt(g, p + key, c.head_dim, 1 << 16);
    if (!v.ok()) return v.status();
    if (*v != c.head_dim) {
      return absl::UnimplementedError(absl::StrFormat(
          "GGUF file %s: key '%s%s' is %d; only head_dim = embedding_length / "
          "head_count (%d) is supported",
          g.name(), p, key, *v, c.head_dim));
    }
  }
  absl::StatusOr<int> rope_dim =
      PositiveInt(g, p + "rope.dimension_count", c.head_dim, 1 << 16);
  if (!rope_dim.ok()) return rope_dim.status();
  c.rope_dim = *rope_dim;
  absl::StatusOr<double> eps =
      OptionalFloat(g, p + "attention.layer_norm_rms_epsilon", 1e-5);
  if (!eps.ok()) return eps.status();
  c.norm_eps = static_cast<float>(*eps);
  absl::StatusOr<double> theta = OptionalFloat(g, p + "rope.freq_base", 1e4);
  if (!theta.ok()) return theta.status();
  c.rope_theta = static_cast<float>(*theta);
  if (g.Find(p + "rope.scaling.type") != nullptr) {
    absl::StatusOr<std::string> type = g.GetString(p + "rope.scaling.type");
    if (!type.ok()) return type.status();
    if (*type != "none") {
      return absl::UnimplementedError(absl::StrFormat(
          "GGUF file %s: key '%srope.scaling.type' is \"%s\"; RoPE scaling is "
          "not supported (only rope_freqs factors)",
          g.name(), p, *type));
    }
  }
  for (const NeutralKey& k : kNeutralKeys) {
    if (g.Find(p + k.key) == nullptr) continue;
    absl::StatusOr<double> v = g.GetFloat(p + k.key);
    if (!v.ok()) return v.status();
    if (*v != k.neutral && *v != k.neutral2) {
      return absl::UnimplementedError(
          absl::StrFormat("GGUF file %s: key '%s%s' is %g; %s is not supported",
                          g.name(), p, k.key, *v, k.what));
    }
  }
  if (g.Find(p + "attention.sliding_window") != nullptr) {
    absl::StatusOr<int64_t> window = g.GetInt(p + "attention.sliding_window");
    if (!window.ok()) return window.status();
    if (*window < 0 || *window > (int64_t{1} << 30)) {
      return GgufError(g, absl::StrFormat("key '%sattention.sliding_window' is "
                                          "%d (expected 0..%d)",
                                          p, *window, 1 << 30));
    }
    c.sliding_window = static_cast<int>(*window);
  }
  if (g.Find(p + "expert_count") != nullptr) {
    absl::StatusOr<int64_t> experts = g.GetInt(p + "expert_count");
    if (!experts.ok()) return experts.status();
    if (*experts > 0) {
      return absl::UnimplementedError(absl::StrFormat(
          "GGUF file %s: key '%sexpert_count' is %d; mixture-of-experts "
          "models are not supported",
          g.name(), p, *experts));
    }
  }
  const GgufTensorInfo* embd = g.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return GgufError(g, "tensor 'token_embd.weight' is missing");
  }
  if (embd->dims.size() < 2 || embd->dims[1] > (1 << 24)) {
    return GgufError(g, absl::StrFormat("tensor 'token_embd.weight' (info at "
                                        "byte offset %d) has shape %s, "
                                        "expected [dim, vocab_size]",
                                        embd->info_offset, Shape(embd->dims)));
  }
  c.vocab_size = static_cast<int>(embd->dims[1]);
  if (g.Find(p + "vocab_size") != nullptr) {
    absl::StatusOr<int64_t> v = g.GetInt(p + "vocab_size");
    if (!v.ok()) return v.status();
    if (*v != c.vocab_size) {
      return GgufError(g, absl::StrFormat("key '%svocab_size' is %d but "
                                          "token_embd.weight has %d rows",
                                          p, *v, c.vocab_size));
    }
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return GgufError(g, std::string(s.message()));
  }

  auto w = std::make_unique<ModelWeights>();
  w->config = c;
  w->architecture = *arch;
  w->storage.push_back(g.file());
  if (g.Find("general.name") != nullptr && g.GetString("general.name").ok()) {
    w->name = *g.GetString("general.name");
  } else {
    w->name = Stem(g.name());
  }
  Fingerprint fp;
  fp.Add(absl::StrFormat("gguf:%s:%d,%d,%d,%d,%d,%d,%d,%d,%g,%g", *arch,
                         c.n_layers, c.dim, c.hidden_dim, c.n_heads,
                         c.n_kv_heads, c.vocab_size, c.context_length,
                         c.rope_dim, c.norm_eps, c.rope_theta));
  if (c.sliding_window > 0) fp.Add(absl::StrFormat("swa:%d", c.sliding_window));
  TensorLoader tl(g, mode, *w, fp);
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t hidden = c.hidden_dim, vocab = c.vocab_size;
  absl::Status s = tl.Load("token_embd.weight", {dim, vocab}, "[dim, vocab]",
                           &w->token_embd);
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers && s.ok(); ++l) {
    LayerWeights& lw = w->layers[l];
    auto n = [l](const char* t) {
      return absl::StrFormat("blk.%d.%s.weight", l, t);
    };
    auto bias = [l](const char* t) {
      return absl::StrFormat("blk.%d.%s.bias", l, t);
    };
    s.Update(tl.Load(n("attn_norm"), {dim}, "[dim]", &lw.attn_norm));
    if (tl.Has(n("attn_qkv"))) {
      // One matrix, rows q, then k, then v (phi3).
      s.Update(tl.Load(n("attn_qkv"), {dim, q_dim + 2 * kv_dim},
                       "[dim, (n_heads + 2*n_kv_heads)*head_dim]", &lw.wqkv));
      if (s.ok()) {
        lw.wq = RowRange(lw.wqkv, 0, q_dim);
        lw.wk = RowRange(lw.wqkv, q_dim, kv_dim);
        lw.wv = RowRange(lw.wqkv, q_dim + kv_dim, kv_dim);
      }
    } else {
      s.Update(tl.Load(n("attn_q"), {dim, q_dim}, "[dim, n_heads*head_dim]",
                       &lw.wq));
      s.Update(tl.Load(n("attn_k"), {dim, kv_dim}, "[dim, n_kv_heads*head_dim]",
                       &lw.wk));
      s.Update(tl.Load(n("attn_v"), {dim, kv_dim}, "[dim, n_kv_heads*head_dim]",
                       &lw.wv));
    }
    // Optional q/k/v biases (qwen2).
    for (auto [t, rows, out] : {std::tuple{"attn_q", q_dim, &lw.bq},
                                {"attn_k", kv_dim, &lw.bk},
                                {"attn_v", kv_dim, &lw.bv}}) {
      if (!tl.Has(bias(t))) continue;
      s.Update(tl.Load(bias(t), {rows}, "[rows of its matrix]", out,
                       /*force_f32=*/true));
    }
    s.Update(tl.Load(n("attn_output"), {q_dim, dim}, "[n_heads*head_dim, dim]",
                     &lw.wo));
    s.Update(tl.Load(n("ffn_norm"), {dim}, "[dim]", &lw.ffn_norm));
    // Loaded (and fingerprinted) in the order llama files always were:
    // gate, down, up.
    const bool stacked = !tl.Has(n("ffn_gate"));
    if (!stacked) {
      s.Update(tl.Load(n("ffn_gate"), {dim, hidden}, "[dim, hidden_dim]",
                       &lw.w_gate));
    }
    s.Update(
        tl.Load(n("ffn_down"), {hidden, dim}, "[hidden_dim, dim]", &lw.w_down));
    if (!stacked) {
      s.Update(
          tl.Load(n("ffn_up"), {dim, hidden}, "[dim, hidden_dim]", &lw.w_up));
    } else {
      // No ffn_gate: ffn_up holds gate, then up (phi3).
      s.Update(tl.Load(n("ffn_up"), {dim, 2 * hidden},
                       "[dim, 2*hidden_dim] (no ffn_gate: gate and up stacked)",
                       &lw.w_gate_up));
      if (s.ok()) {
        lw.w_gate = RowRange(lw.w_gate_up, 0, hidden);
        lw.w_up = RowRange(lw.w_gate_up, hidden, hidden);
      }
    }
  }
  s.Update(tl.Load("output_norm.weight", {dim}, "[dim]", &w->output_norm));
  if (!s.ok()) return s;
  if (g.FindTensor("output.weight") != nullptr) {
    s = tl.Load("output.weight", {dim, vocab}, "[dim, vocab]", &w->output);
    if (!s.ok()) return s;
  } else {
    w->output = w->token_embd;  // tied
  }
  if (g.FindTensor("rope_freqs.weight") != nullptr) {
    WeightTensor freqs;
    s = tl.Load("rope_freqs.weight", {c.rotary_dim() / 2}, "[rotary_dim / 2]",
                &freqs, /*force_f32=*/true);
    if (!s.ok()) return s;
    w->rope_freq_factors.assign(freqs.f32(), freqs.f32() + freqs.cols);
    for (float f : w->rope_freq_factors) {
      if (!(f > 0)) {
        return GgufError(g,
                         "tensor 'rope_freqs.weight' holds a factor that "
                         "is not positive");
      }
    }
  }
  // Every tensor must be one the forward pass reads: an unknown one means a
  // computation we would silently skip.
  for (const GgufTensorInfo& t : g.tensors()) {
    if (tl.Used(t.name)) continue;
    for (const KnownUnsupportedTensor& u : kUnsupportedTensors) {
      if (absl::EndsWith(t.name, u.suffix)) {
        return absl::UnimplementedError(absl::StrFormat(
            "GGUF file %s: tensor '%s' (architecture %s): %s is not supported",
            g.name(), t.name, *arch, u.what));
      }
    }
    return absl::UnimplementedError(absl::StrFormat(
        "GGUF file %s: tensor '%s' (info at byte offset %d) is not one the "
        "%s forward pass reads; the model is not supported",
        g.name(), t.name, t.info_offset, *arch));
  }
  w->fingerprint = fp.Hex();
  return w;
}

absl::StatusOr<LoadedModel> LoadModelFromFile(
    std::shared_ptr<const MappedFile> file, const LoadOptions& options) {
  absl::StatusOr<WeightDTypeMode> mode =
      ParseWeightDTypeMode(options.weight_dtype);
  if (!mode.ok()) return mode.status();
  LoadedModel m;
  Vocab vocab;
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) {
    if (!options.tokenizer_path.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model file %s is GGUF, which carries its own tokenizer; do not "
          "pass a tokenizer file (%s)",
          file->name(), options.tokenizer_path));
    }
    absl::StatusOr<GgufFile> g = GgufFile::Parse(file);
    if (!g.ok()) return g.status();
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        LoadGgufWeights(*g, *mode);
    if (!w.ok()) return w.status();
    m.weights = std::move(*w);
    absl::StatusOr<Vocab> v = VocabFromGguf(*g);
    if (!v.ok()) return v.status();
    vocab = std::move(*v);
    if (g->Find("tokenizer.chat_template") != nullptr) {
      absl::StatusOr<std::string> t = g->GetString("tokenizer.chat_template");
      if (!t.ok()) return t.status();
      m.chat_template = std::move(*t);
    }
  } else {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        LoadLlama2cWeights(file, *mode);
    if (!w.ok()) return w.status();
    m.weights = std::move(*w);
    if (options.tokenizer_path.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model file %s is a llama2.c checkpoint, which needs its tokenizer "
          "file (--tokenizer=PATH, e.g. tokenizer.bin)",
          file->name()));
    }
    absl::StatusOr<Vocab> v =
        ReadLlama2cVocab(options.tokenizer_path, m.weights->config.vocab_size);
    if (!v.ok()) return v.status();
    vocab = std::move(*v);
  }
  if (vocab.size() != m.weights->config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model file %s: the tokenizer has %d tokens but the weights have "
        "vocab_size %d",
        file->name(), vocab.size(), m.weights->config.vocab_size));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(vocab);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrFormat("model file %s: %s", file->name(),
                                        t.status().message()));
  }
  m.tokenizer = std::move(*t);
  return m;
}

absl::StatusOr<LoadedModel> LoadModel(const LoadOptions& options) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> file =
      options.no_mmap ? MappedFile::Read(options.model_path)
                      : MappedFile::Open(options.model_path);
  if (!file.ok()) return file.status();
  return LoadModelFromFile(std::move(*file), options);
}

}  // namespace kvserve

#include "core/model/llama2c.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/model/fingerprint.h"

namespace kvserve {
namespace {

std::string Stem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cWeights(
    std::shared_ptr<const MappedFile> file, WeightDTypeMode mode) {
  const std::string& name = file->name();
  constexpr int64_t kHeaderBytes = 7 * 4;
  if (file->size() < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model file %s is neither GGUF (no \"GGUF\" magic) nor a llama2.c "
        "checkpoint (%d bytes, shorter than the 28-byte header)",
        name, file->size()));
  }
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof(h));
  const char* field_names[7] = {"dim",     "hidden_dim", "n_layers",
                                "n_heads", "n_kv_heads", "vocab_size",
                                "seq_len"};
  // Limits keep every size computation below far inside int64.
  const int64_t limits[7] = {1 << 16, 1 << 18, 1 << 12, 1 << 12,
                             1 << 12, 1 << 22, 1 << 24};
  for (int i = 0; i < 7; ++i) {
    int64_t v = i == 5 ? (h[i] < 0 ? -int64_t{h[i]} : h[i]) : h[i];
    if (v <= 0 || v > limits[i]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model file %s is neither GGUF (no \"GGUF\" magic) nor a plausible "
          "llama2.c checkpoint: header field %s (byte offset %d) is %d",
          name, field_names[i], 4 * i, h[i]));
    }
  }
  ModelConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  const bool shared = h[5] > 0;
  c.vocab_size = shared ? h[5] : -h[5];
  c.context_length = h[6];
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_dim = 0;
  if (c.dim % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c checkpoint %s: dim %d is not a multiple of n_heads %d", name,
        c.dim, c.n_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("llama2.c checkpoint %s: %s", name, s.message()));
  }

  const int64_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t vocab = c.vocab_size;
  // Offsets (in floats, after the header) of each array, in file order.
  int64_t off = 0;
  auto take = [&](int64_t n) {
    int64_t at = off;
    off += n;
    return at;
  };
  const int64_t tok = take(vocab * dim);
  const int64_t rms_att = take(L * dim);
  const int64_t wq = take(L * q_dim * dim);
  const int64_t wk = take(L * kv_dim * dim);
  const int64_t wv = take(L * kv_dim * dim);
  const int64_t wo = take(L * dim * q_dim);
  const int64_t rms_ffn = take(L * dim);
  const int64_t w1 = take(L * hidden * dim);
  const int64_t w2 = take(L * dim * hidden);
  const int64_t w3 = take(L * hidden * dim);
  const int64_t rms_final = take(dim);
  take(int64_t{c.context_length} * c.head_dim / 2);  // freq_cis_real
  take(int64_t{c.context_length} * c.head_dim / 2);  // freq_cis_imag
  const int64_t wcls = shared ? tok : take(vocab * dim);
  const int64_t expected = kHeaderBytes + 4 * off;
  if (static_cast<int64_t>(file->size()) != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c checkpoint %s: header (dim %d, hidden_dim %d, n_layers %d, "
        "n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d) implies %d "
        "bytes but the file has %d",
        name, h[0], h[1], h[2], h[3], h[4], h[5], h[6], expected,
        file->size()));
  }

  auto w = std::make_unique<ModelWeights>();
  w->config = c;
  w->name = Stem(name);
  w->storage.push_back(file);
  Fingerprint fp;
  fp.Add(absl::StrFormat("llama2c:%d,%d,%d,%d,%d,%d,%d", h[0], h[1], h[2], h[3],
                         h[4], h[5], h[6]));
  const uint8_t* base = file->data() + kHeaderBytes;
  auto load = [&](const char* what, int64_t at, int64_t rows, int64_t cols,
                  WeightTensor* out) -> absl::Status {
    StoredTensor src;
    src.name = what;
    src.type = static_cast<uint32_t>(GgmlType::kF32);
    src.rows = rows;
    src.cols = cols;
    src.data = base + 4 * at;
    src.n_bytes = static_cast<uint64_t>(rows * cols * 4);
    fp.Add(src.data, src.n_bytes);
    absl::StatusOr<WeightTensor> t =
        MaterializeTensor(src, HeldType(src.type, rows == 1, mode), *w);
    if (!t.ok()) {
      return absl::Status(
          t.status().code(),
          absl::StrFormat("llama2.c checkpoint %s: %s (data at byte offset %d)",
                          name, t.status().message(), kHeaderBytes + 4 * at));
    }
    *out = *t;
    return absl::OkStatus();
  };
  absl::Status s = load("token_embedding", tok, vocab, dim, &w->token_embd);
  w->layers.resize(L);
  for (int64_t l = 0; l < L && s.ok(); ++l) {
    LayerWeights& lw = w->layers[l];
    s.Update(load("rms_att", rms_att + l * dim, 1, dim, &lw.attn_norm));
    s.Update(load("wq", wq + l * q_dim * dim, q_dim, dim, &lw.wq));
    s.Update(load("wk", wk + l * kv_dim * dim, kv_dim, dim, &lw.wk));
    s.Update(load("wv", wv + l * kv_dim * dim, kv_dim, dim, &lw.wv));
    s.Update(load("wo", wo + l * dim * q_dim, dim, q_dim, &lw.wo));
    s.Update(load("rms_ffn", rms_ffn + l * dim, 1, dim, &lw.ffn_norm));
    s.Update(load("w1", w1 + l * hidden * dim, hidden, dim, &lw.w_gate));
    s.Update(load("w2", w2 + l * dim * hidden, dim, hidden, &lw.w_down));
    s.Update(load("w3", w3 + l * hidden * dim, hidden, dim, &lw.w_up));
  }
  s.Update(load("rms_final", rms_final, 1, dim, &w->output_norm));
  if (!s.ok()) return s;
  if (shared) {
    w->output = w->token_embd;
  } else {
    s = load("wcls", wcls, vocab, dim, &w->output);
    if (!s.ok()) return s;
  }
  w->fingerprint = fp.Hex();
  return w;
}

}  // namespace kvserve

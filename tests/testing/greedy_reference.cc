#include "tests/testing/greedy_reference.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"
#include "core/kv/kv_rows.h"
#include "core/quant/quant.h"
#include "nlohmann/json.hpp"

namespace kvserve::testing {

std::optional<ReferenceRun> ReadGoldenRun(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("results") || j["results"].empty()) {
    return std::nullopt;
  }
  const nlohmann::json& r = j["results"][0];
  ReferenceRun run;
  run.prompt = r.at("prompt").get<std::vector<int32_t>>();
  run.tokens = r.at("tokens").get<std::vector<int32_t>>();
  run.gap = r.at("gap").get<std::vector<float>>();
  for (const nlohmann::json& step : r.at("top5")) {
    std::vector<std::pair<int32_t, float>> top;
    for (const nlohmann::json& e : step) {
      top.emplace_back(e.at(0).get<int32_t>(), e.at(1).get<float>());
    }
    run.top5.push_back(std::move(top));
  }
  if (run.top5.size() != run.tokens.size() ||
      run.gap.size() != run.tokens.size()) {
    return std::nullopt;
  }
  return run;
}

OurRun RunGreedy(Model& model, BlockPool* pool,
                 const std::vector<int32_t>& prompt, int n) {
  OurRun out;
  BlockTable kv(pool);
  std::vector<int32_t> tokens = prompt;
  int64_t done = 0;
  while (static_cast<int>(out.tokens.size()) < n) {
    const int64_t end = tokens.size();
    if (absl::Status s = kv.Extend(end); !s.ok()) {
      out.status = s;
      return out;
    }
    const SeqChunk chunk{
        &kv, done, absl::MakeConstSpan(tokens).subspan(done, end - done), true};
    absl::StatusOr<absl::Span<const float>> logits = model.Forward({chunk});
    if (!logits.ok()) {
      out.status = logits.status();
      return out;
    }
    out.logits.emplace_back(logits->begin(), logits->end());
    const int32_t next =
        std::max_element(logits->begin(), logits->end()) - logits->begin();
    out.tokens.push_back(next);
    tokens.push_back(next);
    done = end;
  }
  return out;
}

namespace {

// A matrix or vector in double, dequantized from its stored type.
struct DoubleMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;  // [rows][cols]

  explicit DoubleMatrix(const WeightTensor& t) : rows(t.rows), cols(t.cols) {
    v.resize(rows * cols);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      quant::Info(t.type)->dequantize(t.row(r), row.data(), cols);
      std::copy(row.begin(), row.end(), v.begin() + r * cols);
    }
  }
  std::vector<double> Times(const std::vector<double>& x) const {
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double* w = &v[r * cols];
      for (int64_t c = 0; c < cols; ++c) y[r] += w[c] * x[c];
    }
    return y;
  }
};

std::vector<double> RmsNormRef(const std::vector<double>& x,
                               const DoubleMatrix& w, double eps) {
  double ss = 0;
  for (double e : x) ss += e * e;
  const double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = w.v[i] * x[i] * scale;
  return out;
}

void AddBias(const WeightTensor& b, std::vector<double>& x) {
  if (b.data == nullptr) return;
  for (size_t i = 0; i < x.size(); ++i) x[i] += b.f32()[i];
}

// Rotates the first rotary_dim dims of each of n_heads heads of x at `pos`.
void RopeRef(const ModelWeights& w, int n_heads, int64_t pos,
             std::vector<double>& x) {
  const ModelConfig& c = w.config;
  const int rd = c.rotary_dim(), half = rd / 2;
  for (int h = 0; h < n_heads; ++h) {
    double* head = &x[int64_t{h} * c.head_dim];
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(double{c.rope_theta}, -2.0 * i / rd);
      if (!w.rope_freq_factors.empty()) freq /= w.rope_freq_factors[i];
      const double angle = pos * freq;
      // llama.cpp's NORM pairs (2i, 2i+1); NEOX pairs (i, i + rd/2).
      double& a =
          c.rope_style == RopeStyle::kSplitHalves ? head[i] : head[2 * i];
      double& b = c.rope_style == RopeStyle::kSplitHalves ? head[i + half]
                                                          : head[2 * i + 1];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = a0 * std::sin(angle) + b0 * std::cos(angle);
    }
  }
}

// Rows of `n` elements of x as a KV cache of `dtype` keeps them.
void AsStored(DType dtype, int n, std::vector<double>& x) {
  if (dtype == DType::kF32) return;
  std::vector<float> row(n), back(n);
  std::vector<char> stored(DTypeRowBytes(dtype, n));
  for (size_t at = 0; at < x.size(); at += n) {
    for (int i = 0; i < n; ++i) row[i] = static_cast<float>(x[at + i]);
    StoreKvRow(dtype, row.data(), n, stored.data());
    LoadKvRow(dtype, stored.data(), n, back.data());
    for (int i = 0; i < n; ++i) x[at + i] = back[i];
  }
}

}  // namespace

std::vector<std::vector<double>> ReferenceLogits(
    const ModelWeights& w, const std::vector<int32_t>& tokens, DType kv_dtype) {
  const ModelConfig& c = w.config;
  const int T = tokens.size(), hd = c.head_dim;
  std::vector<std::vector<double>> x(T);
  {
    const DoubleMatrix embd(w.token_embd);
    for (int t = 0; t < T; ++t) {
      x[t].assign(embd.v.begin() + int64_t{tokens[t]} * c.dim,
                  embd.v.begin() + int64_t{tokens[t] + 1} * c.dim);
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    const DoubleMatrix attn_norm(lw.attn_norm), wq(lw.wq), wk(lw.wk), wv(lw.wv),
        wo(lw.wo), ffn_norm(lw.ffn_norm), w_gate(lw.w_gate), w_up(lw.w_up),
        w_down(lw.w_down);
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const std::vector<double> xb = RmsNormRef(x[t], attn_norm, c.norm_eps);
      q[t] = wq.Times(xb);
      k[t] = wk.Times(xb);
      v[t] = wv.Times(xb);
      AddBias(lw.bq, q[t]);
      AddBias(lw.bk, k[t]);
      AddBias(lw.bv, v[t]);
      RopeRef(w, c.n_heads, t, q[t]);
      RopeRef(w, c.n_kv_heads, t, k[t]);
      AsStored(kv_dtype, hd, k[t]);
      AsStored(kv_dtype, hd, v[t]);
    }
    for (int t = 0; t < T; ++t) {
      // Positions t - window < u <= t.
      const int first =
          c.sliding_window > 0 ? std::max(0, t - c.sliding_window + 1) : 0;
      std::vector<double> att(c.q_dim(), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / c.kv_mul();
        std::vector<double> s(t + 1 - first);
        double mx = -1e300;
        for (int u = first; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) {
            dot += q[t][h * hd + i] * k[u][g * hd + i];
          }
          s[u - first] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[u - first]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int u = first; u <= t; ++u) {
          for (int i = 0; i < hd; ++i) {
            att[h * hd + i] += s[u - first] / sum * v[u][g * hd + i];
          }
        }
      }
      const std::vector<double> o = wo.Times(att);
      for (int i = 0; i < c.dim; ++i) x[t][i] += o[i];
      const std::vector<double> xb = RmsNormRef(x[t], ffn_norm, c.norm_eps);
      std::vector<double> gate = w_gate.Times(xb);
      const std::vector<double> up = w_up.Times(xb);
      for (int i = 0; i < c.hidden_dim; ++i) {
        gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      }
      const std::vector<double> down = w_down.Times(gate);
      for (int i = 0; i < c.dim; ++i) x[t][i] += down[i];
    }
  }
  const DoubleMatrix output(w.output), output_norm(w.output_norm);
  std::vector<std::vector<double>> logits(T);
  for (int t = 0; t < T; ++t) {
    logits[t] = output.Times(RmsNormRef(x[t], output_norm, c.norm_eps));
  }
  return logits;
}

double RelativeError(absl::Span<const float> got,
                     const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

ReferenceRun AsReference(const std::vector<int32_t>& prompt,
                         const OurRun& ours) {
  ReferenceRun ref;
  ref.prompt = prompt;
  ref.tokens = ours.tokens;
  for (const std::vector<float>& l : ours.logits) {
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
    std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::vector<std::pair<int32_t, float>> top;
    for (int i = 0; i < 5; ++i) top.emplace_back(ids[i], l[ids[i]]);
    ref.gap.push_back(top[0].second - top[1].second);
    ref.top5.push_back(std::move(top));
  }
  return ref;
}

::testing::AssertionResult AgreesWithReference(const ReferenceRun& ref,
                                               const OurRun& ours,
                                               double logit_tol,
                                               double near_tie, int* compared) {
  if (!ours.status.ok()) {
    return ::testing::AssertionFailure() << "our run failed: " << ours.status;
  }
  const size_t n = std::min(ref.tokens.size(), ours.tokens.size());
  double worst = 0;
  size_t step = 0;
  for (; step < n; ++step) {
    const std::vector<float>& l = ours.logits[step];
    const float our_max = *std::max_element(l.begin(), l.end());
    const auto& top = ref.top5[step];
    for (const auto& [id, logit] : top) {
      const double d = std::abs((l[id] - our_max) - (logit - top[0].second));
      worst = std::max(worst, d);
      if (!(d <= logit_tol)) {
        return ::testing::AssertionFailure() << absl::StrFormat(
                   "step %d: token %d's logit relative to the top-1 is %.4f, "
                   "the reference's %.4f (|diff| %.4f > %.4f)",
                   step, id, l[id] - our_max, logit - top[0].second, d,
                   logit_tol);
      }
    }
    if (ours.tokens[step] != ref.tokens[step]) {
      if (ref.gap[step] < near_tie) break;  // a near tie: stop comparing
      return ::testing::AssertionFailure() << absl::StrFormat(
                 "step %d: token %d, the reference's %d (its top1-top2 gap "
                 "%.3f is not a near tie)",
                 step, ours.tokens[step], ref.tokens[step], ref.gap[step]);
    }
  }
  if (compared != nullptr) *compared = step;
  return ::testing::AssertionSuccess() << absl::StrFormat(
             "%d steps compared, worst logit diff %.4g", step, worst);
}

}  // namespace kvserve::testing

// sampler_bench: what logit_bias and the repetition penalties add to a
// decode step on a 102,400-token vocabulary, against the step itself.
//
//   sampler_bench [--json]
//
// The penalties' row times what Sampler::Sample adds when a request has
// them (64 biased tokens; presence and frequency penalties over 1,000
// generated tokens; repeat_penalty over the last 64 of a 2,000-token prompt
// and what followed): a copy of the logits and the changes at the tokens
// biased or seen. The draws (greedy, and temperature 0.8 with top_p 0.95)
// are timed for scale. Every row is compared with the floor of a decode
// step at the 1B shape (16 layers, dim 2048, 32 / 8 heads, ffn 8192, this
// vocabulary; Q4_K_M at 4.84 bits per weight with its scales): its weight
// bytes over this machine's read bandwidth, measured in the same run. A real
// step is slower than its floor, so the ratio printed is an upper bound of the
// share the penalties take.
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "bench/util/bench_util.h"
#include "core/sampling/logit_penalties.h"
#include "core/sampling/sampler.h"

namespace kvserve {
namespace {

constexpr int kVocab = 102400;

int Main(int argc, char** argv) {
  const bool json = bench::HasFlag(argc, argv, "--json");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> logits(8, std::vector<float>(kVocab));
  for (auto& row : logits) {
    for (float& l : row) l = normal(rng);
  }
  std::vector<int32_t> prompt(2000);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  for (int32_t& t : prompt) t = token(rng);

  PenaltyOptions penalties{.presence_penalty = 0.5f,
                           .frequency_penalty = 0.5f,
                           .repeat_penalty = 1.1f,
                           .repeat_last_n = 64};
  for (int i = 0; i < 64; ++i) {
    penalties.logit_bias.emplace_back(i * 1000 + 7, i % 2 ? 5.0f : -100.0f);
  }
  bench::BandwidthProbe probe;
  const double gbps = probe.MeasureGbps();
  const double floor_s = bench::OneBQ4KMStepBytes(kVocab) / (gbps * 1e9);
  if (!json) {
    std::printf(
        "read bandwidth %.1f GB/s; 1B Q4_K_M decode step floor %.2f "
        "ms (%.0f MB)\n",
        gbps, floor_s * 1e3, bench::OneBQ4KMStepBytes(kVocab) / 1e6);
    std::printf("%-34s %12s %14s\n", "per step", "us", "of the floor");
  }
  auto print = [&](const char* name, double seconds) {
    if (json) {
      std::printf("%s\n", bench::JsonLine()
                              .Add("case", name)
                              .Add("seconds", seconds)
                              .Add("decode_floor_s", floor_s)
                              .Add("over_floor", seconds / floor_s)
                              .str()
                              .c_str());
    } else {
      std::printf("%-34s %12.1f %13.2f%%\n", name, seconds * 1e6,
                  100 * seconds / floor_s);
    }
  };
  // What Sampler::Sample adds with penalties: a copy of the row and the
  // changes at the tokens biased or seen.
  LogitPenalties state(penalties);
  state.AddContext(prompt);
  for (int i = 0; i < 1000; ++i) state.AddGenerated(token(rng) % 5000);
  std::vector<float> scratch;
  const bench::Timing added = bench::TimeCalls(
      [&](int64_t i) {
        const std::vector<float>& row = logits[i % logits.size()];
        scratch.assign(row.begin(), row.end());
        state.Apply(absl::MakeSpan(scratch));
      },
      200, 0.5);
  print("penalties and bias (copy + apply)", added.median_s);
  // The draws themselves, for scale.
  for (const auto& [name, options] :
       {std::pair<const char*, SamplingOptions>{"greedy draw", {}},
        {"T=0.8 top_p=0.95 draw",
         {.temperature = 0.8f, .top_p = 0.95f, .seed = 1}}}) {
    Sampler sampler(options);
    const bench::Timing t = bench::TimeCalls(
        [&](int64_t i) { sampler.Sample(logits[i % logits.size()]); }, 50, 0.5);
    print(name, t.median_s);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }

#include "tests/testing/greedy_reference.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"
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

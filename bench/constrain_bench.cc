// constrain_bench: what a grammar's token mask costs per decode step on a
// 102,400-token vocabulary, against the step itself.
//
//   constrain_bench [--json] [--grammar=FILE]
//
// The vocabulary is DeepSeek LLM's (SharedDir()/vocab), as byte strings in
// a TokenTrie (built once per model, timed). The grammar is RFC 8259 JSON in
// GBNF (json_grammar.h; compile time printed), or the GBNF of --grammar
// (llama.cpp's grammars/json.gbnf, to compare with its grammar sampler on
// the same grammar, vocabulary and document). A JSON document of a few hundred
// tokens, tokenized with the same vocabulary, is decoded as a model would emit
// it: before each token the mask of the current state is computed (and must
// allow that token), then the automaton takes its bytes. The walk runs on a
// fresh automaton (cold: every state and transition is new) and again on
// the same one (warm: transitions are cached, the masks are not), then as
// the engine runs it (a Constraint, which keeps each state's mask). Each is
// compared with the floor of a decode step at the 1B shape with this
// vocabulary (Q4_K_M weight bytes over this machine's read bandwidth,
// measured in the same run); the issue's goal is 5% of a step. Last, the
// compile time of each real-world schema of SharedDir()/jsonschema (JSON
// Schema to a grammar and its automaton's start), against the issue's
// goal of 50 ms for a typical one; and what reading a reply's tool calls
// as it streams costs per token (ReplyStream), for replies of growing
// length.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/util/bench_util.h"
#include "bench/util/serve_util.h"
#include "core/constrain/constraint.h"
#include "core/constrain/grammar.h"
#include "core/constrain/grammar_automaton.h"
#include "core/constrain/json_grammar.h"
#include "core/constrain/json_schema.h"
#include "core/constrain/token_trie.h"
#include "core/constrain/tool_calls.h"
#include "core/engine/sequence.h"
#include "core/model/gguf.h"
#include "core/model/gguf_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"

namespace kvserve {
namespace {

constexpr char kDocument[] = R"({
  "name": "Ada Lovelace",
  "born": 1815,
  "languages": ["English", "French", "Fran\u00e7ais"],
  "notes": "Wrote the first published algorithm for Babbage's Analytical Engine; \"poetical science\".",
  "children": [
    {"name": "Byron", "born": 1836, "alive": false},
    {"name": "Annabella", "born": 1837, "alive": false},
    {"name": "Ralph", "born": 1839, "alive": false}
  ],
  "scores": [0.5, -1.25e3, 42, 3.14159],
  "address": {"city": "London", "street": "St James's Square", "number": 12},
  "tags": ["mathematics", "computing", "poetry", "Zürich", "東京"],
  "metadata": null
})";

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct WalkTimes {
  std::vector<double> mask_s;  // per token
  bool ok = true;
};

WalkTimes Walk(constrain::GrammarAutomaton& automaton,
               const constrain::TokenTrie& trie,
               const std::vector<int32_t>& tokens,
               const std::vector<std::string>& bytes) {
  WalkTimes out;
  std::vector<uint64_t> mask;
  int32_t state = automaton.start();
  for (int32_t id : tokens) {
    const auto start = std::chrono::steady_clock::now();
    trie.Allowed(automaton, state, mask);
    out.mask_s.push_back(Seconds(std::chrono::steady_clock::now() - start));
    if (!((mask[id >> 6] >> (id & 63)) & 1)) {
      std::fprintf(stderr, "constrain_bench: token %d (\"%s\") not allowed\n",
                   id, bytes[id].c_str());
      out.ok = false;
      return out;
    }
    state = automaton.Walk(state, bytes[id]);
  }
  out.ok = state >= 0 && automaton.CanEnd(state);
  return out;
}

// A batch's sampling step as the engine runs it (SampleAll over the
// step's Sequences): each of kBatch sequences draws its next token at
// temperature 1 from its own random logits (as a random-weight model's;
// one that completes starts again), among the tokens its grammar allows
// when it has one. Timed: the whole step's draws, masks included, on 1 or
// all threads, with one matcher per sequence (nothing shared: a
// MatcherCache each) or one shared, and without a grammar for comparison.
constexpr int kBatch = 16;
constexpr int kBatchSteps = 100;
struct BatchCase {
  const char* name;
  enum { kNone, kEach, kShared } grammar;
  int threads;
};
std::vector<double> RunBatch(
    const std::shared_ptr<const constrain::ConstraintVocabulary>& vocab,
    const std::shared_ptr<const constrain::Grammar>& grammar,
    const BatchCase& c) {
  const int32_t n_vocab = vocab->vocab_size();
  std::vector<std::unique_ptr<constrain::MatcherCache>> caches;
  for (int b = 0; b < (c.grammar == BatchCase::kEach ? kBatch : 1); ++b) {
    caches.push_back(std::make_unique<constrain::MatcherCache>(vocab));
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<std::vector<float>> logits(kBatch);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto start = [&](int b) {
    GenerateParams p;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = b + 1;
    if (c.grammar != BatchCase::kNone) p.grammar = grammar;
    seqs[b] = std::make_unique<Sequence>(
        std::make_shared<GenerateCall>(std::move(p), nullptr),
        sessions[b].get(), absl::Now(), caches[b % caches.size()].get());
  };
  for (int b = 0; b < kBatch; ++b) {
    sessions.push_back(std::make_unique<Session>("", nullptr));
    seqs.emplace_back();
    start(b);
    for (int32_t i = 0; i < n_vocab; ++i) logits[b].push_back(normal(rng));
  }
  std::vector<Sequence*> batch;
  std::vector<absl::Span<const float>> rows;
  for (int b = 0; b < kBatch; ++b) rows.push_back(logits[b]);
  std::vector<double> out;
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(c.threads);
  for (int step = 0; step < kBatchSteps; ++step) {
    batch.clear();
    for (auto& seq : seqs) batch.push_back(seq.get());
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<absl::StatusOr<int32_t>> tokens = SampleAll(batch, rows);
    out.push_back(Seconds(std::chrono::steady_clock::now() - t0));
    for (int b = 0; b < kBatch; ++b) {
      if (!tokens[b].ok()) {
        std::fprintf(stderr, "constrain_bench: %s\n",
                     tokens[b].status().ToString().c_str());
        out.clear();
        break;
      }
      if (seqs[b]->Complete()) start(b);
    }
  }
  omp_set_num_threads(threads_before);
  return out;
}

int Main(int argc, char** argv) {
  const bool json = bench::HasFlag(argc, argv, "--json");
  const std::string path =
      std::string(KVSERVE_SHARED_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf";
  absl::StatusOr<GgufFile> g = GgufFile::Open(path);
  absl::StatusOr<Vocab> v =
      g.ok() ? VocabFromGguf(*g) : absl::StatusOr<Vocab>(g.status());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      v.ok() ? CreateTokenizer(*v)
             : absl::StatusOr<std::unique_ptr<Tokenizer>>(v.status());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "constrain_bench: %s\n",
                 tokenizer.status().ToString().c_str());
    return 1;
  }
  const Tokenizer& tok = **tokenizer;
  std::vector<std::string> bytes;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bytes.push_back(tok.IsEndOfGeneration(id) ? "" : tok.DecodeToken(-1, id));
  }
  auto start = std::chrono::steady_clock::now();
  const constrain::TokenTrie trie(bytes);
  const double trie_s = Seconds(std::chrono::steady_clock::now() - start);

  std::string gbnf = constrain::JsonObjectGbnf();
  if (const std::string file = bench::StringFlag(argc, argv, "--grammar", "");
      !file.empty()) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "constrain_bench: cannot read %s\n", file.c_str());
      return 1;
    }
    gbnf = text.str();
  }
  start = std::chrono::steady_clock::now();
  absl::StatusOr<constrain::Grammar> grammar = constrain::ParseGbnf(gbnf);
  const double compile_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!grammar.ok()) {
    std::fprintf(stderr, "constrain_bench: %s\n",
                 grammar.status().ToString().c_str());
    return 1;
  }
  auto shared = std::make_shared<const constrain::Grammar>(*std::move(grammar));
  const std::vector<int32_t> tokens = tok.Encode(kDocument, {.add_bos = false});

  bench::BandwidthProbe probe;
  const double gbps = probe.MeasureGbps();
  const double floor_s =
      bench::OneBQ4KMStepBytes(tok.vocab_size()) / (gbps * 1e9);
  auto vocab = std::make_shared<const constrain::ConstraintVocabulary>(tok);
  constrain::GrammarAutomaton automaton(shared);
  const WalkTimes cold = Walk(automaton, trie, tokens, bytes);
  const WalkTimes warm = Walk(automaton, trie, tokens, bytes);
  // What the engine pays: a sequence's Constraint, whose masks are kept per
  // state (a string's content, a list's next item recur).
  WalkTimes engine;
  {
    constrain::Constraint c(
        std::make_shared<constrain::GrammarMatcher>(shared, vocab));
    for (int32_t id : tokens) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<const std::vector<uint64_t>*> mask = c.Allowed();
      engine.mask_s.push_back(Seconds(std::chrono::steady_clock::now() - t0));
      if (!mask.ok() || !c.Accept(id).ok()) {
        engine.ok = false;
        break;
      }
    }
  }
  if (!cold.ok || !warm.ok || !engine.ok) return 1;

  if (!json) {
    std::printf(
        "vocabulary %d tokens (%lld trie nodes, built in %.0f ms); JSON "
        "grammar compiled in %.2f ms; a %zu-token document; read bandwidth "
        "%.1f GB/s, 1B Q4_K_M decode step floor %.2f ms\n",
        tok.vocab_size(), static_cast<long long>(trie.num_nodes()),
        trie_s * 1e3, compile_s * 1e3, tokens.size(), gbps, floor_s * 1e3);
    std::printf("%-22s %10s %10s %10s %10s %14s\n", "mask per token", "p50 us",
                "p90 us", "max us", "mean us", "mean / floor");
  }
  for (const auto& [name, w] :
       {std::pair<const char*, const WalkTimes*>{"cold automaton", &cold},
        {"warm automaton", &warm},
        {"engine (masks kept)", &engine}}) {
    std::vector<double> t = w->mask_s;
    double sum = 0;
    for (double x : t) sum += x;
    const double mean = sum / t.size();
    const double p50 = bench::Quantile(t, 0.5), p90 = bench::Quantile(t, 0.9);
    const double max = *std::max_element(t.begin(), t.end());
    if (json) {
      std::printf("%s\n", bench::JsonLine()
                              .Add("case", name)
                              .Add("tokens", static_cast<int64_t>(t.size()))
                              .Add("p50_s", p50)
                              .Add("p90_s", p90)
                              .Add("max_s", max)
                              .Add("mean_s", mean)
                              .Add("decode_floor_s", floor_s)
                              .Add("mean_over_floor", mean / floor_s)
                              .Add("compile_s", compile_s)
                              .Add("trie_s", trie_s)
                              .str()
                              .c_str());
    } else {
      std::printf("%-22s %10.1f %10.1f %10.1f %10.1f %13.2f%%\n", name,
                  p50 * 1e6, p90 * 1e6, max * 1e6, mean * 1e6,
                  100 * mean / floor_s);
    }
  }
  // A batch's step: every sequence's mask.
  if (!json) {
    std::printf(
        "\n%d sequences in one batch drawing at temperature 1 (%d steps): "
        "sampling per step\n%-34s %10s %10s %10s %14s\n",
        kBatch, kBatchSteps, "", "p50 ms", "p90 ms", "mean ms", "mean / floor");
  }
  const int all = omp_get_max_threads();
  for (const BatchCase& c :
       {BatchCase{"no grammar", BatchCase::kNone, 1},
        BatchCase{"no grammar", BatchCase::kNone, all},
        BatchCase{"JSON, a matcher each", BatchCase::kEach, 1},
        BatchCase{"JSON, one shared matcher", BatchCase::kShared, 1},
        BatchCase{"JSON, a matcher each", BatchCase::kEach, all},
        BatchCase{"JSON, one shared matcher", BatchCase::kShared, all}}) {
    std::vector<double> t = RunBatch(vocab, shared, c);
    if (t.empty()) return 1;
    double sum = 0;
    for (double x : t) sum += x;
    const double mean = sum / t.size();
    const double p50 = bench::Quantile(t, 0.5), p90 = bench::Quantile(t, 0.9);
    const std::string name = absl::StrFormat(
        "%s, %d thread%s", c.name, c.threads, c.threads == 1 ? "" : "s");
    if (json) {
      std::printf("%s\n", bench::JsonLine()
                              .Add("case", "batch")
                              .Add("grammar",
                                   c.grammar == BatchCase::kNone   ? "none"
                                   : c.grammar == BatchCase::kEach ? "each"
                                                                   : "shared")
                              .Add("threads", c.threads)
                              .Add("batch", kBatch)
                              .Add("p50_s", p50)
                              .Add("p90_s", p90)
                              .Add("mean_s", mean)
                              .Add("mean_over_floor", mean / floor_s)
                              .str()
                              .c_str());
    } else {
      std::printf("%-34s %10.2f %10.2f %10.2f %13.2f%%\n", name.c_str(),
                  p50 * 1e3, p90 * 1e3, mean * 1e3, 100 * mean / floor_s);
    }
  }
  // A reply read into tool calls as it streams (ReplyStream, per token on
  // the thread that serves the request: the engine's for gRPC): each token
  // re-reads the reply so far, so the cost grows with the reply.
  if (!json) {
    std::printf("\n%-34s %10s %10s %10s %10s %14s\n",
                "reply parsed per token (hermes)", "mean us", "p90 us",
                "max us", "last us", "last / floor");
  }
  for (int copies : {1, 4, 16}) {
    std::string reply = "Let me look that up.\n";
    for (int i = 0; i < copies; ++i) {
      reply += "<tool_call>\n{\"name\": \"store\", \"arguments\": ";
      reply += kDocument;
      reply += "}\n</tool_call>\n";
    }
    const std::vector<int32_t> ids = tok.Encode(reply, {.add_bos = false});
    constrain::ParseOptions options;
    options.format.tools = constrain::ToolCallFormat::kHermes;
    options.tools = true;
    constrain::ReplyStream stream(options);
    std::vector<double> t;
    int32_t prev = -1;
    for (int32_t id : ids) {
      const std::string piece = tok.DecodeToken(prev, id);
      prev = id;
      const auto t0 = std::chrono::steady_clock::now();
      stream.Push(piece);
      t.push_back(Seconds(std::chrono::steady_clock::now() - t0));
    }
    if (stream.Finish().calls.size() + stream.sent().calls.size() == 0) {
      return 1;
    }
    double sum = 0;
    for (double x : t) sum += x;
    const double mean = sum / t.size();
    double last = 0;
    const size_t tail = std::min<size_t>(100, t.size());
    for (size_t i = t.size() - tail; i < t.size(); ++i) last += t[i] / tail;
    const double p90 = bench::Quantile(t, 0.9);
    const double max = *std::max_element(t.begin(), t.end());
    const std::string name = absl::StrFormat(
        "%zu tokens, %d call%s", ids.size(), copies, copies == 1 ? "" : "s");
    if (json) {
      std::printf("%s\n", bench::JsonLine()
                              .Add("case", "reply parse")
                              .Add("tokens", static_cast<int64_t>(ids.size()))
                              .Add("mean_s", mean)
                              .Add("p90_s", p90)
                              .Add("max_s", max)
                              .Add("last_s", last)
                              .Add("last_over_floor", last / floor_s)
                              .str()
                              .c_str());
    } else {
      std::printf("%-34s %10.1f %10.1f %10.1f %10.1f %13.3f%%\n", name.c_str(),
                  mean * 1e6, p90 * 1e6, max * 1e6, last * 1e6,
                  100 * last / floor_s);
    }
  }
  // Schema compile times.
  std::vector<std::pair<double, std::string>> compile;
  int refused = 0;
  for (const auto& dir : std::filesystem::directory_iterator(
           std::string(KVSERVE_SHARED_DIR) + "/jsonschema")) {
    if (!dir.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
      if (f.path().extension() != ".json") continue;
      std::ifstream in(f.path());
      std::stringstream text;
      text << in.rdbuf();
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<std::shared_ptr<const constrain::Grammar>> g =
          constrain::CompileJsonSchema(text.str());
      if (g.ok()) constrain::GrammarAutomaton start(*g);
      const double s = Seconds(std::chrono::steady_clock::now() - t0);
      if (!g.ok()) {
        ++refused;
        continue;
      }
      compile.emplace_back(s, dir.path().filename().string() + "/" +
                                  f.path().filename().string());
    }
  }
  std::sort(compile.begin(), compile.end());
  std::vector<double> times;
  for (const auto& [t, name] : compile) times.push_back(t);
  if (!times.empty()) {
    const double p50 = bench::Quantile(times, 0.5),
                 p90 = bench::Quantile(times, 0.9), max = times.back();
    if (json) {
      std::printf("%s\n",
                  bench::JsonLine()
                      .Add("case", "schema compile")
                      .Add("schemas", static_cast<int64_t>(times.size()))
                      .Add("refused", refused)
                      .Add("p50_s", p50)
                      .Add("p90_s", p90)
                      .Add("max_s", max)
                      .Add("slowest", compile.back().second)
                      .str()
                      .c_str());
    } else {
      std::printf(
          "\nschema compile (%zu compiled, %d refused): p50 %.2f ms, p90 %.2f "
          "ms, max %.1f ms (%s); goal 50 ms for a typical schema\n",
          times.size(), refused, p50 * 1e3, p90 * 1e3, max * 1e3,
          compile.back().second.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }

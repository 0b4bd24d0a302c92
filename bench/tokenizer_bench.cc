// tokenizer_bench: the byte-level BPE pre-tokenizer (core/tokenizer/
// pre_tokenizer.h, PCRE2) on a realistic mixed text (English prose, C++ code,
// numbers, Chinese, Russian, emoji; 256 KiB), against the hand-written
// Llama 3 splitter it replaced (bpe_tokenizer.cc before PCRE2, kept here as
// the baseline), and whole Encode calls of the reference vocabularies
// (SharedDir()/vocab) for scale: the split's share of encoding.
//
//   tokenizer_bench [--json] [--benchmark_filter=REGEX] [...]
//
// Google Benchmark measures; every case reports MB/s of text per CPU second
// (Google Benchmark's rate; the machine is shared, so wall time varies more).
// The baseline classifies code points through a flat table built from PCRE2's
// \p{L}, \p{N} and White_Space (the old code binary-searched generated range
// tables; a flat table only flatters it), and the run checks that it splits
// the text exactly as PCRE2's llama-bpe does. With --json, one JSON object
// per case per line (bench_util's JsonLine), then a summary line with the
// ratio PCRE2 (JIT) / hand-written.
#include <benchmark/benchmark.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/util/bench_util.h"
#include "core/model/gguf.h"
#include "core/model/gguf_vocab.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "core/tokenizer/unicode.h"

namespace kvserve {
namespace {

enum class Cls { kLetter, kNumber, kSpace, kOther };

struct Char {
  uint32_t cp;
  uint32_t offset;
  Cls cls;
  bool newline;  // \r or \n
};

// Each code point's class (letter, number, White_Space, other), by PCRE2.
const std::vector<Cls>& ClassTable() {
  static const std::vector<Cls>* const table = [] {
    auto* t = new std::vector<Cls>(0x110000, Cls::kOther);
    const char* patterns[] = {"^\\p{L}$", "^\\p{N}$",
                              "^[\\t-\\r\\x{85}\\p{Z}]$"};
    const Cls classes[] = {Cls::kLetter, Cls::kNumber, Cls::kSpace};
    pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
    for (int k = 2; k >= 0; --k) {  // letters win, as in the old order
      int error = 0;
      PCRE2_SIZE offset = 0;
      pcre2_code* code = pcre2_compile(
          reinterpret_cast<PCRE2_SPTR>(patterns[k]), PCRE2_ZERO_TERMINATED,
          PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
      pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
      std::string utf8;
      for (uint32_t cp = 0; cp < 0x110000; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        utf8.clear();
        AppendUtf8(cp, utf8);
        if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(utf8.data()),
                        utf8.size(), 0, 0, match, nullptr) >= 0) {
          (*t)[cp] = classes[k];
        }
      }
      pcre2_code_free(code);
    }
    pcre2_match_data_free(match);
    return t;
  }();
  return *table;
}

std::vector<Char> Classify(std::string_view text) {
  const std::vector<Cls>& classes = ClassTable();
  std::vector<Char> out;
  for (const Utf8Char& c : SplitUtf8(text)) {
    const Cls cls = c.valid ? classes[c.cp] : Cls::kOther;
    out.push_back(
        {c.cp, c.offset, cls, c.valid && (c.cp == '\r' || c.cp == '\n')});
  }
  return out;
}

uint32_t Lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

std::vector<std::string_view> HandWrittenLlama3Split(std::string_view text) {
  const std::vector<Char> c = Classify(text);
  const size_t n = c.size();
  auto offset = [&](size_t i) {
    return i < n ? c[i].offset : static_cast<uint32_t>(text.size());
  };
  auto is = [&](size_t i, Cls cls) { return i < n && c[i].cls == cls; };
  auto run = [&](size_t i, Cls cls) {  // end of the run of `cls` from i
    while (i < n && c[i].cls == cls) ++i;
    return i;
  };
  std::vector<std::string_view> out;
  for (size_t i = 0; i < n;) {
    size_t end = i;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c[i].cp == '\'' && i + 1 < n) {
      uint32_t a = Lower(c[i + 1].cp);
      uint32_t b = i + 2 < n ? Lower(c[i + 2].cp) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
                 (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (end == i) {
      if (c[i].cls == Cls::kLetter) {
        end = run(i, Cls::kLetter);
      } else if (!c[i].newline && c[i].cls != Cls::kNumber &&
                 is(i + 1, Cls::kLetter)) {
        end = run(i + 1, Cls::kLetter);
      }
    }
    // \p{N}{1,3}
    if (end == i && c[i].cls == Cls::kNumber) {
      end = i + 1;
      while (end < n && end < i + 3 && c[end].cls == Cls::kNumber) ++end;
    }
    // ' '?[^\s\p{L}\p{N}]+[\r\n]*
    if (end == i) {
      size_t start = c[i].cp == ' ' && c[i].cls == Cls::kSpace ? i + 1 : i;
      if (is(start, Cls::kOther)) {
        end = run(start, Cls::kOther);
        while (end < n && c[end].newline) ++end;
      }
    }
    if (end == i && c[i].cls == Cls::kSpace) {
      size_t ws_end = run(i, Cls::kSpace);
      // \s*[\r\n]+ : up to the last newline of the whitespace run.
      for (size_t k = ws_end; k > i; --k) {
        if (c[k - 1].newline) {
          end = k;
          break;
        }
      }
      // \s+(?!\S) : the run, minus its last char unless the text ends.
      if (end == i) {
        if (ws_end == n) {
          end = ws_end;
        } else if (ws_end - i >= 2) {
          end = ws_end - 1;
        } else {
          end = ws_end;  // \s+
        }
      }
    }
    if (end == i) end = i + 1;  // unreachable: every class is covered
    out.push_back(text.substr(offset(i), offset(end) - offset(i)));
    i = end;
  }
  return out;
}

// About 1 KiB of what prompts hold, repeated to 256 KiB.
std::string RealisticText() {
  static const char kSample[] =
      "The quick brown fox jumps over the lazy dog. In 2024, about 1,234,567 "
      "people visited the museum; that's 12.5% more than last year (see "
      "table 3). \"It's remarkable,\" said Dr. O'Neil, who'd expected less.\n\n"
      "```cpp\nint Sum(const std::vector<int>& v) {\n  int total = 0;\n"
      "  for (int x : v) total += x * 2;  // doubled\n  return total;\n}\n"
      "```\n\n"
      "- item one\n- item two: 3.14159, 2.71828, 0x1F600\n\t- nested\n\n"
      "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8\xE5\x8C\x97\xE4\xBA\xAC\xE5\xB7\xA5"
      "\xE4\xBD\x9C\xE3\x80\x82 "
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBA\xD0\xB0\xD0"
      "\xBA \xD0\xB4\xD0\xB5\xD0\xBB\xD0\xB0? "
      "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xF0\x9F\x98\x80\xF0\x9F"
      "\xA6\x99 \xE2\x9C\x85\n"
      "User: Can you summarize the report in three bullet points?\n"
      "Assistant: Sure! Here are the key points:\n1. Revenue grew 8%.\n"
      "2. Costs fell by $2.3M.\n3. Headcount stayed at 420.\n\n";
  std::string text;
  while (text.size() < 256 * 1024) text += kSample;
  return text;
}

const std::string& Text() {
  static const std::string* const text = new std::string(RealisticText());
  return *text;
}

void HandWritten(benchmark::State& state) {
  size_t pieces = 0;
  for (auto _ : state) {
    std::vector<std::string_view> out = HandWrittenLlama3Split(Text());
    pieces = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
  state.counters["pieces"] = static_cast<double>(pieces);
}

void Pcre2Split(benchmark::State& state, std::string name, bool jit) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name, {.jit = jit});
  if (!pre.ok()) {
    state.SkipWithError(pre.status().ToString().c_str());
    return;
  }
  size_t pieces = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<std::string_view>> out = pre->Split(Text());
    pieces = out.ok() ? out->size() : 0;
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
  state.counters["pieces"] = static_cast<double>(pieces);
}

void Encode(benchmark::State& state, std::string vocab_name) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) +
                           "/vocab/ggml-vocab-" + vocab_name + ".gguf";
  absl::StatusOr<GgufFile> g = GgufFile::Open(path);
  absl::StatusOr<Vocab> v =
      g.ok() ? VocabFromGguf(*g) : absl::StatusOr<Vocab>(g.status());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      v.ok() ? CreateTokenizer(*v)
             : absl::StatusOr<std::unique_ptr<Tokenizer>>(v.status());
  if (!t.ok()) {
    state.SkipWithError(t.status().ToString().c_str());
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = (*t)->Encode(Text(), {.add_bos = false}).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
  state.counters["tokens"] = static_cast<double>(tokens);
}

// Prints Google Benchmark's runs as bench_util JSON lines, keeping each
// case's MB/s for the summary.
class JsonLinesReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) {
        std::printf("%s\n", bench::JsonLine()
                                .Add("bench", "tokenizer")
                                .Add("case", run.benchmark_name())
                                .Add("error", run.error_message)
                                .str()
                                .c_str());
        continue;
      }
      const double mbps = BytesPerSecond(run) / 1e6;
      mb_per_s[run.benchmark_name()] = mbps;
      bench::JsonLine line;
      line.Add("bench", "tokenizer")
          .Add("case", run.benchmark_name())
          .Add("text_bytes", static_cast<int64_t>(Text().size()))
          .Add("cpu_ns_per_call", run.GetAdjustedCPUTime())
          .Add("mb_per_s", mbps);
      for (const auto& [name, counter] : run.counters) {
        if (name != "bytes_per_second") line.Add(name, counter.value);
      }
      std::printf("%s\n", line.str().c_str());
    }
  }

  static double BytesPerSecond(const Run& run) {
    auto it = run.counters.find("bytes_per_second");
    return it == run.counters.end() ? 0.0 : it->second.value;
  }

  std::map<std::string, double> mb_per_s;
};

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  using namespace kvserve;
  const bool json = bench::HasFlag(argc, argv, "--json");
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") != 0) args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());

  // The baseline must split as the regex does, or the comparison is moot.
  absl::StatusOr<PreTokenizer> llama3 = PreTokenizer::ForName("llama-bpe");
  absl::StatusOr<std::vector<std::string_view>> want =
      llama3.ok()
          ? llama3->Split(Text())
          : absl::StatusOr<std::vector<std::string_view>>(llama3.status());
  const bool same = want.ok() && *want == HandWrittenLlama3Split(Text());
  if (!same) {
    std::fprintf(stderr,
                 "tokenizer_bench: the hand-written split differs from "
                 "PCRE2's llama-bpe on the text\n");
    return 1;
  }

  benchmark::RegisterBenchmark("split/llama-bpe/hand-written", HandWritten);
  for (const char* name : {"llama-bpe", "gpt-2", "qwen2", "deepseek-llm",
                           "starcoder", "default"}) {
    benchmark::RegisterBenchmark(
        ("split/" + std::string(name) + "/pcre2-jit").c_str(), Pcre2Split,
        std::string(name), true);
  }
  benchmark::RegisterBenchmark("split/llama-bpe/pcre2-interpreter", Pcre2Split,
                               std::string("llama-bpe"), false);
  for (const char* vocab : {"gpt-2", "deepseek-llm", "starcoder"}) {
    benchmark::RegisterBenchmark(("encode/" + std::string(vocab)).c_str(),
                                 Encode, std::string(vocab));
  }

  if (!json) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    JsonLinesReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const double hand = reporter.mb_per_s["split/llama-bpe/hand-written"];
    const double jit = reporter.mb_per_s["split/llama-bpe/pcre2-jit"];
    std::printf("%s\n", bench::JsonLine()
                            .Add("bench", "tokenizer")
                            .Add("summary", "llama-bpe split")
                            .Add("hand_written_mb_per_s", hand)
                            .Add("pcre2_jit_mb_per_s", jit)
                            .Add("ratio_pcre2_over_hand_written",
                                 hand > 0 ? jit / hand : 0.0)
                            .Add("same_pieces", "true")
                            .str()
                            .c_str());
  }
  benchmark::Shutdown();
  return 0;
}

// kvmodel: the model maker. Writes a Llama-architecture GGUF with
// deterministic random weights (see core/model/gguf_random_model.h):
//
//   kvmodel make --out=PATH [--n_layers=N] [--dim=N] [--n_heads=N]
//                [--n_kv_heads=N] [--hidden_dim=N] [--context_length=N]
//                [--dtype=f32|f16|bf16] [--vocab_from=GGUF] [--seed=S]
//
// Prints one line describing the file it wrote; exit 0 on success, 1 on
// error, 2 on bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"

ABSL_FLAG(std::string, out, "", "Path of the GGUF file to write");
ABSL_FLAG(int, n_layers, 2, "Transformer blocks");
ABSL_FLAG(int, dim, 64, "Residual stream width (embedding_length)");
ABSL_FLAG(int, n_heads, 4, "Query heads");
ABSL_FLAG(int, n_kv_heads, 2, "Key/value heads (n_heads must be a multiple)");
ABSL_FLAG(int, hidden_dim, 172, "SwiGLU inner width (feed_forward_length)");
ABSL_FLAG(int, context_length, 512, "Context length the model declares");
ABSL_FLAG(std::string, dtype, "f32", "Tensor type of matrices: f32, f16, bf16");
ABSL_FLAG(std::string, vocab_from, "",
          "Copy the tokenizer from this GGUF (default: byte-level vocab)");
ABSL_FLAG(uint64_t, seed, 1, "Random seed; same seed, same file");
ABSL_FLAG(std::string, name, "kvmodel-random", "general.name of the model");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes GGUF models with deterministic random weights\n"
      "  kvmodel make --out=PATH [--n_layers=N --dim=N --n_heads=N "
      "--n_kv_heads=N --hidden_dim=N --context_length=N "
      "--dtype=f32|f16|bf16 --vocab_from=GGUF --seed=S]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2 || std::string(args[1]) != "make") {
    std::fprintf(stderr, "usage: %s\n",
                 std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::fprintf(stderr, "kvmodel make: --out=PATH is required\n");
    return 2;
  }
  kvserve::RandomModelOptions o;
  o.n_layers = absl::GetFlag(FLAGS_n_layers);
  o.dim = absl::GetFlag(FLAGS_dim);
  o.n_heads = absl::GetFlag(FLAGS_n_heads);
  o.n_kv_heads = absl::GetFlag(FLAGS_n_kv_heads);
  o.hidden_dim = absl::GetFlag(FLAGS_hidden_dim);
  o.context_length = absl::GetFlag(FLAGS_context_length);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.vocab_from = absl::GetFlag(FLAGS_vocab_from);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.name = absl::GetFlag(FLAGS_name);
  absl::StatusOr<std::unique_ptr<kvserve::GgufWriter>> writer =
      kvserve::MakeRandomModel(o);
  if (!writer.ok()) {
    std::fprintf(stderr, "kvmodel make: %s\n",
                 std::string(writer.status().message()).c_str());
    return 1;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (absl::Status s = (*writer)->WriteFile(out); !s.ok()) {
    std::fprintf(stderr, "kvmodel make: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  // Read it back: the file we promise is one our loader accepts.
  kvserve::LoadOptions lo;
  lo.model_path = out;
  absl::StatusOr<kvserve::LoadedModel> m = kvserve::LoadModel(lo);
  if (!m.ok()) {
    std::fprintf(stderr, "kvmodel make: wrote %s but cannot load it: %s\n",
                 out.c_str(), std::string(m.status().message()).c_str());
    return 1;
  }
  const kvserve::ModelConfig& c = m->weights->config;
  std::printf("%s\n",
              absl::StrFormat("wrote %s: llama n_layers=%d dim=%d n_heads=%d "
                              "n_kv_heads=%d hidden_dim=%d vocab_size=%d "
                              "context_length=%d dtype=%s fingerprint=%s",
                              out, c.n_layers, c.dim, c.n_heads, c.n_kv_heads,
                              c.hidden_dim, c.vocab_size, c.context_length,
                              o.dtype, m->weights->fingerprint)
                  .c_str());
  return 0;
}

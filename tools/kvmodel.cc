// kvmodel: the model maker and converter.
//
//   kvmodel make --out=PATH [--n_layers=N] [--dim=N] [--n_heads=N]
//                [--n_kv_heads=N] [--hidden_dim=N] [--context_length=N]
//                [--dtype=TYPE] [--vocab_from=GGUF] [--seed=S]
//                [--special_tokens=PIECE,...] [--eot_token=PIECE]
//                [--chat_template=FILE]
//     writes a Llama-architecture GGUF with deterministic random weights
//     (core/model/gguf_random_model.h), optionally with control tokens
//     appended to the vocabulary and a chat template.
//   kvmodel quantize --in=GGUF --out=PATH --type=TYPE (or --mix=MIX)
//     converts a GGUF's weight matrices to TYPE (core/model/gguf_quantize.h).
//
// TYPE is any name core/model/type_mix.h accepts: a single type or one of
// llama.cpp's mixes. Each command reads its output back with the loader and
// prints one line describing it; exit 0 on success, 1 on error, 2 on bad
// usage.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/model/gguf_quantize.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "core/model/type_mix.h"
#include "core/util/command_line.h"
#include "core/util/file.h"
#include "kvserve_build_info.h"

ABSL_FLAG(std::string, out, "", "Path of the GGUF file to write");
ABSL_FLAG(std::string, in, "", "quantize: the GGUF file to convert");
ABSL_FLAG(std::string, type, "",
          absl::StrCat("quantize: tensor types to convert to: ",
                       kvserve::TypeMixNames()));
ABSL_FLAG(std::string, mix, "",
          "quantize: a mix (q4_k_m, q5_k_m); same as --type, and wins");
ABSL_FLAG(int, n_layers, 2, "Transformer blocks");
ABSL_FLAG(int, dim, 64, "Residual stream width (embedding_length)");
ABSL_FLAG(int, n_heads, 4, "Query heads");
ABSL_FLAG(int, n_kv_heads, 2, "Key/value heads (n_heads must be a multiple)");
ABSL_FLAG(int, hidden_dim, 172, "SwiGLU inner width (feed_forward_length)");
ABSL_FLAG(int, context_length, 512, "Context length the model declares");
ABSL_FLAG(std::string, dtype, "f32",
          absl::StrCat("make: tensor types of the matrices: ",
                       kvserve::TypeMixNames()));
ABSL_FLAG(std::string, vocab_from, "",
          "Copy the tokenizer from this GGUF (default: byte-level vocab)");
ABSL_FLAG(std::vector<std::string>, special_tokens, {},
          "make: comma-separated pieces appended to the vocabulary as control "
          "tokens (e.g. <|im_start|>,<|im_end|>)");
ABSL_FLAG(std::string, eot_token, "",
          "make: the piece whose id is written as "
          "tokenizer.ggml.eot_token_id (e.g. <|im_end|>)");
ABSL_FLAG(std::string, chat_template, "",
          "make: a file whose text is written as tokenizer.chat_template");
ABSL_FLAG(uint64_t, seed, 1, "Random seed; same seed, same file");
ABSL_FLAG(std::string, name, "kvmodel-random", "general.name of the model");

namespace {

void ConfigureUsage() {
  kvserve::ConfigureCommandLine(
      "kvmodel",
      absl::StrCat(
          "writes GGUF models with deterministic random weights, and converts "
          "GGUF models to other tensor types\n"
          "  kvmodel make --out=PATH [--n_layers=N --dim=N --n_heads=N "
          "--n_kv_heads=N --hidden_dim=N --context_length=N "
          "--dtype=TYPE --vocab_from=GGUF --seed=S "
          "--special_tokens=PIECE,... --eot_token=PIECE "
          "--chat_template=FILE]\n"
          "  kvmodel quantize --in=GGUF --out=PATH --type=TYPE (or --mix=MIX)\n"
          "TYPE: ",
          kvserve::TypeMixNames()),
      "tools/kvmodel.cc", KVSERVE_VERSION, KVSERVE_COMMIT);
}

// Reads `path` back with the loader: the file we promise is one it accepts.
absl::StatusOr<kvserve::LoadedModel> ReadBack(const std::string& path) {
  kvserve::LoadOptions lo;
  lo.model_path = path;
  return kvserve::LoadModel(lo);
}

std::string Describe(const std::string& path, const kvserve::ModelWeights& w) {
  const kvserve::ModelConfig& c = w.config;
  return absl::StrFormat(
      "%s: llama n_layers=%d dim=%d n_heads=%d n_kv_heads=%d hidden_dim=%d "
      "vocab_size=%d context_length=%d weight_bytes=%d (%s) fingerprint=%s",
      path, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.hidden_dim,
      c.vocab_size, c.context_length, w.TotalBytes(), w.TypeSummary(),
      w.fingerprint);
}

int Fail(const char* command, absl::string_view message) {
  std::fprintf(stderr, "kvmodel %s: %s\n", command,
               std::string(message).c_str());
  return 1;
}

int Make() {
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
  o.special_tokens = absl::GetFlag(FLAGS_special_tokens);
  o.eot_token = absl::GetFlag(FLAGS_eot_token);
  if (const std::string path = absl::GetFlag(FLAGS_chat_template);
      !path.empty()) {
    absl::StatusOr<std::string> text = kvserve::ReadSmallFile(path);
    if (!text.ok()) return Fail("make", text.status().message());
    if (text->empty()) {
      return Fail("make",
                  absl::StrCat("chat template file ", path, " is empty"));
    }
    o.chat_template = std::move(*text);
  }
  absl::StatusOr<std::unique_ptr<kvserve::GgufWriter>> writer =
      kvserve::MakeRandomModel(o);
  if (!writer.ok()) return Fail("make", writer.status().message());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (absl::Status s = (*writer)->WriteFile(out); !s.ok()) {
    return Fail("make", s.message());
  }
  absl::StatusOr<kvserve::LoadedModel> m = ReadBack(out);
  if (!m.ok()) {
    return Fail("make", absl::StrCat("wrote ", out, " but cannot load it: ",
                                     m.status().message()));
  }
  std::printf("wrote %s dtype=%s\n", Describe(out, *m->weights).c_str(),
              o.dtype.c_str());
  return 0;
}

int Quantize() {
  const std::string in = absl::GetFlag(FLAGS_in);
  const std::string out = absl::GetFlag(FLAGS_out);
  std::string type = absl::GetFlag(FLAGS_type);
  if (!absl::GetFlag(FLAGS_mix).empty()) type = absl::GetFlag(FLAGS_mix);
  if (in.empty() || type.empty()) {
    std::fprintf(stderr,
                 "kvmodel quantize: --in=GGUF, --out=PATH and --type=TYPE "
                 "(or --mix=MIX) are required; TYPE: %s\n",
                 kvserve::TypeMixNames().c_str());
    return 2;
  }
  absl::StatusOr<kvserve::TypeMix> mix = kvserve::ParseTypeMix(type);
  if (!mix.ok()) return Fail("quantize", mix.status().message());
  if (absl::Status s = kvserve::QuantizeGguf(in, out, *mix); !s.ok()) {
    return Fail("quantize", s.message());
  }
  absl::StatusOr<kvserve::LoadedModel> m = ReadBack(out);
  if (!m.ok()) {
    return Fail("quantize", absl::StrCat("wrote ", out, " but cannot load it: ",
                                         m.status().message()));
  }
  std::printf("wrote %s type=%s from %s\n", Describe(out, *m->weights).c_str(),
              type.c_str(), in.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureUsage();
  std::optional<std::vector<char*>> parsed =
      kvserve::ParseCommandLine(argc, argv);
  if (!parsed.has_value()) return 0;  // --help or --version
  const std::vector<char*>& args = *parsed;
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command != "make" && command != "quantize") {
    std::fprintf(stderr, "usage: %s\n",
                 std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::fprintf(stderr, "kvmodel %s: --out=PATH is required\n",
                 command.c_str());
    return 2;
  }
  return command == "make" ? Make() : Quantize();
}

// fuzz_seeds OUT_DIR: writes generated seed inputs for the fuzzers into
// OUT_DIR/<fuzzer>/ (`make fuzz` runs it before the fuzzers). The seeds are
// made by the project's own writers (tiny GGUF models, llama.2c checkpoints,
// session log records, KV snapshots, quantized blocks, serialized gRPC
// requests), so they follow the current formats; the committed seeds in
// tests/fuzz/corpus/ are the hand-written ones. Each file starts with the
// selector bytes its fuzzer reads first (see each *_fuzzer.cc).
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/chat/chat_template.h"
#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"
#include "core/model/gguf_random_model.h"
#include "core/model/gguf_writer.h"
#include "core/quant/quant.h"
#include "core/session/kv_snapshot.h"
#include "core/session/session_dir.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve {
namespace {

std::string g_out;
int g_written = 0;

void Write(const std::string& fuzzer, const std::string& name,
           const std::string& bytes) {
  const std::string dir = g_out + "/" + fuzzer;
  ::mkdir(g_out.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/gen-" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr ||
      std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "fuzz_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
  ++g_written;
}

void PutI32(std::string& s, int32_t v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}
void PutF32(std::string& s, float v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}

void GgufSeeds(const std::string& shared) {
  struct Variant {
    const char* name;
    const char* dtype;
    bool llama_vocab;
  };
  for (const Variant& v :
       {Variant{"f32", "f32", false}, Variant{"f16", "f16", false},
        Variant{"bf16", "bf16", false}, Variant{"q8_0", "q8_0", false},
        Variant{"q4_0", "q4_0", false},
        Variant{"iq4_nl-stories-vocab", "iq4_nl", true}}) {
    // As small as each type allows (block types: rows of 32 elements).
    const bool is_float = v.dtype[0] == 'f' || v.dtype[0] == 'b';
    RandomModelOptions o;
    o.n_layers = 1;
    o.dim = is_float ? 8 : 32;
    o.n_heads = 2;
    o.n_kv_heads = 1;
    o.hidden_dim = is_float ? 8 : 32;
    o.context_length = 16;
    o.dtype = v.dtype;
    o.name = "fuzz";
    if (v.llama_vocab) {
      o.vocab_from = shared + "/models/stories260K.gguf";
      o.special_tokens = {"<|im_start|>", "<|im_end|>"};
      o.eot_token = "<|im_end|>";
      o.chat_template = kChatMlTemplate;
    }
    absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(o);
    if (!w.ok()) {
      std::fprintf(stderr, "fuzz_seeds: gguf %s: %s\n", v.name,
                   w.status().ToString().c_str());
      continue;
    }
    Write("gguf", v.name, (*w)->Serialize());
  }
}

void Llama2cSeeds() {
  // dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 16, seq_len 4;
  // shared classifier (vocab > 0) and unshared (vocab < 0).
  for (int shared = 0; shared < 2; ++shared) {
    const int dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1,
              vocab = 16, seq = 4, head = dim / heads;
    std::string b(1, static_cast<char>(shared ? 0x01 : 0x03));
    for (int v :
         {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq}) {
      PutI32(b, v);
    }
    const int64_t floats =
        int64_t{vocab} * dim + layers * dim + layers * dim * dim +
        2 * layers * dim * (kv_heads * head) + layers * dim * dim +
        layers * dim + 3 * layers * dim * hidden + dim + seq * head +
        (shared ? 0 : int64_t{vocab} * dim);
    for (int64_t i = 0; i < floats; ++i) {
      PutF32(b, 0.1f * std::sin(static_cast<float>(i)));
    }
    Write("llama2c", shared ? "checkpoint-shared" : "checkpoint-unshared", b);
  }
  // A 16-token tokenizer file: <unk>, "\n<s>\n", "\n</s>\n", bytes, words.
  std::string t(1, '\0');
  PutI32(t, 8);
  const char* pieces[] = {
      "<unk>",  "\n<s>\n", "\n</s>\n", "<0x0A>", "<0x20>",
      "<0xFF>", " ",       "a",        "b",      "ab",
      " a",     "ba",      " ab",      "c",      "\xe2\x96\x81",
      "<|x|>"};
  float score = 0;
  for (const char* p : pieces) {
    PutF32(t, score -= 1);
    PutI32(t, static_cast<int32_t>(std::strlen(p)));
    t += p;
  }
  Write("llama2c", "vocab16", t);
}

void SessionLogSeeds() {
  StoredSession s;
  s.owner = "alice";
  s.ttl = absl::Seconds(60);
  s.create_time = absl::FromUnixSeconds(1'700'000'000);
  s.tokens = {1, 72, 105};
  std::string log = SessionDir::StartRecords(s);
  log += SessionDir::AppendRecord(3, std::vector<int32_t>{33, 34});
  log += SessionDir::AppendRecord(
      2, std::vector<int32_t>{7}, 0,
      std::vector<ChatMessage>{
          {.role = "user", .content = "hi"},
          {.role = "assistant", .content = "yo", .tool_calls_json = "[]"}});
  log += SessionDir::AppendRecord(1, {}, 1, {});
  for (char fix : {'\0', '\1'}) {
    Write("session_log", std::string("log-") + (fix ? "fixed" : "raw"),
          std::string(1, fix) + log);
  }
  // A damaged header: the replay reads its copy.
  std::string damaged = log;
  damaged[20] ^= 0x10;
  Write("session_log", "damaged-header", std::string(1, '\0') + damaged);
  StoredSession chat;
  chat.messages = {{.role = "system", .content = "be brief", .name = "n"}};
  Write("session_log", "chat-header",
        "\1" + SessionDir::StartRecords(chat) +
            SessionDir::AppendRecord(0, std::vector<int32_t>{5, 6})
                .substr(0, 15));
}

void KvSnapshotSeeds() {
  // The layout kv_snapshot_fuzzer.cc checks against.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    BlockPoolOptions o;
    o.n_layers = 2;
    o.n_kv_heads = 2;
    o.head_dim = 4;
    o.block_tokens = 4;
    o.dtype = dtype;
    o.capacity_bytes = 2 * 2 * 2 * 4 * DTypeSize(dtype) * 64;
    std::unique_ptr<BlockPool> pool = *BlockPool::Create(o);
    KvSnapshotKey key{.model_fingerprint = "fuzz-model",
                      .dtype = dtype,
                      .n_layers = 2,
                      .n_kv_heads = 2,
                      .head_dim = 4};
    for (int n : {0, 5, 13}) {
      BlockTable table(pool.get());
      if (!table.Extend(n).ok()) std::exit(1);
      std::vector<float> k(8), v(8);
      for (int layer = 0; layer < 2; ++layer) {
        for (int p = 0; p < n; ++p) {
          for (int i = 0; i < 8; ++i) {
            k[i] = 0.25f * (layer + p + i);
            v[i] = -k[i];
          }
          table.WriteKv(layer, p, k.data(), v.data());
        }
      }
      std::vector<int32_t> tokens;
      for (int i = 0; i < n; ++i) tokens.push_back(i * 7 + 3);
      const std::string snap = EncodeKvSnapshot(key, tokens, table);
      const char sel = dtype == DType::kF32 ? 0 : 2;
      Write("kv_snapshot",
            std::string(DTypeName(dtype)) + "-" + std::to_string(n),
            std::string(1, sel) + snap);
      Write("kv_snapshot",
            std::string(DTypeName(dtype)) + "-" + std::to_string(n) + "-fix",
            std::string(1, sel | 1) + snap);
    }
  }
}

void QuantSeeds() {
  // Type indices as quant_blocks_fuzzer.cc enumerates them.
  int index = 0;
  for (uint32_t t = 0; t < 64; ++t) {
    const quant::TypeInfo* info = quant::Info(t);
    if (info == nullptr) continue;
    const int64_t k = info->block_elems == 1 ? 64 : 2 * info->block_elems;
    const int rows = 2;
    std::vector<float> x(rows * k);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * i) * 3;
    std::string b;
    b += static_cast<char>(index);
    b += static_cast<char>(1 | (1 << 2));  // m 2, rows 2
    const int64_t row_bytes = quant::RowBytes(info->type, k);
    std::string blocks(rows * row_bytes, '\0');
    for (int r = 0; r < rows; ++r) {
      info->quantize(x.data() + r * k, blocks.data() + r * row_bytes, k);
    }
    Write("quant_blocks", std::string(info->name), b + blocks);
    ++index;
  }
}

void RequestSeeds() {
  // [method byte][u8 length][request] per call; methods as in
  // request_handlers_fuzzer.cc's table.
  enum {
    kGetModelInfo,
    kCreateSession,
    kGetSession,
    kListSessions,
    kDeleteSession,
    kForkSession,
    kTruncateSession,
    kAppend,
    kGenerate,
    kTokenize,
    kDetokenize,
    kApplyChatTemplate
  };
  auto call = [](int method, const google::protobuf::Message& m) {
    std::string bytes = m.SerializeAsString();
    if (bytes.size() > 255) std::exit(1);
    return std::string(1, static_cast<char>(method)) +
           std::string(1, static_cast<char>(bytes.size())) + bytes;
  };
  const std::string id = "0123456789abcdef0123456789abcdef";
  v1::CreateSessionRequest create;
  create.set_session_id(id);
  create.mutable_initial()->set_text("Once");
  v1::AppendRequest append;
  append.set_session_id(id);
  append.mutable_input()->set_text(" upon");
  v1::GenerateRequest gen;
  gen.set_session_id(id);
  gen.mutable_prompt()->set_text(" a");
  gen.set_max_tokens(2);
  gen.add_stop("x");
  gen.set_logprobs(2);
  v1::ForkSessionRequest fork;
  fork.set_session_id(id);
  v1::TruncateSessionRequest truncate;
  truncate.set_session_id(id);
  truncate.set_tokens(2);
  Write("request_handlers", "session",
        call(kCreateSession, create) + call(kAppend, append) +
            call(kGenerate, gen) + call(kTruncateSession, truncate));
  v1::GenerateRequest chat;
  auto* msg = chat.mutable_prompt()->mutable_messages()->add_messages();
  msg->set_role("user");
  msg->set_content("hi");
  chat.set_max_tokens(3);
  v1::TokenizeRequest tok;
  tok.set_text("<s>hi");
  tok.set_parse_special(true);
  v1::DetokenizeRequest detok;
  for (int t : {1, 72, 300, -1}) detok.add_token_ids(t);
  v1::ApplyChatTemplateRequest apply;
  *apply.add_messages() = *msg;
  apply.set_add_generation_prompt(true);
  Write("request_handlers", "stateless",
        call(kGenerate, chat) + call(kTokenize, tok) +
            call(kDetokenize, detok) + call(kApplyChatTemplate, apply));
  // Deep JSON (tools_json nested 100,000 deep overflowed the stack): within
  // the 512 limit and past it. The last call takes the rest of the input,
  // so its length byte is only a placeholder.
  for (int depth : {500, 600}) {
    v1::ApplyChatTemplateRequest deep;
    *deep.add_messages() = *msg;
    deep.set_tools_json(std::string(depth, '[') + std::string(depth, ']'));
    Write("request_handlers", "deep-tools-" + std::to_string(depth),
          std::string(1, static_cast<char>(kApplyChatTemplate)) + '\xff' +
              deep.SerializeAsString());
  }
  Write("request_handlers", "info",
        call(kGetModelInfo, v1::GetModelInfoRequest()) +
            call(kListSessions, v1::ListSessionsRequest()) +
            call(kForkSession, fork) +
            call(kDeleteSession, v1::DeleteSessionRequest()));
}

// Seeds from ../shared when it is there: the real tokenizer file and the
// real models' chat templates.
void SharedSeeds(const std::string& shared) {
  auto read = [](const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream s;
    s << in.rdbuf();
    *out = s.str();
    return true;
  };
  std::string bytes;
  if (read(shared + "/models/tok512.bin", &bytes)) {
    Write("llama2c", "tok512", std::string(1, '\0') + bytes);
    Write("llama2c", "tok512-sized", std::string(1, '\2') + bytes);
  }
  for (const char* name :
       {"Qwen-Qwen2.5-7B-Instruct", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "google-gemma-2-2b-it", "meta-llama-Llama-3.1-8B-Instruct",
        "microsoft-Phi-3.5-mini-instruct",
        "mistralai-Mistral-Nemo-Instruct-2407"}) {
    if (read(shared + "/templates/" + name + ".jinja", &bytes)) {
      Write("jinja", name, std::string(1, '\0') + bytes);
    }
  }
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR SHARED_DIR\n");
    return 2;
  }
  kvserve::g_out = argv[1];
  kvserve::GgufSeeds(argv[2]);
  kvserve::Llama2cSeeds();
  kvserve::SessionLogSeeds();
  kvserve::KvSnapshotSeeds();
  kvserve::QuantSeeds();
  kvserve::RequestSeeds();
  kvserve::SharedSeeds(argv[2]);
  std::printf("fuzz_seeds: %d seeds in %s\n", kvserve::g_written, argv[1]);
  return 0;
}

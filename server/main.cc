// kvserve: serves a Llama-family model over gRPC with server-side sessions.
// Its flags are listed in README.md ("Server flags") and by --help; every
// flag can also be set by the environment variable KVSERVE_<FLAG NAME IN
// CAPITALS>, which the command line overrides.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/dnnl/context.h"
#include "core/util/command_line.h"
#include "core/util/cpu_features.h"
#include "core/util/omp_wait.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "kvserve_build_info.h"
#include "prometheus/exposer.h"
#include "server/auth.h"
#include "server/http/http_server.h"
#include "server/inference_service.h"
#include "server/kv_budget.h"
#include "server/metrics.h"
#include "server/model_source.h"
#include "server/process_metrics.h"
#include "server/settings.h"
#include "server/tls.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC address (host:port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics address (host:port); empty disables it");
ABSL_FLAG(std::string, model, "",
          "GGUF or llama2.c model file; empty serves the built-in model");
ABSL_FLAG(std::string, tokenizer, "",
          "llama2.c tokenizer file (needed with a llama2.c model)");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "auto: every matrix as the file stores it (F16, BF16, Q8_0, Q4_K, "
          "... computed in its own format); f32 or bf16: converted once at "
          "load");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja2 chat template file; overrides the model's "
          "tokenizer.chat_template (a model with neither uses ChatML)");
ABSL_FLAG(bool, special_tokens_in_content, false,
          "tokenize control tokens (<|im_start|>, <|eot_id|>) in chat "
          "messages' content, names and tool calls as control tokens, as "
          "llama-server, vLLM and transformers do; off: only the chat "
          "template's own text has control tokens, so an end user's text "
          "cannot open a system turn");
ABSL_FLAG(bool, no_mmap, false,
          "read the model file into memory instead of mapping it: the file "
          "may then change or go while served, at the cost of a copy at load "
          "and the file's size in resident memory");
ABSL_FLAG(int64_t, kv_cache_bytes, 0,
          "KV cache budget in bytes; 0 = 8 full contexts, at most half of "
          "the free memory (MemAvailable or the cgroup limit), at least one "
          "block per --max_running sequence (printed at start)");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "f32|bf16|q8_0|q4_0: KV cache element type; q8_0 and q4_0 keep "
          "blocks of 32 with an f16 scale (0.53x and 0.28x bf16's bytes per "
          "token) and need head_dim a multiple of 32");
ABSL_FLAG(std::string, numerics, "auto",
          "auto|llama: llama computes llama.cpp's values to the bit (its "
          "float order in attention, with --kv_dtype=f32 only, and in the "
          "quantized kernels at every row count), slower than auto (decode "
          "attention ~3x, prompts' attention ~10x and matrices 1.2-2.6x)");
ABSL_FLAG(int32_t, kv_block_tokens, kvserve::BlockPoolOptions().block_tokens,
          "positions per KV cache block");
ABSL_FLAG(int32_t, max_context, 0,
          "longest session in tokens; 0 = the model's context length");
ABSL_FLAG(std::string, session_dir, "",
          "directory for session snapshots (created if missing)");
ABSL_FLAG(int64_t, session_dir_max_bytes, 0,
          "quota on the bytes of --session_dir's logs and snapshots: past it "
          "idle sessions' snapshots (least recently used first), then "
          "expired sessions go, and new sessions are refused with "
          "RESOURCE_EXHAUSTED; 0 = no quota");
ABSL_FLAG(int32_t, max_batch_tokens, 512, "tokens per engine step");
ABSL_FLAG(double, max_step_slowdown, 2.0,
          "while sequences decode, prefill chunks are sized so that each "
          "waiting prompt slows a step by at most this many times a "
          "decode-only step, minus 1 (0: no limit)");
ABSL_FLAG(int32_t, max_queued_requests, 256,
          "requests waiting for admission before RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_running, 64, "sequences decoding together");
ABSL_FLAG(int32_t, threads, 0, "compute threads; 0 = all cores");
ABSL_FLAG(int64_t, max_prompt_bytes, 0,
          "the most text bytes one request's prompt may carry (text, or a "
          "chat turn's messages and tools); 0 = 32 per token of context");
ABSL_FLAG(int32_t, max_sessions, 10000,
          "the most sessions kept (ephemeral ones not counted); new ones are "
          "refused with RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(int32_t, max_sessions_per_owner, 0,
          "the most sessions one owner keeps; 0 = only --max_sessions");
ABSL_FLAG(int64_t, default_ttl_seconds, 0,
          "TTL of a session created without one; 0 = none");
ABSL_FLAG(int32_t, default_max_tokens, 256,
          "max_tokens of a Generate that sets none");
ABSL_FLAG(double, shutdown_grace_seconds, 10,
          "on SIGTERM, how long in-flight streams may run before cancelled");
ABSL_FLAG(int32_t, stream_write_timeout_seconds, 30,
          "a Generate stream whose client has not read a response for this "
          "long is cancelled and its queued responses freed; 0: never");
ABSL_FLAG(int32_t, max_unflushed_streams, 256,
          "streams whose generation finished while their responses wait "
          "for the client; beyond it the oldest is cancelled; 0: no limit");
// Security (README.md, "Security").
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve --listen over TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: require client certificates signed by them "
          "(mutual TLS)");
ABSL_FLAG(std::string, api_keys_file, "",
          "file of `OWNER SHA256HEX` lines (the hex SHA-256 of each key): "
          "every kvserve.v1 call needs `authorization: Bearer KEY` and its "
          "owner is the key's; reloaded on SIGHUP");
ABSL_FLAG(std::string, http_listen, "",
          "OpenAI-compatible HTTP API address (host:port); empty disables "
          "it. HTTPS with --tls_cert/--tls_key; a non-loopback address needs "
          "TLS or --insecure, as --listen does");
ABSL_FLAG(int32_t, http_max_connections, 4096,
          "open HTTP connections at most; past it a new connection is "
          "answered 503 and closed (each may hold a request of up to 8 MiB)");
ABSL_FLAG(bool, insecure, false,
          "allow plaintext gRPC on a --listen reachable from other machines "
          "(TLS terminates in front of kvserve: a router or service mesh)");

namespace kvserve {
namespace {

void ConfigureUsage() {
  ConfigureCommandLine(
      "kvserve",

      "serves a Llama-family model over gRPC with server-side KV sessions.\n"
      "\n"
      "Usage: kvserve [--flag=value]...\n"
      "\n"
      "Every --flag can also come from the environment as KVSERVE_FLAG\n"
      "(e.g. KVSERVE_KV_CACHE_BYTES=1000000000); the command line wins.\n"
      "KVSERVE_MAX_ISA=avx2|avx512|avx512_bf16|native (or scalar) caps the\n"
      "CPU features our kernels and oneDNN use. --helpfull also lists\n"
      "Abseil's own flags; --version prints the version and git commit.",
      "server/", KVSERVE_VERSION, KVSERVE_COMMIT);
}

// The KV cache budget: --kv_cache_bytes, or the default of kv_budget.h.
// Prints how it was chosen and any warning.
int64_t ChooseKvCacheBytes(const ModelConfig& config, DType kv_dtype) {
  const int max_context = absl::GetFlag(FLAGS_max_context);
  const KvCacheShape shape{
      .bytes_per_token = config.KvBytesPerToken(kv_dtype),
      .max_context = max_context > 0 ? max_context : config.context_length,
      .block_tokens = std::max(1, absl::GetFlag(FLAGS_kv_block_tokens)),
      .max_running = std::max(1, absl::GetFlag(FLAGS_max_running))};
  const MachineMemory memory = ReadMachineMemory();
  const int64_t explicit_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  const KvCacheBudget budget =
      explicit_bytes > 0 ? ExplicitKvCacheBudget(explicit_bytes, shape)
                         : DefaultKvCacheBudget(shape, memory);
  std::fprintf(stderr, "kvserve: %s\n", budget.explanation.c_str());
  for (const std::string& warning :
       KvCacheBudgetWarnings(budget.bytes, shape, memory)) {
    std::fprintf(stderr, "kvserve: warning: %s\n", warning.c_str());
  }
  return budget.bytes;
}

// The gRPC port's address, transport credentials and API keys, from the
// flags. Any error is a bad flag.
struct Security {
  HostPort listen;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<Authenticator> auth;
};

absl::StatusOr<Security> SecurityFromFlags() {
  const std::string listen = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<HostPort> hp = ParseHostPort(listen);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: ", hp.status().message()));
  }
  const TlsOptions tls{.cert_file = absl::GetFlag(FLAGS_tls_cert),
                       .key_file = absl::GetFlag(FLAGS_tls_key),
                       .client_ca_file = absl::GetFlag(FLAGS_tls_client_ca)};
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (absl::Status s =
          CheckListenSecurity(listen, *hp, tls.enabled(), insecure);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(
      {.api_keys_file = absl::GetFlag(FLAGS_api_keys_file)});
  if (!auth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--api_keys_file: ", auth.status().message()));
  }
  if (tls.enabled()) {
    std::fprintf(stderr, "kvserve: TLS on the gRPC port%s\n",
                 tls.client_ca_file.empty()
                     ? ""
                     : ", client certificates required (mutual TLS)");
  } else if (!IsLoopbackHost(hp->host)) {
    std::fprintf(stderr,
                 "kvserve: warning: --listen=%s serves plaintext gRPC to "
                 "other machines (--insecure): TLS must terminate in front "
                 "of kvserve%s\n",
                 listen.c_str(),
                 (*auth)->keys_required()
                     ? ""
                     : ", and without --api_keys_file anyone who reaches the "
                       "port can read every owner's sessions");
  }
  if ((*auth)->keys_required()) {
    std::fprintf(stderr, "kvserve: %zu API keys from %s\n",
                 (*auth)->key_count(),
                 absl::GetFlag(FLAGS_api_keys_file).c_str());
  }
  return Security{.listen = *std::move(hp),
                  .credentials = *std::move(credentials),
                  .auth = *std::move(auth)};
}

// The HTTP API's options from the flags; nullopt when --http_listen is
// empty. Any error is a bad flag.
absl::StatusOr<std::optional<http::HttpServer::Options>>
HttpOptionsFromFlags() {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return std::nullopt;
  absl::StatusOr<HostPort> hp = ParseHostPort(listen);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen: ", hp.status().message()));
  }
  http::HttpServer::Options options;
  options.listen = listen;
  options.tls =
      TlsOptions{.cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key),
                 .client_ca_file = absl::GetFlag(FLAGS_tls_client_ca)};
  if (absl::Status s = CheckListenSecurity(listen, *hp, options.tls.enabled(),
                                           absl::GetFlag(FLAGS_insecure));
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--http_listen: ", s.message()));
  }
  options.threads = 2 * std::max(1, absl::GetFlag(FLAGS_max_running));
  options.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_max_connections must be at least 1, got ",
                     options.max_connections));
  }
  options.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  return options;
}

// On SIGHUP: the keys file again, or the old keys and why not.
void ReloadApiKeys(Authenticator& auth) {
  if (!auth.keys_required()) {
    std::fprintf(stderr, "kvserve: SIGHUP: no --api_keys_file to reload\n");
  } else if (absl::Status s = auth.Reload(); s.ok()) {
    std::fprintf(stderr, "kvserve: SIGHUP: reloaded %zu API keys from %s\n",
                 auth.key_count(), absl::GetFlag(FLAGS_api_keys_file).c_str());
  } else {
    std::fprintf(stderr,
                 "kvserve: SIGHUP: API keys not reloaded, the %zu keys "
                 "loaded before stay: %s\n",
                 auth.key_count(), std::string(s.message()).c_str());
  }
  std::fflush(stderr);
}

// Runs `load` (the model's load or the engine's start: seconds for a large
// model) on a thread of its own while this one waits for it or for SIGTERM
// or SIGINT, which end the process at once (exit 0, as after a drain:
// nothing is served or written yet). A SIGHUP meanwhile reloads the API
// keys, as it does later. The new thread inherits the blocked signals.
template <typename F>
std::invoke_result_t<F> UnlessTerminated(const char* what, Authenticator& auth,
                                         F load) {
  std::optional<std::invoke_result_t<F>> result;
  std::atomic<bool> done{false};
  std::thread loader([&] {
    result.emplace(load());
    done.store(true, std::memory_order_release);
  });
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, s);
  const timespec poll = {.tv_sec = 0, .tv_nsec = 10'000'000};  // 10 ms
  while (!done.load(std::memory_order_acquire)) {
    const int signal = sigtimedwait(&signals, nullptr, &poll);
    if (signal == SIGHUP) {
      ReloadApiKeys(auth);
    } else if (signal == SIGTERM || signal == SIGINT) {
      std::fprintf(stderr, "kvserve: signal %d during %s: stopped\n", signal,
                   what);
      std::fflush(stderr);
      std::_Exit(0);
    }
  }
  loader.join();
  return *std::move(result);
}

int Serve() {
  if (absl::Status s = IsaCapStatus(); !s.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", s.ToString().c_str());
    return 2;
  }
  // Before the model loads, so that a bad flag stops the server at once.
  absl::StatusOr<Security> security = SecurityFromFlags();
  if (!security.ok()) {
    std::fprintf(stderr, "kvserve: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::optional<http::HttpServer::Options>> http_options =
      HttpOptionsFromFlags();
  if (!http_options.ok()) {
    std::fprintf(stderr, "kvserve: %s\n",
                 std::string(http_options.status().message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "kvserve: %s; oneDNN ISA %s\n", CpuSummary().c_str(),
               DnnlIsaName().c_str());
  if (absl::GetFlag(FLAGS_session_dir_max_bytes) < 0) {
    std::fprintf(
        stderr,
        "kvserve: --session_dir_max_bytes=%lld must not be negative "
        "(0: no quota)\n",
        static_cast<long long>(absl::GetFlag(FLAGS_session_dir_max_bytes)));
    return 2;
  }
  auto model = UnlessTerminated("the model load", *security->auth, [] {
    return LoadServedModel(
        absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_tokenizer),
        absl::GetFlag(FLAGS_weight_dtype), absl::GetFlag(FLAGS_no_mmap));
  });
  if (!model.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", model.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "kvserve: weights %.1f MiB held as stored: %s\n",
               model->weights->TotalBytes() / 1048576.0,
               model->weights->TypeSummary().c_str());
  absl::StatusOr<ServedChatTemplate> chat =
      LoadChatTemplate(absl::GetFlag(FLAGS_chat_template), *model,
                       {.special_tokens_in_content =
                            absl::GetFlag(FLAGS_special_tokens_in_content)});
  if (!chat.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", chat.status().ToString().c_str());
    return 1;
  }
  if (chat->origin == "chatml") {
    std::fprintf(stderr,
                 "kvserve: the model has no chat template; chat turns use "
                 "ChatML (--chat_template=FILE sets one)\n");
  } else {
    std::fprintf(stderr, "kvserve: chat template from %s\n",
                 chat->origin == "file"
                     ? absl::GetFlag(FLAGS_chat_template).c_str()
                     : "the model file (tokenizer.chat_template)");
  }
  absl::StatusOr<DType> kv_dtype = ParseKvDType(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) {
    std::fprintf(stderr, "kvserve: --kv_dtype: %s\n",
                 kv_dtype.status().ToString().c_str());
    return 1;
  }
  const std::string numerics = absl::GetFlag(FLAGS_numerics);
  if (numerics != "auto" && numerics != "llama") {
    std::fprintf(stderr, "kvserve: --numerics=%s: must be auto or llama\n",
                 numerics.c_str());
    return 2;
  }
  if (absl::Status rows =
          CheckKvRows(*kv_dtype, model->weights->config.head_dim);
      !rows.ok()) {
    std::fprintf(stderr, "kvserve: --kv_dtype=%s: %s\n",
                 absl::GetFlag(FLAGS_kv_dtype).c_str(),
                 std::string(rows.message()).c_str());
    return 2;
  }
  if (numerics == "llama" && *kv_dtype != DType::kF32) {
    std::fprintf(stderr,
                 "kvserve: --numerics=llama computes llama.cpp's attention "
                 "over an f32 KV cache; --kv_dtype=%s is not one\n",
                 absl::GetFlag(FLAGS_kv_dtype).c_str());
    return 2;
  }
  EngineOptions options;
  options.llama_order = numerics == "llama";
  if (absl::GetFlag(FLAGS_kv_cache_bytes) < 0) {
    std::fprintf(stderr,
                 "kvserve: --kv_cache_bytes=%lld must not be negative (0: the "
                 "default budget)\n",
                 static_cast<long long>(absl::GetFlag(FLAGS_kv_cache_bytes)));
    return 2;
  }
  options.kv_cache_bytes =
      ChooseKvCacheBytes(model->weights->config, *kv_dtype);
  options.kv_dtype = *kv_dtype;
  options.kv_block_tokens = absl::GetFlag(FLAGS_kv_block_tokens);
  options.max_context = absl::GetFlag(FLAGS_max_context);
  options.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.max_step_slowdown = absl::GetFlag(FLAGS_max_step_slowdown);
  options.max_running = absl::GetFlag(FLAGS_max_running);
  options.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  options.session_dir = absl::GetFlag(FLAGS_session_dir);
  options.chat_template = chat->chat_template.get();
  options.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.max_sessions_per_owner = absl::GetFlag(FLAGS_max_sessions_per_owner);
  if (const int64_t ttl = absl::GetFlag(FLAGS_default_ttl_seconds); ttl != 0) {
    options.default_ttl = absl::Seconds(ttl);
  }
  options.session_dir_max_bytes = absl::GetFlag(FLAGS_session_dir_max_bytes);

  auto metrics = std::make_unique<Metrics>();
  metrics->SetWeightBytes(model->weights->TotalBytes());
  metrics->SetBuildInfo(KVSERVE_VERSION, KVSERVE_COMMIT,
                        IsaLevelName(EffectiveIsa()));
  auto engine = UnlessTerminated("the engine's start", *security->auth, [&] {
    return Engine::Create(options, model->weights.get(), model->tokenizer.get(),
                          metrics.get());
  });
  if (!engine.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  metrics->SetKvCacheFormat(DTypeName(options.kv_dtype),
                            (*engine)->kv_bytes_per_token());
  {
    const constrain::ReplyFormat& f = (*engine)->reply_format();
    std::fprintf(stderr, "kvserve: tool calls read as %s%s\n",
                 std::string(constrain::ToolCallFormatName(f.tools)).c_str(),
                 f.reasoning ? (f.reasoning_open
                                    ? "; replies open in reasoning (<think>)"
                                    : "; reasoning (<think>) returned apart")
                             : "");
  }

  const auto process_metrics = std::make_shared<ProcessMetrics>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string metrics_address = "-";
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (!metrics_listen.empty()) {
    absl::StatusOr<HostPort> hp = ParseHostPort(metrics_listen);
    if (!hp.ok()) {
      std::fprintf(stderr, "kvserve: --metrics_listen: %s\n",
                   hp.status().ToString().c_str());
      return 1;
    }
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvserve: cannot serve metrics on %s: %s\n",
                   metrics_listen.c_str(), e.what());
      return 1;
    }
    exposer->RegisterCollectable(metrics->registry());
    exposer->RegisterCollectable(process_metrics);
    metrics_address =
        absl::StrFormat("%s:%d", hp->host, exposer->GetListeningPorts().at(0));
  }

  const std::string listen = absl::GetFlag(FLAGS_listen);
  InferenceService service(
      engine->get(), model->weights.get(), model->tokenizer.get(), chat->origin,
      metrics.get(), security->auth.get(),
      {.write_timeout =
           absl::Seconds(absl::GetFlag(FLAGS_stream_write_timeout_seconds)),
       .max_unflushed_streams = absl::GetFlag(FLAGS_max_unflushed_streams)});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second kvserve on the same port
  // started without error and the kernel split the connections (and so the
  // sessions) between the two. A port in use is an error, as for metrics.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(listen, security->credentials, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr,
                 "kvserve: cannot listen on %s (--listen): the address is in "
                 "use or not this machine's\n",
                 listen.c_str());
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  std::unique_ptr<http::HttpServer> http_server;
  if (http_options->has_value()) {
    absl::StatusOr<std::unique_ptr<http::HttpServer>> created =
        http::HttpServer::Create(**http_options,
                                 {.engine = engine->get(),
                                  .weights = model->weights.get(),
                                  .tokenizer = model->tokenizer.get(),
                                  .metrics = metrics.get(),
                                  .auth = security->auth.get()});
    if (!created.ok()) {
      std::fprintf(stderr, "kvserve: --http_listen: %s\n",
                   std::string(created.status().message()).c_str());
      return 1;
    }
    http_server = *std::move(created);
    http_server->Start();
    std::fprintf(stderr, "kvserve: HTTP listening on %s:%d%s\n",
                 ParseHostPort((*http_options)->listen)->host.c_str(),
                 http_server->port(), http_server->tls() ? " (TLS)" : "");
  }
  std::fprintf(stderr, "kvserve: listening grpc=%s:%d metrics=%s\n",
               security->listen.host.c_str(), port, metrics_address.c_str());
  std::fflush(stderr);

  const int signal =
      WaitForTerminationSignal([&] { ReloadApiKeys(*security->auth); });
  std::fprintf(stderr, "kvserve: signal %d, draining\n", signal);
  server->GetHealthCheckService()->SetServingStatus(false);
  if (http_server) http_server->SetServing(false);
  (*engine)->Drain();
  // In-flight RPCs get the grace period to finish; then the rest are
  // cancelled. (gRPC's own Shutdown deadline also waits on idle client
  // connections, so it is given none.)
  const absl::Time deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  while (metrics->in_flight() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (http_server) http_server->Stop();  // cancels the streams still open
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  engine->reset();  // writes the sessions' KV snapshots
  std::fprintf(stderr, "kvserve: stopped\n");
  std::fflush(stderr);
  // Skips the metrics exposer's destructor, which blocks for about 2 s, and
  // nothing else of use: every file is written and closed.
  std::_Exit(0);
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::ExecWithPassiveOmpWaitUnlessSet(argv);
  kvserve::ConfigureUsage();
  // Signals go to the thread that waits for them, never to gRPC's threads.
  kvserve::BlockTerminationSignals();
  if (absl::Status s = kvserve::ApplyEnvironmentFlags("KVSERVE_"); !s.ok()) {
    std::fprintf(stderr, "kvserve: %s\n", s.ToString().c_str());
    return 2;
  }
  std::optional<std::vector<char*>> parsed =
      kvserve::ParseCommandLine(argc, argv);
  if (!parsed.has_value()) return 0;  // --help or --version
  const std::vector<char*>& rest = *parsed;
  if (rest.size() > 1) {
    std::fprintf(stderr, "kvserve: unexpected argument \"%s\" (see --help)\n",
                 rest[1]);
    return 2;
  }
  return kvserve::Serve();
}

// Fuzzes the gRPC service with arbitrary serialized requests: an in-process
// InferenceService (server/inference_service.h) over the built-in model,
// set up once as server/main.cc does, called through grpc::GenericStub so
// that bytes which do not parse as the request reach the server too.
//
// Input: up to four calls, each [method byte][u8 length][that many request
// bytes] (the last call takes the rest). The method byte picks one of the
// service's methods. Sessions are kept small (max_context 64) so that a
// Generate costs a few milliseconds, and every session is deleted after each
// input (through the engine, for every owner).
//
// Promises checked: every call finishes (no deadline hit); a request that
// parses never ends UNKNOWN or INTERNAL (a handler bug or a status that
// escaped status.h's mapping); responses parse as their message type.
// KVSERVE_FUZZ_VERBOSE=1 prints each call's time.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/chat/chat_template.h"
#include "core/engine/engine.h"
#include "core/model/builtin_model.h"
#include "kvserve/v1/inference.grpc.pb.h"
#include "server/auth.h"
#include "server/inference_service.h"
#include "server/metrics.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

struct Method {
  const char* name;
  bool streaming;
  const google::protobuf::Message* request;
  const google::protobuf::Message* response;
};

template <typename Req, typename Resp>
Method M(const char* name, bool streaming = false) {
  return {name, streaming, &Req::default_instance(), &Resp::default_instance()};
}

const std::vector<Method>& Methods() {
  static const std::vector<Method> methods = {
      M<v1::GetModelInfoRequest, v1::ModelInfo>("GetModelInfo"),
      M<v1::CreateSessionRequest, v1::Session>("CreateSession"),
      M<v1::GetSessionRequest, v1::Session>("GetSession"),
      M<v1::ListSessionsRequest, v1::ListSessionsResponse>("ListSessions"),
      M<v1::DeleteSessionRequest, v1::DeleteSessionResponse>("DeleteSession"),
      M<v1::ForkSessionRequest, v1::Session>("ForkSession"),
      M<v1::TruncateSessionRequest, v1::Session>("TruncateSession"),
      M<v1::AppendRequest, v1::AppendResponse>("Append"),
      M<v1::GenerateRequest, v1::GenerateResponse>("Generate", true),
      M<v1::TokenizeRequest, v1::TokenizeResponse>("Tokenize"),
      M<v1::DetokenizeRequest, v1::DetokenizeResponse>("Detokenize"),
      M<v1::ApplyChatTemplateRequest, v1::ApplyChatTemplateResponse>(
          "ApplyChatTemplate"),
  };
  return methods;
}

// Everything main.cc sets up, never destroyed (the process exits).
struct Server {
  LoadedModel model;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<InferenceService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<grpc::GenericStub> stub;
};

Server& GetServer() {
  static Server* s = new Server;
  return *s;
}

void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }

// One call of `m` with `bytes` as the serialized request.
void Call(const Method& m, const std::string& bytes) {
  Server& s = GetServer();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::CompletionQueue cq;
  const std::string path = std::string("/kvserve.v1.Inference/") + m.name;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      s.stub->PrepareCall(&ctx, path, &cq);
  void* tag;
  bool ok;
  auto next = [&](intptr_t want) {
    FUZZ_CHECK(cq.Next(&tag, &ok) && tag == Tag(want), "completion queue");
    return ok;
  };
  call->StartCall(Tag(1));
  bool alive = next(1);
  if (alive) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->Write(request, Tag(2));
    alive = next(2);
  }
  if (alive) {
    call->WritesDone(Tag(3));
    alive = next(3);
  }
  int responses = 0;
  while (alive) {
    grpc::ByteBuffer response;
    call->Read(&response, Tag(4));
    if (!next(4)) break;
    ++responses;
    std::vector<grpc::Slice> slices;
    FUZZ_CHECK(response.Dump(&slices).ok(), "response dump");
    std::string payload;
    for (const grpc::Slice& sl : slices) {
      payload.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    std::unique_ptr<google::protobuf::Message> msg(m.response->New());
    FUZZ_CHECK(msg->ParseFromString(payload), "%s: unparsable response",
               m.name);
  }
  grpc::Status status;
  call->Finish(&status, Tag(5));
  next(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  FUZZ_CHECK(status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED,
             "%s did not finish within the deadline", m.name);
  std::unique_ptr<google::protobuf::Message> req(m.request->New());
  if (req->ParseFromString(bytes)) {
    FUZZ_CHECK(status.error_code() != grpc::StatusCode::UNKNOWN &&
                   status.error_code() != grpc::StatusCode::INTERNAL,
               "%s: %d %s", m.name, static_cast<int>(status.error_code()),
               status.error_message().c_str());
  }
  if (status.ok() && !m.streaming) {
    FUZZ_CHECK(responses == 1, "%s: %d responses", m.name, responses);
  }
}

// Deletes every session of every owner.
void DeleteAllSessions() {
  Engine& engine = *GetServer().engine;
  absl::Notification listed;
  SessionList list;
  engine.ListSessions("", /*all_owners=*/true, "", 1000,
                      [&](absl::StatusOr<SessionList> l) {
                        if (l.ok()) list = *std::move(l);
                        listed.Notify();
                      });
  listed.WaitForNotification();
  for (const SessionInfo& info : list.sessions) {
    absl::Notification deleted;
    engine.DeleteSession(info.id, info.owner,
                         [&](absl::StatusOr<bool>) { deleted.Notify(); });
    deleted.WaitForNotification();
  }
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  Server& s = GetServer();
  absl::StatusOr<LoadedModel> model = LoadRandomModel(BuiltinModelOptions());
  FUZZ_CHECK(model.ok(), "%s", model.status().ToString().c_str());
  s.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat =
      ChatTemplate::Create(kChatMlTemplate, "<s>", "</s>");
  FUZZ_CHECK(chat.ok(), "%s", chat.status().ToString().c_str());
  s.chat_template = *std::move(chat);
  s.metrics = std::make_unique<Metrics>();
  absl::StatusOr<std::unique_ptr<Authenticator>> auth =
      Authenticator::Create({});
  FUZZ_CHECK(auth.ok(), "%s", auth.status().ToString().c_str());
  s.auth = *std::move(auth);

  EngineOptions options;
  options.max_context = 64;  // bounds every prompt and generation
  options.default_max_tokens = 4;
  options.max_batch_tokens = 64;
  options.threads = 1;
  options.kv_block_tokens = 16;
  options.chat_template = s.chat_template.get();
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, s.model.weights.get(), s.model.tokenizer.get(), s.metrics.get());
  FUZZ_CHECK(engine.ok(), "%s", engine.status().ToString().c_str());
  s.engine = *std::move(engine);
  s.service = std::make_unique<InferenceService>(
      s.engine.get(), s.model.weights.get(), s.model.tokenizer.get(), "chatml",
      s.metrics.get(), s.auth.get());
  grpc::ServerBuilder builder;
  builder.RegisterService(s.service.get());
  s.server = builder.BuildAndStart();
  FUZZ_CHECK(s.server != nullptr, "server did not start");
  s.stub = std::make_unique<grpc::GenericStub>(
      s.server->InProcessChannel(grpc::ChannelArguments()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const std::vector<Method>& methods = Methods();
  size_t pos = 0;
  for (int call = 0; call < 4 && pos < size; ++call) {
    const Method& m = methods[data[pos++] % methods.size()];
    size_t n = size - pos;
    if (call < 3 && pos < size) {
      const size_t length = data[pos++];
      n = std::min(length, size - pos);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Call(m, std::string(reinterpret_cast<const char*>(data) + pos, n));
    if (std::getenv("KVSERVE_FUZZ_VERBOSE") != nullptr) {
      std::fprintf(stderr, "%s: %.1f ms\n", m.name,
                   std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
    }
    pos += n;
  }
  DeleteAllSessions();
  return 0;
}

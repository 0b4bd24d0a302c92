#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve {
namespace {

constexpr absl::Duration kDefaultUnaryTimeout = absl::Seconds(30);
// Large enough for the token history of any context GetSession returns.
constexpr int kMaxReceiveMessageBytes = 64 << 20;

absl::StatusOr<std::string> ReadPemFile(const char* what,
                                        const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read the ", what, " file ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " file ", path));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ConnectOptions& options) {
  if (!options.tls()) return grpc::InsecureChannelCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both tls_cert_file and tls_key_file "
        "(kvctl: both --tls_cert and --tls_key)");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile("CA", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPemFile("client certificate", options.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPemFile("client key", options.tls_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

// Printable ASCII without surrounding spaces: what gRPC sends as a
// metadata value and the server reads back unchanged.
bool IsSendableKey(absl::string_view key) {
  if (key.empty() || key.front() == ' ' || key.back() == ' ') return false;
  for (char c : key) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

void Client::PrepareContext(grpc::ClientContext* context,
                            const CallOptions& options,
                            absl::string_view session_id,
                            absl::Duration default_timeout) const {
  const absl::Duration timeout = options.timeout.value_or(default_timeout);
  // Beyond a year a deadline means "none" (and avoids clock overflow).
  if (timeout < absl::Hours(24 * 365)) {
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoNanoseconds(timeout));
  }
  context->set_wait_for_ready(options.wait_for_ready);
  if (!session_id.empty()) {
    context->AddMetadata(kSessionIdMetadataKey, std::string(session_id));
  }
  if (!api_key_.empty()) {
    context->AddMetadata(kAuthorizationMetadataKey,
                         absl::StrCat("Bearer ", api_key_));
  }
}

// Attaches a context to a Cancellation for the scope of one call.
class CancellationScope {
 public:
  CancellationScope(Cancellation* cancellation, grpc::ClientContext* context)
      : cancellation_(cancellation), context_(context) {
    attached_ = cancellation_ == nullptr || cancellation_->Attach(context_);
  }
  ~CancellationScope() {
    if (cancellation_ != nullptr && attached_) cancellation_->Detach(context_);
  }
  CancellationScope(const CancellationScope&) = delete;
  CancellationScope& operator=(const CancellationScope&) = delete;

  // False when the Cancellation had fired before the call started.
  bool attached() const { return attached_; }

 private:
  Cancellation* cancellation_;
  grpc::ClientContext* context_;
  bool attached_ = false;
};

void Cancellation::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : contexts_) context->TryCancel();
}

bool Cancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool Cancellation::Attach(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return false;
  contexts_.push_back(context);
  return true;
}

void Cancellation::Detach(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context),
                  contexts_.end());
}

absl::string_view ServingStatusName(ServingStatus status) {
  return status == ServingStatus::kServing ? "SERVING" : "NOT_SERVING";
}

absl::string_view FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_CONTEXT_FULL:
      return "context_full";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "unspecified";
  }
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical code numbers.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    absl::string_view address, const ConnectOptions& options) {
  if (address.empty()) {
    return absl::InvalidArgumentError("empty server address");
  }
  if (address.find_first_of(" \t\r\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid server address \"", address, "\""));
  }
  if (!options.api_key.empty() && !IsSendableKey(options.api_key)) {
    return absl::InvalidArgumentError(
        "the API key must be printable ASCII without surrounding spaces");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeCredentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(std::string(address), *credentials, args);
  if (channel == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a channel to ", address));
  }
  return std::make_unique<Client>(std::move(channel), options.api_key);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, std::string api_key)
    : channel_(std::move(channel)),
      api_key_(std::move(api_key)),
      inference_(v1::Inference::NewStub(channel_)),
      health_(::grpc::health::v1::Health::NewStub(channel_)) {}

template <typename Response, typename Call>
absl::StatusOr<Response> Client::Unary(const CallOptions& options,
                                       absl::string_view session_id,
                                       Call&& call) {
  grpc::ClientContext context;
  PrepareContext(&context, options, session_id, kDefaultUnaryTimeout);
  CancellationScope scope(options.cancellation, &context);
  if (!scope.attached()) {
    return absl::CancelledError("cancelled before the call started");
  }
  Response response;
  grpc::Status status = call(&context, &response);
  if (!status.ok()) return ToAbslStatus(status);
  return response;
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo(const CallOptions& options) {
  return Unary<v1::ModelInfo>(
      options, "", [&](grpc::ClientContext* context, v1::ModelInfo* response) {
        return inference_->GetModelInfo(context, v1::GetModelInfoRequest(),
                                        response);
      });
}

absl::StatusOr<v1::Session> Client::CreateSession(
    const v1::CreateSessionRequest& request, const CallOptions& options) {
  // The client names the session, so that its very first call is routed
  // like every later one; but a server with API keys names its sessions.
  v1::CreateSessionRequest named = request;
  if (named.session_id().empty() && api_key_.empty()) {
    named.set_session_id(NewSessionId());
  }
  return Unary<v1::Session>(
      options, named.session_id(),
      [&](grpc::ClientContext* context, v1::Session* response) {
        return inference_->CreateSession(context, named, response);
      });
}

std::string NewSessionId() {
  thread_local absl::BitGen bitgen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(bitgen),
                         absl::Uniform<uint64_t>(bitgen));
}

absl::StatusOr<v1::Session> Client::GetSession(
    const v1::GetSessionRequest& request, const CallOptions& options) {
  return Unary<v1::Session>(
      options, request.session_id(),
      [&](grpc::ClientContext* context, v1::Session* response) {
        return inference_->GetSession(context, request, response);
      });
}

absl::StatusOr<v1::ListSessionsResponse> Client::ListSessions(
    const v1::ListSessionsRequest& request, const CallOptions& options) {
  return Unary<v1::ListSessionsResponse>(
      options, "",
      [&](grpc::ClientContext* context, v1::ListSessionsResponse* response) {
        return inference_->ListSessions(context, request, response);
      });
}

absl::Status Client::DeleteSession(const v1::DeleteSessionRequest& request,
                                   const CallOptions& options) {
  return Unary<v1::DeleteSessionResponse>(
             options, request.session_id(),
             [&](grpc::ClientContext* context,
                 v1::DeleteSessionResponse* response) {
               return inference_->DeleteSession(context, request, response);
             })
      .status();
}

absl::StatusOr<v1::Session> Client::ForkSession(
    const v1::ForkSessionRequest& request, const CallOptions& options) {
  return Unary<v1::Session>(
      options, request.session_id(),
      [&](grpc::ClientContext* context, v1::Session* response) {
        return inference_->ForkSession(context, request, response);
      });
}

absl::StatusOr<v1::Session> Client::TruncateSession(
    const v1::TruncateSessionRequest& request, const CallOptions& options) {
  return Unary<v1::Session>(
      options, request.session_id(),
      [&](grpc::ClientContext* context, v1::Session* response) {
        return inference_->TruncateSession(context, request, response);
      });
}

absl::StatusOr<v1::AppendResponse> Client::Append(
    const v1::AppendRequest& request, const CallOptions& options) {
  return Unary<v1::AppendResponse>(
      options, request.session_id(),
      [&](grpc::ClientContext* context, v1::AppendResponse* response) {
        return inference_->Append(context, request, response);
      });
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(
    const v1::TokenizeRequest& request, const CallOptions& options) {
  return Unary<v1::TokenizeResponse>(
      options, "",
      [&](grpc::ClientContext* context, v1::TokenizeResponse* response) {
        return inference_->Tokenize(context, request, response);
      });
}

absl::StatusOr<v1::ApplyChatTemplateResponse> Client::ApplyChatTemplate(
    const v1::ApplyChatTemplateRequest& request, const CallOptions& options) {
  return Unary<v1::ApplyChatTemplateResponse>(
      options, "",
      [&](grpc::ClientContext* context,
          v1::ApplyChatTemplateResponse* response) {
        return inference_->ApplyChatTemplate(context, request, response);
      });
}

absl::StatusOr<v1::DetokenizeResponse> Client::Detokenize(
    const v1::DetokenizeRequest& request, const CallOptions& options) {
  return Unary<v1::DetokenizeResponse>(
      options, "",
      [&](grpc::ClientContext* context, v1::DetokenizeResponse* response) {
        return inference_->Detokenize(context, request, response);
      });
}

absl::StatusOr<ServingStatus> Client::Health(const CallOptions& options) {
  using ::grpc::health::v1::HealthCheckResponse;
  absl::StatusOr<HealthCheckResponse> response = Unary<HealthCheckResponse>(
      options, "", [&](grpc::ClientContext* context, HealthCheckResponse* out) {
        return health_->Check(context, ::grpc::health::v1::HealthCheckRequest(),
                              out);
      });
  if (!response.ok()) return response.status();
  return response->status() == HealthCheckResponse::SERVING
             ? ServingStatus::kServing
             : ServingStatus::kNotServing;
}

absl::StatusOr<v1::GenerateFinal> Client::Generate(
    const v1::GenerateRequest& request, const TokenCallback& on_token,
    const CallOptions& options) {
  if (request.n() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generate returns one choice, and n is ", request.n(),
                     ": use GenerateChoices"));
  }
  ChoiceTokenCallback each;
  if (on_token) {
    each = [&on_token](int, const v1::GeneratedToken& token) {
      return on_token(token);
    };
  }
  absl::StatusOr<std::vector<v1::GenerateFinal>> finals =
      GenerateChoices(request, each, options);
  if (!finals.ok()) return finals.status();
  return std::move(finals->front());
}

absl::StatusOr<std::vector<v1::GenerateFinal>> Client::GenerateChoices(
    const v1::GenerateRequest& request, const ChoiceTokenCallback& on_token,
    const CallOptions& options) {
  grpc::ClientContext context;
  PrepareContext(&context, options, request.session_id(),
                 absl::InfiniteDuration());
  CancellationScope scope(options.cancellation, &context);
  if (!scope.attached()) {
    return absl::CancelledError("cancelled before the call started");
  }
  const int n = std::max(request.n(), 1);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      inference_->Generate(&context, request);
  v1::GenerateResponse response;
  std::vector<std::optional<v1::GenerateFinal>> finals(n);
  bool cancelled_by_callback = false;
  absl::Status bad_index;
  while (reader->Read(&response)) {
    const int index = response.index();
    if (index < 0 || index >= n) {
      bad_index = absl::InternalError(absl::StrCat(
          "the server sent choice ", index, " of a request for ", n));
    } else if (response.has_token()) {
      if (on_token && !on_token(index, response.token())) {
        cancelled_by_callback = true;
      }
    } else if (response.has_final()) {
      finals[index] = std::move(*response.mutable_final());
    }
    if (cancelled_by_callback || !bad_index.ok()) {
      context.TryCancel();
      break;
    }
  }
  // After a cancel the stream ends promptly; drain it so Finish never waits
  // on unread messages.
  while ((cancelled_by_callback || !bad_index.ok()) &&
         reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  if (cancelled_by_callback) {
    return absl::CancelledError("cancelled by the token callback");
  }
  if (!bad_index.ok()) return bad_index;
  if (!status.ok()) return ToAbslStatus(status);
  std::vector<v1::GenerateFinal> out;
  for (int i = 0; i < n; ++i) {
    if (!finals[i].has_value()) {
      return absl::InternalError(
          n == 1 ? std::string("the stream ended without a final message")
                 : absl::StrCat("the stream ended without choice ", i,
                                "'s final message"));
    }
    out.push_back(*std::move(finals[i]));
  }
  return out;
}

}  // namespace kvserve

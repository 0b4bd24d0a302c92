// kvserve::Client: a thin, synchronous C++ client for kvserve.v1.Inference
// and grpc.health.v1.Health.
//
// Every method maps one RPC and returns its gRPC status as an absl::Status
// with the same code and message. Session-scoped calls send the session id in
// the `x-session-id` metadata so a router can pin a session to one replica.
// CreateSession names the new session itself (NewSessionId) unless the
// request does or the client has an API key (a server with API keys refuses
// client-chosen ids), and sends that id too. Calls without a session
// (ListSessions, GetModelInfo, an ephemeral Generate, ...) send none. With
// an API key every call, health checks included, sends
// `authorization: Bearer KEY`.
//
// Thread-safety: a Client is safe to use from many threads at once (the
// underlying channel and stubs are). A Cancellation may be triggered from any
// thread.
#ifndef KVSERVE_CLIENT_CLIENT_H_
#define KVSERVE_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kvserve/v1/inference.grpc.pb.h"

namespace kvserve {

// The metadata key that carries the session id of session-scoped calls.
inline constexpr char kSessionIdMetadataKey[] = "x-session-id";
// The metadata key that carries "Bearer KEY".
inline constexpr char kAuthorizationMetadataKey[] = "authorization";

// Cancels the calls it is attached to: those running when Cancel() is called
// and every later one (they fail at once with CANCELLED). Thread-safe; one
// Cancellation may serve several calls, sequential or concurrent.
class Cancellation {
 public:
  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  void Cancel();
  bool cancelled() const;

 private:
  friend class CancellationScope;
  // Returns false (and attaches nothing) when already cancelled.
  bool Attach(grpc::ClientContext* context);
  void Detach(grpc::ClientContext* context);

  mutable std::mutex mu_;
  bool cancelled_ = false;                      // guarded by mu_
  std::vector<grpc::ClientContext*> contexts_;  // guarded by mu_
};

struct CallOptions {
  // Deadline relative to the start of the call. Unset: 30 s for unary calls,
  // none for Generate (a stream lasts as long as its output).
  std::optional<absl::Duration> timeout;
  // Wait for the channel to become ready instead of failing fast with
  // UNAVAILABLE when the server cannot be reached (bounded by the timeout).
  bool wait_for_ready = false;
  // Not owned; may be null. Must outlive the call.
  Cancellation* cancellation = nullptr;
};

// How Connect reaches the server.
struct ConnectOptions {
  // TLS when any of the three is set. PEM files: the CA certificates that
  // verify the server (empty: the system's roots), and a client
  // certificate chain with its key for mutual TLS (both or neither).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Sent as "authorization: Bearer KEY" on every call; empty: none.
  std::string api_key;

  bool tls() const {
    return !tls_ca_file.empty() || !tls_cert_file.empty() ||
           !tls_key_file.empty();
  }
};

enum class ServingStatus { kServing, kNotServing };

absl::string_view ServingStatusName(ServingStatus status);
// "length", "stop", "eos", "context_full", "cancelled" or "unspecified".
absl::string_view FinishReasonName(v1::FinishReason reason);

// gRPC status -> absl::Status, same code and message.
absl::Status ToAbslStatus(const grpc::Status& status);

// A fresh session id: 128 random bits as 32 lowercase hex digits.
std::string NewSessionId();

class Client {
 public:
  // Called for each streamed token, on the thread that called Generate.
  // Return false to cancel the stream (Generate then returns CANCELLED).
  using TokenCallback = std::function<bool(const v1::GeneratedToken& token)>;
  // GenerateChoices' callback: also the token's choice index.
  using ChoiceTokenCallback =
      std::function<bool(int index, const v1::GeneratedToken& token)>;

  // A channel to `address` ("host:port"), plaintext unless `options` asks
  // for TLS. The channel connects lazily: an unreachable server, or one
  // whose TLS handshake fails, shows up as UNAVAILABLE on the first call.
  // INVALID_ARGUMENT for a bad address, an unreadable PEM file (named), a
  // client certificate without its key or the reverse, or an API key that
  // cannot be sent as metadata (the key itself is never in the message).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      absl::string_view address, const ConnectOptions& options = {});
  // Over an existing channel (tests, custom credentials); `api_key` as in
  // ConnectOptions.
  explicit Client(std::shared_ptr<grpc::Channel> channel,
                  std::string api_key = "");

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  absl::StatusOr<v1::ModelInfo> GetModelInfo(const CallOptions& options = {});

  absl::StatusOr<v1::Session> CreateSession(
      const v1::CreateSessionRequest& request, const CallOptions& options = {});
  absl::StatusOr<v1::Session> GetSession(const v1::GetSessionRequest& request,
                                         const CallOptions& options = {});
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(
      const v1::ListSessionsRequest& request, const CallOptions& options = {});
  absl::Status DeleteSession(const v1::DeleteSessionRequest& request,
                             const CallOptions& options = {});
  absl::StatusOr<v1::Session> ForkSession(const v1::ForkSessionRequest& request,
                                          const CallOptions& options = {});
  absl::StatusOr<v1::Session> TruncateSession(
      const v1::TruncateSessionRequest& request,
      const CallOptions& options = {});
  absl::StatusOr<v1::AppendResponse> Append(const v1::AppendRequest& request,
                                            const CallOptions& options = {});

  // Streams tokens to `on_token` (may be empty) and returns the final message.
  // A stream that ends without one is an error (INTERNAL unless the server
  // gave a status).
  // INVALID_ARGUMENT for request.n() > 1 (GenerateChoices returns them).
  absl::StatusOr<v1::GenerateFinal> Generate(const v1::GenerateRequest& request,
                                             const TokenCallback& on_token,
                                             const CallOptions& options = {});
  // A Generate of request.n() choices (0 or 1: one): tokens go to
  // `on_token` with their choice's index as they come; returns each
  // choice's final message, in index order. A stream that ends without
  // every choice's final, or names a choice outside [0, n), is an error.
  absl::StatusOr<std::vector<v1::GenerateFinal>> GenerateChoices(
      const v1::GenerateRequest& request, const ChoiceTokenCallback& on_token,
      const CallOptions& options = {});

  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request, const CallOptions& options = {});
  absl::StatusOr<v1::DetokenizeResponse> Detokenize(
      const v1::DetokenizeRequest& request, const CallOptions& options = {});
  absl::StatusOr<v1::ApplyChatTemplateResponse> ApplyChatTemplate(
      const v1::ApplyChatTemplateRequest& request,
      const CallOptions& options = {});

  // grpc.health.v1 Check of the whole server (service ""). UNKNOWN and
  // SERVICE_UNKNOWN count as NOT_SERVING; a failed RPC is an error.
  absl::StatusOr<ServingStatus> Health(const CallOptions& options = {});

 private:
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(const CallOptions& options,
                                 absl::string_view session_id, Call&& call);

  void PrepareContext(grpc::ClientContext* context, const CallOptions& options,
                      absl::string_view session_id,
                      absl::Duration default_timeout) const;

  std::shared_ptr<grpc::Channel> channel_;
  const std::string api_key_;
  std::unique_ptr<v1::Inference::Stub> inference_;
  std::unique_ptr<::grpc::health::v1::Health::Stub> health_;
};

}  // namespace kvserve

#endif  // KVSERVE_CLIENT_CLIENT_H_

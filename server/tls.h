// Transport security of the gRPC port: TLS (--tls_cert, --tls_key),
// mutual TLS (--tls_client_ca), and the rule that a port reachable from
// other machines is served in plaintext only when asked to (--insecure).
#ifndef KVSERVE_SERVER_TLS_H_
#define KVSERVE_SERVER_TLS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/settings.h"

namespace kvserve {

struct TlsOptions {
  std::string cert_file = "";  // PEM certificate chain, the server's first
  std::string key_file = "";   // PEM private key of that certificate
  // PEM CA certificates; set: clients must present a certificate they
  // signed (mutual TLS). Empty: no client certificate is asked for.
  std::string client_ca_file = "";

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// Plaintext credentials when !options.enabled(), else TLS. The files are
// read and checked here, so a bad one stops the server at start:
// INVALID_ARGUMENT naming the flag and file for a missing half (a key
// without a certificate, a client CA without either), an unreadable file,
// PEM that does not parse, or a key that does not match the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

// 127.0.0.0/8, ::1 (also v4-mapped 127/8) and "localhost". Any other name,
// even one that resolves to loopback, counts as reachable from outside.
bool IsLoopbackHost(std::string_view host);

// OK for a loopback address, TLS, or `insecure`; otherwise
// FAILED_PRECONDITION saying what to set.
absl::Status CheckListenSecurity(std::string_view listen, const HostPort& hp,
                                 bool tls, bool insecure);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_TLS_H_

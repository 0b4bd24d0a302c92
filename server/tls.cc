#include "server/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kvserve {
namespace {

absl::StatusOr<std::string> ReadPemFile(const char* flag,
                                        const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s=%s: cannot read it: %s", flag, path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: read error", flag, path));
  }
  return text.str();
}

// OpenSSL's earliest queued error as text (and the queue cleared).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block found";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  return buffer;
}

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM text, or null.
std::unique_ptr<X509, X509Deleter> FirstCertificate(const std::string& pem) {
  auto bio = MemoryBio(pem);
  return std::unique_ptr<X509, X509Deleter>(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options) {
  if (!options.enabled()) {
    if (!options.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs TLS: set --tls_cert and --tls_key too");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert (certificate chain) and --tls_key (its "
        "private key)");
  }
  absl::StatusOr<std::string> cert = ReadPemFile("tls_cert", options.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("tls_key", options.key_file);
  if (!key.ok()) return key.status();

  ERR_clear_error();
  auto x509 = FirstCertificate(*cert);
  if (x509 == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls_cert=%s: not a PEM certificate: %s",
                        options.cert_file, OpenSslError()));
  }
  auto key_bio = MemoryBio(*key);
  std::unique_ptr<EVP_PKEY, KeyDeleter> pkey(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls_key=%s: not a PEM private key (or one with a passphrase): %s",
        options.key_file, OpenSslError()));
  }
  if (X509_check_private_key(x509.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls_key=%s is not the private key of the "
                        "certificate in --tls_cert=%s",
                        options.key_file, options.cert_file));
  }

  grpc::SslServerCredentialsOptions ssl(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!options.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemFile("tls_client_ca", options.client_ca_file);
    if (!ca.ok()) return ca.status();
    if (FirstCertificate(*ca) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--tls_client_ca=%s: no PEM certificate: %s",
                          options.client_ca_file, OpenSslError()));
    }
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

bool IsLoopbackHost(std::string_view host_view) {
  absl::string_view host(host_view.data(), host_view.size());
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return false;
  }
  const std::string address(host);
  in_addr v4;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) ||
           (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

absl::Status CheckListenSecurity(std::string_view listen, const HostPort& hp,
                                 bool tls, bool insecure) {
  if (tls || insecure || IsLoopbackHost(hp.host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--listen=%s is reachable from other machines and TLS is off: set "
      "--tls_cert and --tls_key, or --insecure (KVSERVE_INSECURE=1) when TLS "
      "terminates in front of kvserve (a router or service mesh)",
      absl::string_view(listen.data(), listen.size())));
}

}  // namespace kvserve

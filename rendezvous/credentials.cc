#include "rendezvous/credentials.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "grpc/support/log.h"
#include "spdlog/spdlog.h"

namespace dgt::rendezvous {
namespace {

// The most bytes of a PEM or token file read (1 MiB): a CA bundle is far smaller.
constexpr int64_t kMaxCredentialFileBytes = 1 << 20;

// Reads a credential file. Errors (InvalidArgument, naming `what` and the path): "cannot read
// '<path>' (<strerror>)", "'<path>' is a directory, not a file", "'<path>' is larger than
// 1048576 bytes".
absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  CappedRead read = ReadFileUpTo(path, kMaxCredentialFileBytes);
  switch (read.outcome) {
    case CappedRead::Outcome::kOk:
      return std::move(read.text);
    case CappedRead::Outcome::kDirectory:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", path, "' is a directory, not a file"));
    case CappedRead::Outcome::kUnreadable:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot read '", path, "' (", std::strerror(read.error), ")"));
    case CappedRead::Outcome::kTooLarge:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": '", path, "' is larger than ", kMaxCredentialFileBytes, " bytes"));
}

// Checks that `key_pem` is the private key of `cert_pem` before gRPC sees them: gRPC only logs
// "Invalid private key" and fails to listen, which read as "address in use".
// Errors: InvalidArgument naming the flags and files.
absl::Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem,
                          absl::string_view cert_flag, const std::string& cert_file,
                          absl::string_view key_flag, const std::string& key_file) {
  // Never prompt on the terminal for an encrypted key's passphrase.
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, no_passphrase, nullptr), &X509_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr), &EVP_PKEY_free);
  const bool match = cert && key && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();  // OpenSSL's error queue is per thread; leave nothing for gRPC to find.
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_flag, ": '", cert_file, "' holds no PEM certificate"));
  }
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, ": '", key_file, "' holds no PEM private key (or one with a passphrase)"));
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, " '", key_file, "' is not the private key of ", cert_flag, " '", cert_file, "'"));
  }
  return absl::OkStatus();
}

// Checks that `pem` holds at least one PEM certificate (a CA bundle may hold several): gRPC takes
// anything and fails every handshake later, which reads as an unreachable service.
// Errors: InvalidArgument naming the flag and file.
absl::Status CheckPemCertificates(const std::string& pem, absl::string_view flag,
                                  const std::string& file) {
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr), &X509_free);
  ERR_clear_error();
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", file, "' holds no PEM certificate"));
  }
  return absl::OkStatus();
}

// The client's PEM files, read and checked (CheckClientTlsFiles).
absl::StatusOr<grpc::SslCredentialsOptions> ReadClientTls(const TlsFiles& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--rdzv-tls-cert and --rdzv-tls-key must be given together");
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadFile(tls.ca_file, "--rdzv-tls-ca");
    if (!ca.ok()) return ca.status();
    if (auto s = CheckPemCertificates(*ca, "--rdzv-tls-ca", tls.ca_file); !s.ok()) return s;
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty()) {
    auto cert = ReadFile(tls.cert_file, "--rdzv-tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(tls.key_file, "--rdzv-tls-key");
    if (!key.ok()) return key.status();
    if (auto s = CheckKeyPair(*cert, *key, "--rdzv-tls-cert", tls.cert_file, "--rdzv-tls-key",
                              tls.key_file);
        !s.ok()) {
      return s;
    }
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return options;
}

void LogGrpcAtDebug(gpr_log_func_args* args) {
  spdlog::debug("grpc: {}:{}: {}", args->file, args->line, args->message);
}

}  // namespace

void RouteGrpcLogsToDebug() { gpr_set_log_function(&LogGrpcAtDebug); }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (tls.empty()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    // Only --tls-client-ca: client certificates are checked on top of the server's own TLS.
    return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca '", tls.ca_file,
                                                   "' needs --tls-cert and --tls-key (mutual TLS "
                                                   "is on top of the service's own TLS)"));
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        tls.key_file.empty()
            ? absl::StrCat("--tls-cert '", tls.cert_file, "' needs --tls-key (given together)")
            : absl::StrCat("--tls-key '", tls.key_file, "' needs --tls-cert (given together)"));
  }
  auto cert = ReadFile(tls.cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(tls.key_file, "--tls-key");
  if (!key.ok()) return key.status();
  if (auto s = CheckKeyPair(*cert, *key, "--tls-cert", tls.cert_file, "--tls-key", tls.key_file);
      !s.ok()) {
    return s;
  }
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.ca_file.empty()) {
    auto ca = ReadFile(tls.ca_file, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    if (auto s = CheckPemCertificates(*ca, "--tls-client-ca", tls.ca_file); !s.ok()) return s;
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls) {
  if (tls.empty()) return grpc::InsecureChannelCredentials();
  auto options = ReadClientTls(tls);
  if (!options.ok()) return options.status();
  return grpc::SslCredentials(*options);
}

absl::Status CheckClientTlsFiles(const TlsFiles& tls) {
  if (tls.empty()) return absl::OkStatus();
  return ReadClientTls(tls).status();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  // With the reason ("Permission denied": a file root can read, not the job's user).
  auto text = ReadFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  }
  return token;
}

}  // namespace dgt::rendezvous

// TLS for causeway's TCP connections, on OpenSSL (docs/operations.md "TLS").
// One context per program (an SSL_CTX: the cluster's CA, this program's
// certificate and key, TLS 1.3 only), one SSL object per connection. Both
// daemons wrap it in src/net (memory BIOs under libuv), the client library in
// src/client (an SSL over its blocking socket). Unix sockets stay plaintext:
// whoever reaches one already is on the host.
//
// Peers are verified against the cluster's CA. A side that connects also
// checks that the certificate names the host it dialled (an IP address or a
// DNS name, from the address it was given); a side that accepts asks for a
// client certificate and refuses a connection without one only with
// require_client_cert (mutual TLS).
//
// Certificates for a cluster (`causeway certs`): cw_tls_pki_* make a CA and
// certificates it signs with OpenSSL's API.
#ifndef CW_CORE_TLS_H_
#define CW_CORE_TLS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "cw_settings.h"
#include "cw_status.h"

typedef struct cw_tls_config_s {
  bool enabled;              // TLS on TCP connections
  const char* ca_file;       // PEM: the CA certificates peers are verified against
  const char* cert_file;     // PEM: this program's certificate (chain); may be ""/NULL for clients
  const char* key_file;      // PEM: its private key
  bool require_client_cert;  // accepting side: refuse peers without a certificate
} cw_tls_config_t;

// The TLS settings of `settings` (strings borrowed from it).
void cw_tls_config_from_settings(const cw_settings_t* settings, cw_tls_config_t* out_config);

// A TLS context: reference counted, safe to share between threads (each
// connection has its own SSL).
typedef struct cw_tls_s cw_tls_t;

// Loads the CA, and the certificate and key when given; a `server` context
// must have them. Errors name the setting and the file, and say why. The
// files are read now; *out_tls holds one reference.
CW_MUST_USE cw_status_t cw_tls_create(const cw_tls_config_t* config, bool server,
                                      cw_tls_t** out_tls);
void cw_tls_retain(cw_tls_t* tls);
void cw_tls_release(cw_tls_t* tls);  // NULL is a no-op
bool cw_tls_requires_client_cert(const cw_tls_t* tls);
// This program's own certificate, when it has one: its subject (OpenSSL's
// one-line form, cut to `capacity`) and its end of validity (Unix seconds;
// 0 when unreadable).
bool cw_tls_own_certificate(const cw_tls_t* tls, char* subject, size_t capacity,
                            int64_t* out_not_after);

// A new SSL for one connection: accepting (`peer_host` NULL) or connecting
// to `peer_host` (a host name or IP address the peer's certificate must
// name; sent as SNI when it is a name). The caller frees it (SSL_free).
CW_MUST_USE cw_status_t cw_tls_ssl_new(cw_tls_t* tls, const char* peer_host, SSL** out_ssl);

// The host of a "host:port" / "[v6]:port" address into out (no brackets).
// False for a Unix socket path (no TLS there) or an address without a port.
bool cw_tls_address_host(const char* address, char* out, size_t capacity);

// Why a TLS call on `ssl` failed (`ret` its return value; drains OpenSSL's
// error queue of this thread): the certificate check's verdict, OpenSSL's
// reason, and what it usually means ("the peer does not speak TLS", "not
// signed by the cluster's CA", ...). `ssl` may be NULL.
void cw_tls_describe_error(SSL* ssl, int ret, char* out, size_t capacity);
// OpenSSL's error queue of this thread as one line (drained), "" when empty.
void cw_tls_take_errors(char* out, size_t capacity);

// What the first bytes a peer sent look like (at least 1 byte): a TLS
// handshake record, a causeway frame (its magic), or something else.
typedef enum cw_tls_first_bytes_e {
  CW_TLS_FIRST_TLS = 0,
  CW_TLS_FIRST_CAUSEWAY,
  CW_TLS_FIRST_OTHER,
  CW_TLS_FIRST_UNKNOWN,  // too few bytes to say
} cw_tls_first_bytes_t;
cw_tls_first_bytes_t cw_tls_classify_first_bytes(const uint8_t* data, size_t len);

// --- A cluster's certificates (`causeway certs`) -------------------------------------

typedef enum cw_tls_cert_kind_e {
  CW_TLS_CERT_DAEMON = 0,  // serverAuth and clientAuth (daemons connect to each other)
  CW_TLS_CERT_CLIENT,      // clientAuth only
} cw_tls_cert_kind_t;

// A new CA: an EC P-256 key and a self-signed certificate named `name`,
// valid for `days` days, written to cert_path and key_path (mode 0600;
// refused when either exists unless `overwrite`).
CW_MUST_USE cw_status_t cw_tls_pki_make_ca(const char* name, int days, const char* cert_path,
                                           const char* key_path, bool overwrite);

// A new key and a certificate for `name` signed by the CA in
// ca_cert_path/ca_key_path, valid for `days` days, with `hosts` (host names
// and IP addresses; may be empty for a client) as subject alternative names.
CW_MUST_USE cw_status_t cw_tls_pki_issue(const char* ca_cert_path, const char* ca_key_path,
                                         const char* name, cw_tls_cert_kind_t kind,
                                         const char* const* hosts, size_t num_hosts, int days,
                                         const char* cert_path, const char* key_path,
                                         bool overwrite);

// The CA certificate (not its key) of from_path written to to_path (mode
// 0600), so that a directory of daemon keys need not hold the CA key. Done
// when to_path holds the same certificate; another one is replaced only with
// `overwrite`.
CW_MUST_USE cw_status_t cw_tls_pki_copy_ca(const char* from_path, const char* to_path,
                                           bool overwrite);

#endif  // CW_CORE_TLS_H_

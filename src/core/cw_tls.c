// TLS contexts, connection objects and error texts (cw_tls.h); the
// certificates of `causeway certs` are in cw_tls_pki.c.
#include "cw_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "cw_log.h"

struct cw_tls_s {
  SSL_CTX* ctx;
  atomic_int refs;
  bool require_client_cert;
};

void cw_tls_config_from_settings(const cw_settings_t* s, cw_tls_config_t* out) {
  memset(out, 0, sizeof(*out));
  out->enabled = cw_settings_int(s, CW_SET_TLS) != 0;
  out->ca_file = cw_settings_string(s, CW_SET_TLS_CA);
  out->cert_file = cw_settings_string(s, CW_SET_TLS_CERT);
  out->key_file = cw_settings_string(s, CW_SET_TLS_KEY);
  out->require_client_cert = cw_settings_int(s, CW_SET_TLS_REQUIRE_CLIENT_CERT) != 0;
}

void cw_tls_take_errors(char* out, size_t cap) {
  size_t used = 0;
  out[0] = 0;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    const char* reason = ERR_reason_error_string(e);
    char fallback[32];
    if (!reason) {
      snprintf(fallback, sizeof(fallback), "error %lx", e);
      reason = fallback;
    }
    if (used + 1 >= cap || strstr(out, reason)) continue;
    int k = snprintf(out + used, cap - used, "%s%s", used ? "; " : "", reason);
    if (k > 0) used += (size_t)k < cap - used ? (size_t)k : cap - used - 1;
  }
}

// A file the context needs: readable, else the error names the setting.
static cw_status_t cw__readable(const char* setting, const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return cw_make_status(CW_INVALID_ARGUMENT, "%s %s: %s", setting, path, strerror(errno));
  fclose(f);
  return cw_ok_status();
}

static cw_status_t cw__ssl_error(const char* fmt_setting, const char* path, const char* what) {
  char why[512];
  cw_tls_take_errors(why, sizeof(why));
  return cw_make_status(CW_INVALID_ARGUMENT, "%s %s: %s: %s", fmt_setting, path, what,
                        why[0] ? why : "unknown OpenSSL error");
}

// Our own certificate as our peers will check it: against the cluster's CA,
// and, for a daemon, as a server's (a certificate `causeway certs client`
// made lacks serverAuth). A daemon refuses to start with one that would fail
// (expired, another CA's, a client's): every peer would refuse it, while the
// controller takes the daemon for alive. A client is warned.
static cw_status_t cw__check_own_chain(SSL_CTX* ctx, bool server, const char* cert_file,
                                       const char* ca_file) {
  X509* cert = SSL_CTX_get0_certificate(ctx);
  X509_STORE_CTX* vctx = X509_STORE_CTX_new();
  STACK_OF(X509)* chain = NULL;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  cw_status_t st = cw_ok_status();
  if (cert && vctx && X509_STORE_CTX_init(vctx, SSL_CTX_get_cert_store(ctx), cert, chain) == 1) {
    X509_STORE_CTX_set_purpose(vctx, server ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT);
    if (X509_verify_cert(vctx) != 1) {
      const char* why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(vctx));
      if (server) {
        st = cw_make_status(CW_INVALID_ARGUMENT,
                            "CAUSEWAY_TLS_CERT %s does not verify against CAUSEWAY_TLS_CA %s as "
                            "a daemon's certificate (%s): every peer would refuse it; `causeway "
                            "certs daemon` makes one", cert_file, ca_file, why);
      } else {
        CW_LOGW("CAUSEWAY_TLS_CERT %s does not verify against CAUSEWAY_TLS_CA %s (%s): peers "
                "using that CA will refuse it", cert_file, ca_file, why);
      }
    }
  }
  X509_STORE_CTX_free(vctx);
  ERR_clear_error();
  return st;
}

cw_status_t cw_tls_create(const cw_tls_config_t* cfg, bool server, cw_tls_t** out) {
  *out = NULL;
  const char* ca = cfg->ca_file ? cfg->ca_file : "";
  const char* cert = cfg->cert_file ? cfg->cert_file : "";
  const char* key = cfg->key_file ? cfg->key_file : "";
  if (!ca[0]) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "TLS is on (CAUSEWAY_TLS) but CAUSEWAY_TLS_CA (--tls-ca) is not set: "
                          "peers are verified against the cluster's CA certificate");
  }
  if (server && (!cert[0] || !key[0])) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "TLS is on (CAUSEWAY_TLS): a daemon needs its certificate and key, "
                          "CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY (--tls-cert, --tls-key); "
                          "`causeway certs daemon` makes them");
  }
  if (!cert[0] != !key[0]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY go "
                          "together (one of them is set)");
  }
  CW_RETURN_IF_ERROR(cw__readable("CAUSEWAY_TLS_CA", ca), "");
  if (cert[0]) {
    CW_RETURN_IF_ERROR(cw__readable("CAUSEWAY_TLS_CERT", cert), "");
    CW_RETURN_IF_ERROR(cw__readable("CAUSEWAY_TLS_KEY", key), "");
    struct stat sb;
    if (stat(key, &sb) == 0 && (sb.st_mode & 077)) {
      CW_LOGW("CAUSEWAY_TLS_KEY %s is readable by group or others (mode %03o); chmod 600 it",
              key, (unsigned)(sb.st_mode & 0777));
    }
  }
  ERR_clear_error();
  cw_tls_t* t = calloc(1, sizeof(*t));
  if (!t) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  atomic_init(&t->refs, 1);
  t->require_client_cert = cfg->require_client_cert;
  t->ctx = SSL_CTX_new(TLS_method());
  cw_status_t st = cw_ok_status();
  if (!t->ctx) st = cw__ssl_error("TLS", "context", "cannot create");
  if (!st && SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) != 1) {
    st = cw__ssl_error("TLS", "1.3", "not available");
  }
  // AES-128-GCM first: as safe for this use and faster for bulk bytes than
  // OpenSSL's default preference (AES-256-GCM).
  if (!st && SSL_CTX_set_ciphersuites(t->ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                              "TLS_CHACHA20_POLY1305_SHA256") != 1) {
    st = cw__ssl_error("TLS", "ciphersuites", "not available");
  }
  if (!st && SSL_CTX_load_verify_locations(t->ctx, ca, NULL) != 1) {
    st = cw__ssl_error("CAUSEWAY_TLS_CA", ca, "cannot load CA certificates");
  }
  if (!st && cert[0] && SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1) {
    st = cw__ssl_error("CAUSEWAY_TLS_CERT", cert, "cannot load the certificate");
  }
  if (!st && cert[0] && SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      st = cw_make_status(CW_INVALID_ARGUMENT, "CAUSEWAY_TLS_KEY %s is not the key of "
                          "CAUSEWAY_TLS_CERT %s", key, cert);
    } else {
      st = cw__ssl_error("CAUSEWAY_TLS_KEY", key, "cannot load the private key");
    }
  }
  if (!st && cert[0] && SSL_CTX_check_private_key(t->ctx) != 1) {
    ERR_clear_error();
    st = cw_make_status(CW_INVALID_ARGUMENT, "CAUSEWAY_TLS_KEY %s is not the key of "
                        "CAUSEWAY_TLS_CERT %s", key, cert);
  }
  if (st) {
    cw_tls_release(t);
    return st;
  }
  if (cert[0]) st = cw__check_own_chain(t->ctx, server, cert, ca);
  if (st) {
    cw_tls_release(t);
    return st;
  }
  // Records may be written in parts and retried from another address (the
  // client library retries a write that would block with the same bytes).
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // No session resumption: connections are long-lived, and tickets would be
  // bytes every client must read after the handshake.
  SSL_CTX_set_num_tickets(t->ctx, 0);
  SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
  // Records are read as they come, several per read (a blocking client
  // would otherwise make two system calls a record).
  SSL_CTX_set_read_ahead(t->ctx, 1);
  SSL_CTX_set_default_read_buffer_len(t->ctx, 64 * 1024);
  *out = t;
  return cw_ok_status();
}

void cw_tls_retain(cw_tls_t* t) { atomic_fetch_add(&t->refs, 1); }

void cw_tls_release(cw_tls_t* t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

bool cw_tls_requires_client_cert(const cw_tls_t* t) { return t->require_client_cert; }

bool cw_tls_own_certificate(const cw_tls_t* t, char* subject, size_t capacity,
                            int64_t* out_not_after) {
  if (capacity) subject[0] = 0;
  *out_not_after = 0;
  X509* cert = t ? SSL_CTX_get0_certificate(t->ctx) : NULL;
  if (!cert) return false;
  if (capacity) X509_NAME_oneline(X509_get_subject_name(cert), subject, (int)capacity);
  struct tm tm;
  const ASN1_TIME* end = X509_get0_notAfter(cert);
  if (end && ASN1_TIME_to_tm(end, &tm) == 1) *out_not_after = (int64_t)timegm(&tm);
  ERR_clear_error();
  return true;
}

static bool cw__is_ip(const char* host) {
  uint8_t buf[16];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

cw_status_t cw_tls_ssl_new(cw_tls_t* t, const char* peer_host, SSL** out) {
  *out = NULL;
  SSL* ssl = SSL_new(t->ctx);
  if (!ssl) {
    char why[256];
    cw_tls_take_errors(why, sizeof(why));
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "TLS: cannot create a connection: %s", why);
  }
  if (peer_host) {
    SSL_set_connect_state(ssl);
    SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
    int ok = cw__is_ip(peer_host)
                 ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), peer_host)
                 : SSL_set1_host(ssl, peer_host) && SSL_set_tlsext_host_name(ssl, peer_host);
    if (ok != 1) {
      SSL_free(ssl);
      ERR_clear_error();
      return cw_make_status(CW_INVALID_ARGUMENT, "TLS: cannot check peer names against '%s'",
                            peer_host);
    }
  } else {
    SSL_set_accept_state(ssl);
    SSL_set_verify(ssl, t->require_client_cert
                            ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                            : SSL_VERIFY_NONE, NULL);
  }
  *out = ssl;
  return cw_ok_status();
}

bool cw_tls_address_host(const char* address, char* out, size_t cap) {
  if (!address || strchr(address, '/')) return false;
  const char* colon = strrchr(address, ':');
  if (!colon || colon == address) return false;
  const char* h = address;
  size_t n = (size_t)(colon - address);
  if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  if (n == 0 || n >= cap) return false;
  memcpy(out, h, n);
  out[n] = 0;
  return true;
}

// What an OpenSSL reason usually means here.
static const char* cw__hint(const char* reasons) {
  static const struct {
    const char* needle;
    const char* hint;
  } hints[] = {
      {"wrong version number", "the peer does not speak TLS: is CAUSEWAY_TLS on there?"},
      {"packet length too long", "the peer does not speak TLS: is CAUSEWAY_TLS on there?"},
      {"http request", "the peer speaks HTTP, not TLS"},
      {"unknown ca", "the peer does not trust this side's certificate: it is not signed by the "
                     "peer's CAUSEWAY_TLS_CA"},
      {"certificate required", "the peer requires a client certificate for mutual TLS: set "
                               "CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY"},
      {"peer did not return a certificate", "mutual TLS is required here, "
                                            "--tls-require-client-cert, and the peer presented "
                                            "no certificate"},
      {"unexpected eof", "the peer closed the connection during the TLS handshake: a daemon "
                         "with TLS off closes one"},
      {"bad certificate", "the peer refused this side's certificate"},
      {"certificate unknown", "the peer refused this side's certificate"},
  };
  for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); ++i) {
    if (strstr(reasons, hints[i].needle)) return hints[i].hint;
  }
  return NULL;
}

static const char* cw__verify_hint(long vr) {
  switch (vr) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      return "the peer's certificate is not signed by the CA in CAUSEWAY_TLS_CA";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "the peer's certificate does not name the host it was reached at: issue it for "
             "that name or address, `causeway certs daemon NAME --host HOST`";
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "check the certificate's dates and the clocks";
    default:
      return NULL;
  }
}

void cw_tls_describe_error(SSL* ssl, int ret, char* out, size_t cap) {
  int saved_errno = errno;
  int err = ssl ? SSL_get_error(ssl, ret) : SSL_ERROR_SSL;
  char reasons[512];
  cw_tls_take_errors(reasons, sizeof(reasons));
  long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (vr != X509_V_OK && (strstr(reasons, "certificate verify failed") || !reasons[0])) {
    const char* hint = cw__verify_hint(vr);
    snprintf(out, cap, "certificate verify failed: %s%s%s%s", X509_verify_cert_error_string(vr),
             hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
    return;
  }
  if (!reasons[0]) {
    if (err == SSL_ERROR_ZERO_RETURN) {
      snprintf(out, cap, "the peer closed the TLS session");
    } else if (err == SSL_ERROR_SYSCALL && saved_errno) {
      snprintf(out, cap, "%s", strerror(saved_errno));
    } else if (err == SSL_ERROR_SYSCALL) {
      snprintf(out, cap, "the peer closed the connection");
    } else {
      snprintf(out, cap, "TLS error %d", err);
    }
    return;
  }
  const char* hint = cw__hint(reasons);
  snprintf(out, cap, "%s%s%s%s", reasons, hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
}

cw_tls_first_bytes_t cw_tls_classify_first_bytes(const uint8_t* d, size_t len) {
  static const uint8_t magic[4] = {'C', 'W', 'A', 'Y'};  // CW_FRAME_MAGIC, little-endian
  if (len == 0) return CW_TLS_FIRST_UNKNOWN;
  // A TLS record: type 22 (handshake), then version 3.x.
  if (d[0] == 0x16) return len < 2 ? CW_TLS_FIRST_UNKNOWN
                                   : d[1] == 0x03 ? CW_TLS_FIRST_TLS : CW_TLS_FIRST_OTHER;
  size_t n = len < 4 ? len : 4;
  if (memcmp(d, magic, n) != 0) return CW_TLS_FIRST_OTHER;
  return n == 4 ? CW_TLS_FIRST_CAUSEWAY : CW_TLS_FIRST_UNKNOWN;
}

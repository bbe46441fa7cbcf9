// A cluster's certificates with OpenSSL's API (cw_tls.h, `causeway certs`):
// EC P-256 keys, X.509 v3 certificates signed with SHA-256, files 0600.
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "cw_tls.h"

static cw_status_t cw__ossl(const char* what) {
  char why[512];
  cw_tls_take_errors(why, sizeof(why));
  return cw_make_status(CW_INTERNAL, "%s: %s", what, why[0] ? why : "OpenSSL error");
}

// A file of mode 0600 opened for writing: new, or replaced with `overwrite`.
static cw_status_t cw__open_private(const char* path, bool overwrite, FILE** out) {
  *out = NULL;
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  int fd = open(path, flags, 0600);
  if (fd < 0) {
    return cw_make_status(errno == EEXIST ? CW_ALREADY_EXISTS : CW_INVALID_ARGUMENT,
                          "%s: %s%s", path, strerror(errno),
                          errno == EEXIST ? " (--force replaces it)" : "");
  }
  if (fchmod(fd, 0600) != 0 || !(*out = fdopen(fd, "w"))) {
    cw_status_t st = cw_make_status(CW_INTERNAL, "%s: %s", path, strerror(errno));
    close(fd);
    return st;
  }
  return cw_ok_status();
}

static cw_status_t cw__write_pem(const char* path, bool overwrite, EVP_PKEY* key, X509* cert) {
  FILE* f = NULL;
  CW_RETURN_IF_ERROR(cw__open_private(path, overwrite, &f), "");
  int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)
               : PEM_write_X509(f, cert);
  if (fclose(f) != 0) ok = 0;
  if (ok != 1) return cw__ossl(path);
  return cw_ok_status();
}

static cw_status_t cw__refuse_existing(const char* path, bool overwrite) {
  struct stat sb;
  if (!overwrite && stat(path, &sb) == 0) {
    return cw_make_status(CW_ALREADY_EXISTS, "%s exists (--force replaces it)", path);
  }
  return cw_ok_status();
}

static bool cw__is_ip(const char* host) {
  uint8_t buf[16];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

// Host names and addresses only (they go into an extension's text).
static bool cw__host_ok(const char* h) {
  if (!h[0] || strlen(h) > 253) return false;
  for (const char* p = h; *p; ++p) {
    if (!isalnum((unsigned char)*p) && !strchr(".-_:*", *p)) return false;
  }
  return true;
}

static cw_status_t cw__add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  if (!ext) return cw__ossl(value);
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? cw_ok_status() : cw__ossl(value);
}

// A certificate for `key` named `name`, unsigned; `issuer` NULL: self-issued.
static cw_status_t cw__new_cert(EVP_PKEY* key, const char* name, int days, X509* issuer,
                                X509** out) {
  *out = NULL;
  X509* x = X509_new();
  if (!x) return cw__ossl("X509_new");
  uint8_t serial[16];
  BIGNUM* bn = NULL;
  ASN1_INTEGER* sn = NULL;
  X509_NAME* subject = X509_get_subject_name(x);
  int ok = X509_set_version(x, 2) && RAND_bytes(serial, sizeof(serial)) == 1;
  serial[0] &= 0x7f;  // positive
  ok = ok && (bn = BN_bin2bn(serial, sizeof(serial), NULL)) &&
       (sn = BN_to_ASN1_INTEGER(bn, NULL)) && X509_set_serialNumber(x, sn);
  // An hour back: a peer whose clock is a little behind still accepts it.
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
       X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400);
  ok = ok && X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8,
                                        (const unsigned char*)"causeway", -1, -1, 0) &&
       X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char*)name, -1,
                                  -1, 0);
  ok = ok && X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : subject) &&
       X509_set_pubkey(x, key);
  BN_free(bn);
  ASN1_INTEGER_free(sn);
  if (!ok) {
    X509_free(x);
    return cw__ossl("making a certificate");
  }
  *out = x;
  return cw_ok_status();
}

static cw_status_t cw__check_days(int days) {
  if (days < 1 || days > 36500) {
    return cw_make_status(CW_INVALID_ARGUMENT, "--days %d is outside [1, 36500]", days);
  }
  return cw_ok_status();
}

cw_status_t cw_tls_pki_make_ca(const char* name, int days, const char* cert_path,
                               const char* key_path, bool overwrite) {
  CW_RETURN_IF_ERROR(cw__check_days(days), "");
  CW_RETURN_IF_ERROR(cw__refuse_existing(cert_path, overwrite), "");
  CW_RETURN_IF_ERROR(cw__refuse_existing(key_path, overwrite), "");
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (!key) return cw__ossl("making a P-256 key");
  X509* x = NULL;
  cw_status_t st = cw__new_cert(key, name, days, NULL, &x);
  if (!st) st = cw__add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  if (!st) st = cw__add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
  if (!st) st = cw__add_ext(x, x, NID_subject_key_identifier, "hash");
  if (!st && X509_sign(x, key, EVP_sha256()) <= 0) st = cw__ossl("signing the CA");
  if (!st) st = cw__write_pem(key_path, overwrite, key, NULL);
  if (!st) st = cw__write_pem(cert_path, overwrite, NULL, x);
  X509_free(x);
  EVP_PKEY_free(key);
  return st;
}

static cw_status_t cw__read_cert(const char* path, X509** out) {
  FILE* f = fopen(path, "r");
  if (!f) return cw_make_status(CW_NOT_FOUND, "CA certificate %s: %s", path, strerror(errno));
  *out = PEM_read_X509(f, NULL, NULL, NULL);
  fclose(f);
  return *out ? cw_ok_status() : cw__ossl(path);
}

static cw_status_t cw__load_ca(const char* cert_path, const char* key_path, X509** out_cert,
                               EVP_PKEY** out_key) {
  *out_cert = NULL;
  *out_key = NULL;
  CW_RETURN_IF_ERROR(cw__read_cert(cert_path, out_cert), "");
  FILE* f = fopen(key_path, "r");
  if (!f) return cw_make_status(CW_NOT_FOUND, "CA key %s: %s", key_path, strerror(errno));
  *out_key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
  fclose(f);
  if (!*out_key) return cw__ossl(key_path);
  if (X509_check_private_key(*out_cert, *out_key) != 1) {
    ERR_clear_error();
    return cw_make_status(CW_INVALID_ARGUMENT, "CA key %s is not the key of %s", key_path,
                          cert_path);
  }
  return cw_ok_status();
}

cw_status_t cw_tls_pki_copy_ca(const char* from_path, const char* to_path, bool overwrite) {
  X509* from = NULL;
  X509* there = NULL;
  CW_RETURN_IF_ERROR(cw__read_cert(from_path, &from), "");
  cw_status_t st = cw_ok_status();
  struct stat sb;
  if (stat(to_path, &sb) == 0) {
    // The same CA there already is fine; another one only with --force.
    st = cw__read_cert(to_path, &there);
    bool same = !st && X509_cmp(from, there) == 0;
    cw_status_free(st);
    st = cw_ok_status();
    if (same) goto out;
    if (!overwrite) {
      st = cw_make_status(CW_ALREADY_EXISTS, "%s is not the CA certificate of %s "
                          "(--force replaces it)", to_path, from_path);
      goto out;
    }
  }
  st = cw__write_pem(to_path, overwrite, NULL, from);
out:
  X509_free(there);
  X509_free(from);
  return st;
}

// "DNS:a,IP:1.2.3.4" of `hosts`.
static cw_status_t cw__san_text(const char* const* hosts, size_t n, char** out) {
  *out = NULL;
  size_t cap = 1;
  for (size_t i = 0; i < n; ++i) {
    if (!cw__host_ok(hosts[i])) {
      return cw_make_status(CW_INVALID_ARGUMENT, "--host '%s' is not a host name or address",
                            hosts[i]);
    }
    cap += strlen(hosts[i]) + 5;
  }
  char* text = calloc(1, cap);
  if (!text) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t used = 0;
  for (size_t i = 0; i < n; ++i) {
    used += (size_t)snprintf(text + used, cap - used, "%s%s:%s", i ? "," : "",
                             cw__is_ip(hosts[i]) ? "IP" : "DNS", hosts[i]);
  }
  *out = text;
  return cw_ok_status();
}

cw_status_t cw_tls_pki_issue(const char* ca_cert_path, const char* ca_key_path, const char* name,
                             cw_tls_cert_kind_t kind, const char* const* hosts, size_t num_hosts,
                             int days, const char* cert_path, const char* key_path,
                             bool overwrite) {
  CW_RETURN_IF_ERROR(cw__check_days(days), "");
  if (kind == CW_TLS_CERT_DAEMON && num_hosts == 0) {
    return cw_make_status(CW_INVALID_ARGUMENT, "a daemon's certificate needs the host names and "
                          "addresses its peers reach it at (--host)");
  }
  CW_RETURN_IF_ERROR(cw__refuse_existing(cert_path, overwrite), "");
  CW_RETURN_IF_ERROR(cw__refuse_existing(key_path, overwrite), "");
  char* san = NULL;
  CW_RETURN_IF_ERROR(cw__san_text(hosts, num_hosts, &san), "");
  X509* ca = NULL;
  EVP_PKEY* ca_key = NULL;
  EVP_PKEY* key = NULL;
  X509* x = NULL;
  cw_status_t st = cw__load_ca(ca_cert_path, ca_key_path, &ca, &ca_key);
  if (!st && !(key = EVP_EC_gen("P-256"))) st = cw__ossl("making a P-256 key");
  if (!st) st = cw__new_cert(key, name, days, ca, &x);
  if (!st) st = cw__add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE");
  if (!st) st = cw__add_ext(x, ca, NID_key_usage, "critical,digitalSignature");
  if (!st) {
    st = cw__add_ext(x, ca, NID_ext_key_usage,
                     kind == CW_TLS_CERT_DAEMON ? "serverAuth,clientAuth" : "clientAuth");
  }
  if (!st) st = cw__add_ext(x, ca, NID_subject_key_identifier, "hash");
  if (!st) st = cw__add_ext(x, ca, NID_authority_key_identifier, "keyid:always");
  if (!st && num_hosts) st = cw__add_ext(x, ca, NID_subject_alt_name, san);
  if (!st && X509_sign(x, ca_key, EVP_sha256()) <= 0) st = cw__ossl("signing the certificate");
  if (!st) st = cw__write_pem(key_path, overwrite, key, NULL);
  if (!st) st = cw__write_pem(cert_path, overwrite, NULL, x);
  free(san);
  X509_free(x);
  EVP_PKEY_free(key);
  X509_free(ca);
  EVP_PKEY_free(ca_key);
  return st;
}

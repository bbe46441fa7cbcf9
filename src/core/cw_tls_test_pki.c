// Certificates for TLS tests (cw_tls_test_pki.h).
#include "cw_tls_test_pki.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cw_tls.h"

int tls_test_pki_make(tls_test_pki_t* p, const char* prefix) {
  snprintf(p->dir, sizeof(p->dir), "/tmp/%s.XXXXXX", prefix);
  if (!mkdtemp(p->dir)) return -1;
  static const char* names[TP_COUNT] = {"ca.pem",   "ca.key",   "srv.pem",  "srv.key",
                                        "cli.pem",  "cli.key",  "oca.pem",  "oca.key",
                                        "osrv.pem", "osrv.key", "ocli.pem", "ocli.key"};
  for (int i = 0; i < TP_COUNT; ++i) {
    snprintf(p->path[i], sizeof(p->path[i]), "%s/%s", p->dir, names[i]);
  }
  const char* hosts[] = {"127.0.0.1", "localhost"};  // by address and by name
  cw_status_t st = cw_ok_status();
  for (int other = 0; other < 2 && !st; ++other) {
    const char** f = (const char*[]){p->path[TP_CA + 6 * other], p->path[TP_CA_KEY + 6 * other],
                                     p->path[TP_SRV + 6 * other], p->path[TP_SRV_KEY + 6 * other],
                                     p->path[TP_CLI + 6 * other],
                                     p->path[TP_CLI_KEY + 6 * other]};
    st = cw_tls_pki_make_ca(other ? "other" : "ca", 2, f[0], f[1], false);
    if (!st) st = cw_tls_pki_issue(f[0], f[1], "srv", CW_TLS_CERT_DAEMON, hosts, 2, 2, f[2], f[3],
                                   false);
    if (!st) st = cw_tls_pki_issue(f[0], f[1], "cli", CW_TLS_CERT_CLIENT, NULL, 0, 2, f[4], f[5],
                                   false);
  }
  if (st) {
    fprintf(stderr, "certificates: %s\n", cw_status_message(st));
    cw_status_free(st);
    return -1;
  }
  return 0;
}

void tls_test_pki_remove(tls_test_pki_t* p) {
  for (int i = 0; i < TP_COUNT; ++i) unlink(p->path[i]);
  rmdir(p->dir);
}

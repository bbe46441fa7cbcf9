// `causeway certs` (cw_certs.h).
#include "cw_certs.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cw_dirs.h"
#include "cw_tls.h"

const char cw_certs_usage[] =
    "usage: causeway certs ca [--dir DIR] [--name NAME] [--days N] [--force]\n"
    "       causeway certs daemon NAME --host HOST [--host HOST ...] [--dir DIR]\n"
    "                             [--ca-dir CADIR] [--days N] [--force]\n"
    "       causeway certs client NAME [--dir DIR] [--ca-dir CADIR] [--days N] [--force]\n"
    "\n"
    "A cluster's CA (ca.pem, ca.key), and certificates it signs (NAME.pem, NAME.key), all\n"
    "in DIR (default: the current directory), EC P-256 keys, files mode 0600.\n"
    "  ca       the cluster's CA, valid 3650 days\n"
    "  daemon   a controller's or worker's certificate, valid 365 days, for the host names\n"
    "           and addresses its peers reach it at (--host, one or more; a worker that\n"
    "           listens on 0.0.0.0 is reached at its host name); it also serves as the\n"
    "           daemon's client certificate towards other daemons (mutual TLS)\n"
    "  client   a JAX client's certificate for mutual TLS, valid 365 days\n"
    "--ca-dir takes the CA from CADIR (default DIR) and copies ca.pem, not ca.key, into\n"
    "DIR: keep the CA key off the hosts that run daemons.\n"
    "--force replaces existing files. Then set CAUSEWAY_TLS=1, CAUSEWAY_TLS_CA=DIR/ca.pem\n"
    "and, for each program, CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY (docs/operations.md, TLS).\n";

enum { CW__OPT_DIR = 256, CW__OPT_CA_DIR, CW__OPT_NAME, CW__OPT_HOST, CW__OPT_DAYS,
       CW__OPT_FORCE };

static const struct option cw__longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"dir", required_argument, NULL, CW__OPT_DIR},
                                             {"ca-dir", required_argument, NULL, CW__OPT_CA_DIR},
                                             {"name", required_argument, NULL, CW__OPT_NAME},
                                             {"host", required_argument, NULL, CW__OPT_HOST},
                                             {"days", required_argument, NULL, CW__OPT_DAYS},
                                             {"force", no_argument, NULL, CW__OPT_FORCE},
                                             {NULL, 0, NULL, 0}};

// A file name part: letters, digits, '.', '-', '_' (not starting with '.').
static bool cw__name_ok(const char* n) {
  if (!n[0] || n[0] == '.' || strlen(n) > 64) return false;
  for (const char* p = n; *p; ++p) {
    if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') &&
        !strchr(".-_", *p)) {
      return false;
    }
  }
  return strcmp(n, "ca") != 0;
}

bool cw_certs_parse(int argc, char** argv, cw_certs_args_t* out, char* err, size_t n) {
  memset(out, 0, sizeof(*out));
  out->dir = ".";
  err[0] = 0;
  const char* pos[3] = {NULL, NULL, NULL};
  int npos = 0;
  const char* name_opt = NULL;
  opterr = 0;
  optind = 0;
  int c;
  while ((c = getopt_long(argc, argv, "-:h", cw__longopts, NULL)) != -1) {
    switch (c) {
      case 'h':
        return false;
      case 1:
        if (npos >= 3) {
          snprintf(err, n, "unexpected argument '%s' (see causeway certs --help)", optarg);
          return false;
        }
        pos[npos++] = optarg;
        break;
      case CW__OPT_DIR:
        out->dir = optarg;
        break;
      case CW__OPT_CA_DIR:
        out->ca_dir = optarg;
        break;
      case CW__OPT_NAME:
        name_opt = optarg;
        break;
      case CW__OPT_HOST:
        if (out->num_hosts >= CW_CERTS_MAX_HOSTS) {
          snprintf(err, n, "at most %d --host", CW_CERTS_MAX_HOSTS);
          return false;
        }
        out->hosts[out->num_hosts++] = optarg;
        break;
      case CW__OPT_DAYS: {
        char* end = NULL;
        errno = 0;
        long d = strtol(optarg, &end, 10);
        if (errno || *end || d < 1 || d > 36500) {
          snprintf(err, n, "--days '%s' is not a number in 1..36500", optarg);
          return false;
        }
        out->days = (int)d;
        break;
      }
      case CW__OPT_FORCE:
        out->force = true;
        break;
      case ':':
        snprintf(err, n, "%s needs a value", argv[optind - 1]);
        return false;
      default:
        snprintf(err, n, "unknown option '%s' (see causeway certs --help)", argv[optind - 1]);
        return false;
    }
  }
  // pos[0] is "certs" (argv[1]).
  const char* kind = npos > 1 ? pos[1] : NULL;
  if (!kind) {
    snprintf(err, n, "certs needs ca, daemon or client (see causeway certs --help)");
    return false;
  }
  if (!strcmp(kind, "ca")) {
    out->kind = CW_CERTS_CA;
    if (npos > 2) {
      snprintf(err, n, "certs ca takes no NAME (--name names the CA)");
      return false;
    }
    out->name = name_opt ? name_opt : "causeway cluster CA";
    if (out->num_hosts) {
      snprintf(err, n, "certs ca takes no --host");
      return false;
    }
    if (out->ca_dir) {
      snprintf(err, n, "certs ca writes the CA into --dir; --ca-dir is for daemon and client");
      return false;
    }
    if (!out->days) out->days = 3650;
    return true;
  }
  if (strcmp(kind, "daemon") && strcmp(kind, "client")) {
    snprintf(err, n, "unknown certs kind '%s' (ca, daemon or client)", kind);
    return false;
  }
  out->kind = !strcmp(kind, "daemon") ? CW_CERTS_DAEMON : CW_CERTS_CLIENT;
  out->name = npos > 2 ? pos[2] : NULL;
  if (!out->name || !cw__name_ok(out->name)) {
    snprintf(err, n, "certs %s needs a NAME of letters, digits, '.', '-' or '_' (not \"ca\"): "
             "its files are DIR/NAME.pem and DIR/NAME.key", kind);
    return false;
  }
  if (name_opt) {
    snprintf(err, n, "--name is for certs ca; a %s is named by NAME", kind);
    return false;
  }
  if (out->kind == CW_CERTS_DAEMON && !out->num_hosts) {
    snprintf(err, n, "certs daemon needs --host: the host names and addresses its peers reach "
             "it at (e.g. --host 10.0.0.5 --host worker1.example)");
    return false;
  }
  if (!out->days) out->days = 365;
  if (!out->ca_dir) out->ca_dir = out->dir;
  return true;
}

static void cw__path(char* out, size_t n, const char* dir, const char* name, const char* ext) {
  snprintf(out, n, "%s/%s.%s", dir, name, ext);
}

int cw_certs_main(int argc, char** argv) {
  cw_certs_args_t a;
  char err[512];
  if (!cw_certs_parse(argc, argv, &a, err, sizeof(err))) {
    if (!err[0]) {
      fputs(cw_certs_usage, stdout);
      return 0;
    }
    fprintf(stderr, "causeway: %s\n", err);
    return 2;
  }
  char ca_cert[4096], ca_key[4096], cert[4096], key[4096], ca_here[4096];
  const char* ca_dir = a.kind == CW_CERTS_CA ? a.dir : a.ca_dir;
  cw__path(ca_cert, sizeof(ca_cert), ca_dir, "ca", "pem");
  cw__path(ca_key, sizeof(ca_key), ca_dir, "ca", "key");
  cw__path(ca_here, sizeof(ca_here), a.dir, "ca", "pem");
  if (a.kind != CW_CERTS_CA && access(ca_cert, F_OK) != 0) {
    fprintf(stderr, "causeway: certs: %s: no CA there yet: make it first with `causeway certs "
            "ca --dir %s`\n", ca_cert, ca_dir);
    return 1;
  }
  cw_status_t s = cw_dirs_make(a.dir);  // /etc/causeway/tls on a fresh host: parents too
  if (s) {
    fprintf(stderr, "causeway: certs: %s\n", cw_status_message(s));
    cw_status_free(s);
    return 1;
  }
  if (a.kind == CW_CERTS_CA) {
    s = cw_tls_pki_make_ca(a.name, a.days, ca_cert, ca_key, a.force);
    if (!s) {
      printf("wrote %s and %s (mode 0600): the CA \"%s\", valid %d days\n"
             "every program of the cluster: CAUSEWAY_TLS=1 CAUSEWAY_TLS_CA=%s\n"
             "keep %s private: whoever holds it can make certificates the cluster trusts\n",
             ca_cert, ca_key, a.name, a.days, ca_cert, ca_key);
    }
  } else {
    cw__path(cert, sizeof(cert), a.dir, a.name, "pem");
    cw__path(key, sizeof(key), a.dir, a.name, "key");
    // The CA certificate beside the new files when the CA lives elsewhere
    // (the same file is left as it is).
    if (strcmp(ca_here, ca_cert) != 0) s = cw_tls_pki_copy_ca(ca_cert, ca_here, a.force);
    if (!s) {
      s = cw_tls_pki_issue(ca_cert, ca_key, a.name,
                           a.kind == CW_CERTS_DAEMON ? CW_TLS_CERT_DAEMON : CW_TLS_CERT_CLIENT,
                           a.hosts, a.num_hosts, a.days, cert, key, a.force);
    }
    if (!s) {
      printf("wrote %s and %s (mode 0600): %s certificate \"%s\", valid %d days", cert, key,
             a.kind == CW_CERTS_DAEMON ? "a daemon" : "a client", a.name, a.days);
      for (size_t i = 0; i < a.num_hosts; ++i) printf("%s%s", i ? ", " : ", for ", a.hosts[i]);
      printf("\n%s: CAUSEWAY_TLS=1 CAUSEWAY_TLS_CA=%s CAUSEWAY_TLS_CERT=%s CAUSEWAY_TLS_KEY=%s\n",
             a.kind == CW_CERTS_DAEMON ? "that daemon" : "that client", ca_here, cert, key);
    }
  }
  if (s) {
    fprintf(stderr, "causeway: certs: %s\n", cw_status_message(s));
    cw_status_free(s);
    return 1;
  }
  return 0;
}

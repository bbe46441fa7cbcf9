// `causeway certs`: a cluster's CA and the certificates it signs, one per
// daemon (serverAuth and clientAuth, named for the hosts peers dial) and per
// client (clientAuth, for mutual TLS), made with OpenSSL's API
// (cw_tls_pki_*): EC P-256 keys, files mode 0600 in one directory.
//
//   causeway certs ca [--dir DIR] [--name NAME] [--days N] [--force]
//   causeway certs daemon NAME --host HOST [--host HOST ...] [--dir DIR] [--ca-dir CADIR]
//                         [--days N] [--force]
//   causeway certs client NAME [--dir DIR] [--ca-dir CADIR] [--days N] [--force]
//
// DIR (default ".") holds NAME.pem and NAME.key, and ca.pem; the CA's key
// ca.key is in CADIR (default DIR), which a daemon's host need not have.
#ifndef CW_TOOLS_CERTS_H_
#define CW_TOOLS_CERTS_H_

#include <stdbool.h>
#include <stddef.h>

#define CW_CERTS_MAX_HOSTS 64

typedef enum cw_certs_kind_e {
  CW_CERTS_CA = 0,
  CW_CERTS_DAEMON,
  CW_CERTS_CLIENT,
} cw_certs_kind_t;

typedef struct cw_certs_args_s {
  cw_certs_kind_t kind;
  const char* name;  // the certificate's; the CA's default "causeway cluster CA"
  const char* dir;
  const char* ca_dir;  // daemon, client: where ca.pem and ca.key are (default dir)
  const char* hosts[CW_CERTS_MAX_HOSTS];
  size_t num_hosts;
  int days;  // default: 3650 for the CA, 365 for the others
  bool force;
} cw_certs_args_t;

extern const char cw_certs_usage[];

// Parses argv (argv[0] the program, argv[1] "certs"). Returns true, or false with a message in
// err ("" for --help).
bool cw_certs_parse(int argc, char** argv, cw_certs_args_t* out, char* err, size_t err_size);

// `causeway certs ...`: the exit code (0 done, 1 failed, 2 bad command line).
int cw_certs_main(int argc, char** argv);

#endif  // CW_TOOLS_CERTS_H_

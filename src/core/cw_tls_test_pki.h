// Certificates for the TLS tests of src/net and src/client (not part of any
// program): in a fresh temporary directory, the cluster's CA with a daemon's
// certificate for 127.0.0.1 and a client's, and another CA with a daemon's
// and a client's of its own.
#ifndef CW_CORE_TLS_TEST_PKI_H_
#define CW_CORE_TLS_TEST_PKI_H_

typedef enum tls_test_file_e {
  TP_CA = 0,
  TP_CA_KEY,
  TP_SRV,
  TP_SRV_KEY,
  TP_CLI,
  TP_CLI_KEY,
  TP_OCA,  // the other CA and what it signed
  TP_OCA_KEY,
  TP_OSRV,
  TP_OSRV_KEY,
  TP_OCLI,
  TP_OCLI_KEY,
  TP_COUNT,
} tls_test_file_t;

typedef struct tls_test_pki_s {
  char dir[64];
  char path[TP_COUNT][160];
} tls_test_pki_t;

// 0, or -1 with the reason on stderr.
int tls_test_pki_make(tls_test_pki_t* pki, const char* prefix);
void tls_test_pki_remove(tls_test_pki_t* pki);

#endif  // CW_CORE_TLS_TEST_PKI_H_

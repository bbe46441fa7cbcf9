// Credentials a daemon changes without a restart (docs/operations.md,
// "Rotating credentials"). On SIGHUP, and when the token file or a TLS file
// changes on disk (looked at every --credentials-check-ms), the daemon reads
// them again: connections made from then on present and accept the new ones,
// connections already made keep going. A file that cannot be read, or a
// certificate that its key or the CA refuses, changes nothing and is logged;
// the next change or SIGHUP tries again. The daemon's own certificate is
// watched for its end: a warning a day in its last 14 days.
#ifndef CW_NET_CREDS_H_
#define CW_NET_CREDS_H_

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "cw_dirs.h"
#include "cw_net.h"
#include "cw_settings.h"
#include "cw_status.h"

#define CW_NET_CREDS_FILES 4  // the token file, the CA, the certificate, its key

typedef struct cw_net_creds_s {
  const cw_settings_t* settings;  // borrowed
  cw_net_t* net;                  // borrowed; NULL: tokens alone (the proxy's gRPC server)
  // What nets and servers accept, [0] presented: they borrow it, and a
  // reload changes it in place on the loop thread.
  cw_token_set_t tokens;
  uv_signal_t hup;
  uv_timer_t timer;
  bool handles_open;
  bool check_files;  // --credentials-check-ms > 0 (else the timer watches the end alone)
  cw_file_sig_t files[CW_NET_CREDS_FILES];
  int64_t not_after;        // the own certificate's end (Unix seconds); 0: none known
  int64_t expiry_warned_ms;  // the last warning of its end
  uint64_t reloads;          // reloads that changed nothing or took the new files
  uint64_t failures;         // reloads refused (the old credentials kept)
} cw_net_creds_t;

// Reads the tokens (an error ends the daemon's start, as the settings' do),
// gives them to `net` (may be NULL), and starts SIGHUP and the file check on
// `loop`. `c` is caller storage; stop it before the loop ends.
CW_MUST_USE cw_status_t cw_net_creds_start(cw_net_creds_t* c, uv_loop_t* loop,
                                           const cw_settings_t* settings, cw_net_t* net);
// Reads everything again now (SIGHUP's work; `why` says what asked, for the
// log): all or nothing.
CW_MUST_USE cw_status_t cw_net_creds_reload(cw_net_creds_t* c, const char* why);
// Closes the handles (idempotent) and ignores SIGHUP again; the tokens
// stay until cw_net_creds_free.
void cw_net_creds_stop(cw_net_creds_t* c);
// SIGHUP's default action ends the process: a daemon ignores it from the
// start of its start-up until cw_net_creds_start, and after
// cw_net_creds_stop, so that a reload asked then (`systemctl reload`, which
// systemd does not count as a failure to restart from) ends nothing. A
// handler someone else installed is left alone.
void cw_net_creds_ignore_hup(void);
void cw_net_creds_free(cw_net_creds_t* c);  // after the loop closed the handles

#endif  // CW_NET_CREDS_H_

#include "cw_settings.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cw_log.h"

#define KIB (1024LL)
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)

#define CW__CTL CW_SCOPE_CONTROLLER
#define CW__WRK CW_SCOPE_WORKER
#define CW__DMN CW_SCOPE_DAEMONS
#define CW__PLG CW_SCOPE_PLUGIN
#define CW__TOOL CW_SCOPE_TOOL
#define CW__CLI CW_SCOPE_CLIENT
#define CW__PRX CW_SCOPE_PROXY

// env, old env, scope, flag, type, min, max, default, secret, empty is a value, help.
static const cw_setting_def_t cw__defs[CW_SET_COUNT] = {
    [CW_SET_LOG_LEVEL] = {"CAUSEWAY_LOG_LEVEL", "CW_LOG_LEVEL", CW__DMN | CW__PRX, "log-level",
                          CW_SETTING_STRING, 0, 0, "warn", false, false,
                          "error, warn, info or debug"},
    [CW_SET_MAX_PAYLOAD] = {"CAUSEWAY_MAX_PAYLOAD", "CW_MAX_PAYLOAD", CW__DMN, "max-payload",
                            CW_SETTING_INT, 4 * KIB, 1 * GIB, "16777216", false, false,
                            "largest control payload (bytes) after HELLO"},
    [CW_SET_PREHELLO_MAX_PAYLOAD] = {"CAUSEWAY_PREHELLO_MAX_PAYLOAD", "CW_PREHELLO_MAX_PAYLOAD",
                                     CW__DMN, "prehello-max-payload", CW_SETTING_INT, 256,
                                     64 * KIB, "4096", false, false,
                                     "largest payload accepted before HELLO"},
    [CW_SET_MAX_BULK] = {"CAUSEWAY_MAX_BULK", "CW_MAX_BULK", CW__DMN, "max-bulk",
                         CW_SETTING_INT, 1, 1024 * GIB, "68719476736", false, false,
                         "largest bulk byte stream of one frame"},
    [CW_SET_TOKEN] = {"CAUSEWAY_TOKEN", "CW_TOKEN",
                      CW__DMN | CW__PLG | CW__TOOL | CW__CLI | CW__PRX,
                      "token", CW_SETTING_STRING, 0, 0, "", true, false,
                      "shared secret presented in HELLO (environment only; a JAX client "
                      "presents it when it joins a cluster)"},
    [CW_SET_TOKEN_FILE] = {"CAUSEWAY_TOKEN_FILE", "CW_TOKEN_FILE",
                           CW__DMN | CW__PLG | CW__TOOL | CW__PRX,
                           "token-file", CW_SETTING_STRING, 0, 0, "", false, false,
                           "file whose first line is the shared secret (CAUSEWAY_TOKEN "
                           "wins); daemons accept its further lines too (a rotation), and "
                           "read it again when it changes"},
    [CW_SET_HELLO_TIMEOUT_MS] = {"CAUSEWAY_HELLO_TIMEOUT_MS", "CW_HELLO_TIMEOUT_MS", CW__DMN,
                                 "hello-timeout-ms", CW_SETTING_INT, 10, 600000, "5000", false,
                                 false, "close connections that send no HELLO in this time"},
    [CW_SET_CONNECT_TIMEOUT_MS] = {"CAUSEWAY_CONNECT_TIMEOUT_MS", "CW_CONNECT_TIMEOUT_MS",
                                   CW__DMN, "connect-timeout-ms", CW_SETTING_INT, 10, 600000,
                                   "10000", false, false,
                                   "give up connecting to a peer after this time"},
    [CW_SET_MAX_CONNECTIONS] = {"CAUSEWAY_MAX_CONNECTIONS", "CW_MAX_CONNECTIONS", CW__DMN,
                                "max-connections", CW_SETTING_INT, 1, 65536, "1024", false,
                                false, "accepted connections at once"},
    [CW_SET_MAX_UNAUTH_CONNECTIONS] = {"CAUSEWAY_MAX_UNAUTH_CONNECTIONS", NULL, CW__DMN,
                                       "max-unauth-connections", CW_SETTING_INT, 1, 65536, "256",
                                       false, false,
                                       "accepted connections without HELLO yet at once (within "
                                       "--max-connections); a new one closes the one waiting "
                                       "longest"},
    [CW_SET_MAX_UNAUTH_PER_PEER] = {"CAUSEWAY_MAX_UNAUTH_PER_PEER", NULL, CW__DMN,
                                    "max-unauth-per-peer", CW_SETTING_INT, 1, 65536, "128", false,
                                    false, "of those, from one IP address at once (a new one "
                                    "closes that address's longest waiting)"},
    [CW_SET_FRAMES_PER_WAKEUP] = {"CAUSEWAY_FRAMES_PER_WAKEUP", "CW_FRAMES_PER_WAKEUP", CW__DMN,
                                  "frames-per-wakeup", CW_SETTING_INT, 1, 1 << 20, "64", false,
                                  false, "frames one connection may have handled per loop "
                                  "wakeup"},
    [CW_SET_TLS] = {"CAUSEWAY_TLS", NULL, CW__DMN | CW__PLG | CW__TOOL | CW__CLI, "tls",
                    CW_SETTING_BOOL, 0, 1, "0", false, false,
                    "TLS on every TCP connection (Unix sockets stay plaintext): a daemon refuses "
                    "plaintext peers, a client speaks TLS"},
    [CW_SET_TLS_CA] = {"CAUSEWAY_TLS_CA", NULL, CW__DMN | CW__PLG | CW__TOOL | CW__CLI, "tls-ca",
                       CW_SETTING_STRING, 0, 0, "", false, false,
                       "PEM file of the CA certificate(s) peers are verified against (with "
                       "CAUSEWAY_TLS)"},
    [CW_SET_TLS_CERT] = {"CAUSEWAY_TLS_CERT", NULL, CW__DMN | CW__PLG | CW__TOOL | CW__CLI,
                         "tls-cert", CW_SETTING_STRING, 0, 0, "", false, false,
                         "PEM file of this program's certificate (a daemon's: required with "
                         "CAUSEWAY_TLS; a client's: optional, presented for mutual TLS)"},
    [CW_SET_TLS_KEY] = {"CAUSEWAY_TLS_KEY", NULL, CW__DMN | CW__PLG | CW__TOOL | CW__CLI,
                        "tls-key", CW_SETTING_STRING, 0, 0, "", false, false,
                        "PEM file of its private key (mode 0600)"},
    [CW_SET_TLS_REQUIRE_CLIENT_CERT] = {"CAUSEWAY_TLS_REQUIRE_CLIENT_CERT", NULL,
                                        CW__DMN | CW__TOOL, "tls-require-client-cert",
                                        CW_SETTING_BOOL, 0, 1, "0", false, false,
                                        "mutual TLS: refuse TCP peers without a certificate "
                                        "signed by CAUSEWAY_TLS_CA (the tool: `up` says its "
                                        "clients need one)"},
    [CW_SET_CREDENTIALS_CHECK_MS] = {"CAUSEWAY_CREDENTIALS_CHECK_MS", NULL, CW__DMN | CW__PRX,
                                     "credentials-check-ms", CW_SETTING_INT, 0, 3600000, "10000",
                                     false, false,
                                     "read the token file and the TLS files again when they "
                                     "change, looking this often (0: only on SIGHUP)"},
    [CW_SET_PLUGIN] = {"CAUSEWAY_PJRT_PLUGIN", "CW_PJRT_PLUGIN", CW__WRK | CW__PLG | CW__TOOL,
                       "plugin", CW_SETTING_STRING, 0, 0, "", false, false,
                       "path of the vendor PJRT plugin library the worker loads (also the "
                       "embedded cluster's and `causeway up`'s workers)"},
    [CW_SET_DEVICES] = {"CAUSEWAY_WORKER_DEVICES", "CW_DEVICES", CW__WRK, "devices",
                        CW_SETTING_INT, 1, 4096, "4", false, false,
                        "devices the worker's PJRT client creates (CPU plugin)"},
    [CW_SET_LISTEN] = {"CAUSEWAY_LISTEN", "CW_LISTEN", CW__DMN, "listen", CW_SETTING_STRING, 0,
                       0, "", false, false, "host:port or a Unix socket path (contains '/')"},
    [CW_SET_ADVERTISE] = {"CAUSEWAY_ADVERTISE", NULL, CW__WRK, "advertise", CW_SETTING_STRING, 0,
                          0, "", false, false,
                          "the address clients and other workers reach this worker at (NAT, a "
                          "container's service name, a relay); empty: --listen, a wildcard host "
                          "replaced by the host's name"},
    [CW_SET_WORKER_NAME] = {"CAUSEWAY_NAME", "CW_WORKER_NAME", CW__DMN, "name",
                            CW_SETTING_STRING, 0, 0, "", false, false,
                            "the daemon's name in logs and errors; empty: a worker's listen "
                            "address, \"controller\""},
    [CW_SET_CONTROLLER] = {"CAUSEWAY_CONTROLLER", "CW_CONTROLLER", CW__WRK | CW__PLG | CW__TOOL,
                           "controller", CW_SETTING_STRING, 0, 0, "", false, false,
                           "the controller (host:port or socket path) a worker registers with "
                           "and a JAX client or the causeway tool joins; a JAX client without "
                           "one starts an embedded cluster"},
    [CW_SET_EXIT_WITH_CONTROLLER] = {"CAUSEWAY_EXIT_WITH_CONTROLLER", "CW_EXIT_WITH_CONTROLLER",
                                     CW__WRK, "exit-with-controller", CW_SETTING_BOOL, 0, 1, "0",
                                     false, false,
                                     "exit when the controller is gone (its connection lost "
                                     "and registering again refused or unreachable)"},
    [CW_SET_WATCH_FD] = {"CAUSEWAY_WATCH_FD", "CW_WATCH_FD", CW__DMN, "watch-fd",
                         CW_SETTING_INT, -1, 1 << 20, "-1", false, false,
                         "exit cleanly when this inherited descriptor reaches EOF (-1: none)"},
    [CW_SET_READY_FD] = {"CAUSEWAY_READY_FD", NULL, CW__DMN, "ready-fd", CW_SETTING_INT, -1,
                         1 << 20, "-1", false, false,
                         "write one line to this inherited descriptor once ready, then close "
                         "it: the controller when it listens, a worker when it first "
                         "registered (listens, without --controller) (-1: none)"},
    [CW_SET_COMPILE_CACHE_BYTES] = {"CAUSEWAY_COMPILE_CACHE_BYTES", "CW_COMPILE_CACHE_BYTES",
                                    CW__CTL, "compile-cache-bytes", CW_SETTING_INT, 0,
                                    1024 * GIB, "1073741824", false, false,
                                    "memory for serialized executables and their keys "
                                    "(the programs; LRU)"},
    [CW_SET_WORKER_COMPILES] = {"CAUSEWAY_WORKER_COMPILES", NULL, CW__CTL, "worker-compiles",
                                CW_SETTING_INT, 1, 1024, "8", false, false,
                                "COMPILEs the controller sends a worker at once; the rest wait "
                                "at the controller, which drops those of closed sessions unsent"},
    [CW_SET_MAX_HELD_REQUESTS] = {"CAUSEWAY_MAX_HELD_REQUESTS", "CW_MAX_HELD_REQUESTS", CW__WRK,
                                  "max-held-requests", CW_SETTING_INT, 1, 1 << 20, "4096",
                                  false, false,
                                  "requests one session may have waiting for their seq"},
    [CW_SET_MAX_HELD_BYTES] = {"CAUSEWAY_MAX_HELD_BYTES", "CW_MAX_HELD_BYTES", CW__WRK,
                               "max-held-bytes", CW_SETTING_INT, 0, 1024 * GIB, "4294967296",
                               false, false,
                               "upload bytes one session may have waiting for their seq"},
    [CW_SET_STAGING_CACHE_BYTES] = {"CAUSEWAY_STAGING_CACHE_BYTES", "CW_STAGING_CACHE_BYTES",
                                    CW__WRK, "staging-cache-bytes", CW_SETTING_INT, 0,
                                    1024 * GIB, "1073741824", false, false,
                                    "freed bulk staging blocks (>= 1 MiB) kept for reuse "
                                    "(unset: at most 1/16 of the memory the worker may use)"},
    [CW_SET_COMPILE_CACHE_DIR] = {"CAUSEWAY_COMPILE_CACHE_DIR", "CW_COMPILE_CACHE_DIR",
                                  CW__CTL | CW__PLG, "compile-cache-dir", CW_SETTING_STRING, 0,
                                  0, "", false, true,
                                  "directory of the compile cache on disk (\"\": off); the "
                                  "embedded cluster's default is $XDG_CACHE_HOME/causeway/"
                                  "compile, else ~/.cache/causeway/compile"},
    [CW_SET_COMPILE_CACHE_DISK_BYTES] = {"CAUSEWAY_COMPILE_CACHE_DISK_BYTES",
                                         "CW_COMPILE_CACHE_DISK_BYTES", CW__CTL,
                                         "compile-cache-disk-bytes", CW_SETTING_INT, 0,
                                         1024 * 1024 * GIB, "10737418240", false, false,
                                         "bound of the disk cache (oldest out first)"},
    [CW_SET_METRICS_LISTEN] = {"CAUSEWAY_METRICS_LISTEN", "CW_METRICS_LISTEN", CW__DMN,
                               "metrics-listen", CW_SETTING_STRING, 0, 0, "", false, false,
                               "serve HTTP on host:port: GET /healthz and /readyz (probes), and "
                               "on the controller /metrics (Prometheus); empty: off"},
    [CW_SET_HEARTBEAT_MS] = {"CAUSEWAY_HEARTBEAT_MS", "CW_HEARTBEAT_MS", CW__WRK,
                             "heartbeat-ms", CW_SETTING_INT, 10, 60000, "1000", false, false,
                             "send the controller a heartbeat this often"},
    [CW_SET_WORKER_TIMEOUT_MS] = {"CAUSEWAY_WORKER_TIMEOUT_MS", "CW_WORKER_TIMEOUT_MS", CW__CTL,
                                  "worker-timeout-ms", CW_SETTING_INT, 50, 600000, "5000", false,
                                  false, "declare a worker dead after this long without a "
                                  "heartbeat"},
    [CW_SET_RECONNECT_MAX_MS] = {"CAUSEWAY_RECONNECT_MAX_MS", "CW_RECONNECT_MAX_MS", CW__WRK,
                                 "reconnect-max-ms", CW_SETTING_INT, 10, 600000, "2000", false,
                                 false, "longest wait between attempts to reach a lost "
                                 "controller (from 100 ms, doubling)"},
    [CW_SET_START_TIMEOUT_MS] = {"CAUSEWAY_START_TIMEOUT_MS", NULL, CW__WRK | CW__PLG,
                                 "start-timeout-ms", CW_SETTING_INT, 0, 3600000, "60000", false,
                                 false, "a worker that has not registered with its controller "
                                 "in this time exits with an error (0: it keeps trying); the "
                                 "embedded cluster waits this long for each daemon"},
    [CW_SET_RELAY_LAUNCHES] = {"CAUSEWAY_RELAY_LAUNCHES", "CW_RELAY_LAUNCHES", CW__CTL,
                               "relay-launches", CW_SETTING_BOOL, 0, 1, "0", false, false,
                               "sessions send LAUNCH through the controller, never straight to "
                               "the worker"},
    [CW_SET_SCHED_WINDOW] = {"CAUSEWAY_SCHED_WINDOW", NULL, CW__CTL, "sched-window",
                             CW_SETTING_INT, 1, 4096, "128", false, false,
                             "stamped launches of a shared island out at its workers at once; "
                             "the rest wait at the controller, ordered by the sessions' "
                             "weights (smaller: the weights act sooner; larger: more launches "
                             "share each write)"},
    [CW_SET_RESUME_GRACE_MS] = {"CAUSEWAY_RESUME_GRACE_MS", NULL, CW__CTL, "resume-grace-ms",
                                CW_SETTING_INT, 0, 600000, "10000", false, false,
                                "taking over a running cluster: new sessions' devices wait "
                                "this long at most for the sessions the workers report to "
                                "resume, and a request for more devices than have registered "
                                "waits rather than fails (0: off)"},
    [CW_SET_ISLAND] = {"CAUSEWAY_ISLAND", "CW_ISLAND", CW__WRK, "island", CW_SETTING_STRING, 0,
                       0, "", false, false,
                       "name of the island its plugin's processes form with other workers "
                       "(multi-process plugins); empty: the worker is its own island"},
    [CW_SET_ISLAND_SIZE] = {"CAUSEWAY_ISLAND_SIZE", "CW_ISLAND_SIZE", CW__WRK, "island-size",
                            CW_SETTING_INT, 1, 4096, "1", false, false,
                            "how many workers (plugin processes) form --island"},
    [CW_SET_HOST_CPU] = {"CAUSEWAY_HOST_CPU", NULL, CW__WRK, "host-cpu", CW_SETTING_STRING, 0,
                         0, "", false, false,
                         "the CPU this worker reports (compile cache key, reloads into a "
                         "replacement); empty: its machine and a hash of the CPU's features"},
    [CW_SET_MEMORY_LIMIT] = {"CAUSEWAY_MEMORY_LIMIT", NULL, CW__WRK, "memory-limit",
                             CW_SETTING_INT, 0, (int64_t)1 << 60, "0", false, false,
                             "bytes of buffers each device may hold; uploads, copies and "
                             "launches that would go over wait for memory (0: the plugin's "
                             "own limit where it reports one, else none)"},
    [CW_SET_MEMORY_WAIT_MS] = {"CAUSEWAY_MEMORY_WAIT_MS", NULL, CW__WRK, "memory-wait-ms",
                               CW_SETTING_INT, 0, 3600000, "30000", false, false,
                               "how long a request waits for memory before it fails with "
                               "RESOURCE_EXHAUSTED"},
    // The plugin's own: environment only.
    [CW_SET_LOCAL_WORKERS] = {"CAUSEWAY_LOCAL_WORKERS", NULL, CW__PLG, NULL, CW_SETTING_INT, 1,
                              64, "1", false, false,
                              "workers of the embedded cluster, an island each (1: every local "
                              "device in one island, as on one machine)"},
    [CW_SET_LOCAL_DEVICES] = {"CAUSEWAY_LOCAL_DEVICES", NULL, CW__PLG, NULL, CW_SETTING_INT, 1,
                              4096, "", false, false,
                              "CPU devices of each embedded worker (unset: the count JAX asks "
                              "for, jax_num_cpu_devices or XLA_FLAGS=--xla_force_host_platform_"
                              "device_count=N, else 8, split evenly over the workers)"},
    [CW_SET_BIN_DIR] = {"CAUSEWAY_BIN_DIR", NULL, CW__PLG | CW__TOOL, NULL, CW_SETTING_STRING, 0,
                        0, "", false, false,
                        "directory holding causeway-controller and causeway-worker for the "
                        "embedded cluster and `causeway up` (default: bin/ beside the "
                        "plugin's lib/; the tool's own directory)"},
    [CW_SET_CHILD_LOGS] = {"CAUSEWAY_CHILD_LOGS", NULL, CW__PLG, NULL, CW_SETTING_STRING, 0, 0,
                           "", false, false,
                           "inherit: the embedded daemons log to this process's stderr "
                           "(default: to files in the cluster's directory)"},
    [CW_SET_KEEP_TMP] = {"CAUSEWAY_KEEP_TMP", NULL, CW__PLG, NULL, CW_SETTING_BOOL, 0, 1, "0",
                         false, false,
                         "keep the embedded cluster's directory (logs, sockets) when it stops"},
    [CW_SET_MIN_WORKERS] = {"CAUSEWAY_MIN_WORKERS", NULL, CW__PLG, NULL, CW_SETTING_INT, 0,
                            1 << 20, "1", false, false,
                            "joining a cluster: wait for this many workers (the embedded "
                            "cluster waits for all of its own)"},
    [CW_SET_WAIT_MS] = {"CAUSEWAY_WAIT_MS", NULL, CW__PLG, NULL, CW_SETTING_INT, 0, 3600000,
                        "15000", false, false,
                        "how long opening the session waits for CAUSEWAY_MIN_WORKERS"},
    [CW_SET_CONTROLLER_TIMEOUT_MS] = {"CAUSEWAY_CONTROLLER_TIMEOUT_MS", NULL, CW__PLG | CW__TOOL,
                                      NULL,
                                      CW_SETTING_INT, 100, 3600000, "10000", false, false,
                                      "a controller that owes answers and is silent this long "
                                      "is hung: calls through it fail UNAVAILABLE"},
    [CW_SET_WORKER_LINK_TIMEOUT_MS] = {"CAUSEWAY_WORKER_LINK_TIMEOUT_MS", NULL,
                                       CW__PLG | CW__DMN, "worker-link-timeout-ms",
                                       CW_SETTING_INT, 0, 3600000, "30000", false, false,
                                       "a link to a worker (or from a daemon to any peer) that "
                                       "owes answers and brings nothing, not even the peer's "
                                       "keepalive, this long is lost: what it owes fails "
                                       "UNAVAILABLE; a daemon's TCP connection whose peer "
                                       "acknowledges nothing this long (at least 1 s) is "
                                       "closed (0: wait without limit)"},
    [CW_SET_CONTROLLER_RECONNECT_MS] = {"CAUSEWAY_CONTROLLER_RECONNECT_MS", NULL, CW__PLG, NULL,
                                        CW_SETTING_INT, 0, 3600000, "30000", false, false,
                                        "a lost controller (joining a cluster): reconnect and "
                                        "resume the session for this long, meanwhile calls that "
                                        "need it wait (0: they fail at once)"},
    [CW_SET_SESSION_NAME] = {"CAUSEWAY_SESSION_NAME", NULL, CW__PLG, NULL, CW_SETTING_STRING, 0,
                             0, "", false, false,
                             "what `causeway status` calls the session (default: "
                             "program@host:pid)"},
    [CW_SET_SESSION_DEVICES] = {"CAUSEWAY_DEVICES", NULL, CW__PLG, NULL, CW_SETTING_INT, 1,
                                65536, "", false, false,
                                "devices the session asks for (unset: every device of the "
                                "cluster, none reserved)"},
    [CW_SET_PLATFORM] = {"CAUSEWAY_PLATFORM", NULL, CW__PLG, NULL, CW_SETTING_STRING, 0, 0, "",
                         false, false, "only workers of this platform (with CAUSEWAY_DEVICES)"},
    [CW_SET_MIN_ISLAND] = {"CAUSEWAY_MIN_ISLAND", NULL, CW__PLG, NULL, CW_SETTING_INT, 1, 65536,
                           "", false, false,
                           "only islands of at least this many devices (with "
                           "CAUSEWAY_DEVICES)"},
    [CW_SET_WORKERS] = {"CAUSEWAY_WORKERS", NULL, CW__PLG, NULL, CW_SETTING_STRING, 0, 0, "",
                        false, false,
                        "only these workers, names separated by commas (with "
                        "CAUSEWAY_DEVICES)"},
    [CW_SET_SHARE] = {"CAUSEWAY_SHARE", NULL, CW__PLG, NULL, CW_SETTING_BOOL, 0, 1, "0", false,
                      false, "share devices with other sessions that share (with "
                      "CAUSEWAY_DEVICES); default: exclusive"},
    [CW_SET_WEIGHT] = {"CAUSEWAY_WEIGHT", NULL, CW__PLG, NULL, CW_SETTING_INT, 1, 1000, "",
                       false, false,
                       "the session's share of launches on a shared island (with "
                       "CAUSEWAY_DEVICES; unset: 1)"},
    [CW_SET_QUEUE_TIMEOUT] = {"CAUSEWAY_QUEUE_TIMEOUT", NULL, CW__PLG, NULL, CW_SETTING_SECONDS,
                              0, 86400 * 1000LL, "", false, false,
                              "give up after this many seconds in the controller's device "
                              "queue (with CAUSEWAY_DEVICES; unset or 0: wait)"},
    [CW_SET_TRACE] = {"CAUSEWAY_TRACE", NULL, CW__PLG, NULL, CW_SETTING_STRING, 0, 0, "", false,
                      false, "write a Chrome trace of the session to this file"},
    [CW_SET_WAIT_SPIN_US] = {"CAUSEWAY_WAIT_SPIN_US", NULL, CW__PLG, NULL, CW_SETTING_INT, 0,
                             10000, "200", false, false,
                             "at block_until_ready and a small read back (up to 64 KiB), how "
                             "long (microseconds) the waiting thread polls for the result, "
                             "yielding to any other, before it sleeps: a sleeping thread wakes "
                             "slowly on an idle machine; 0: sleep at once (causeway-proxy "
                             "always does)"},
    [CW_SET_WORKER_SPIN_US] = {"CAUSEWAY_WORKER_SPIN_US", NULL, CW__WRK, "spin-us",
                               CW_SETTING_INT, 0, 10000, "200", false, false,
                               "after a request that came within a millisecond of the one "
                               "before, how long (microseconds) the worker's loop keeps "
                               "polling, yielding to any other thread, before it sleeps, so "
                               "that a synchronous loop's next request finds it awake; windows "
                               "that keep ending with none stop for a second; 0: sleep at once"},
    [CW_SET_HANDBACK_US] = {"CAUSEWAY_HANDBACK_US", NULL, CW__PLG, NULL, CW_SETTING_INT, 0,
                            1000000, "1000", false, false,
                            "JAX's callbacks on a finished launch run on JAX's own thread at "
                            "its next launch (its allocations go back to its own cache, not "
                            "across threads), or on a helper thread after this many "
                            "microseconds (up to 16 times that while the last caller is "
                            "runnable); a result someone waits for is never held; 0: run them "
                            "at once on the client's reader"},
    // The worker's custom-call handler sets (docs/ffi.md).
    [CW_SET_FFI_LIBRARIES] = {"CAUSEWAY_FFI_LIBRARIES", NULL, CW__WRK, "ffi-libraries",
                              CW_SETTING_STRING, 0, 0, "", false, false,
                              "FFI libraries whose custom-call handlers the worker registers, "
                              "comma-separated: PATH:SYMBOL (SYMBOL returns a table, "
                              "causeway_ffi.h) or PATH:TARGET=SYMBOL (one handler); one that "
                              "does not load stops the worker"},
    [CW_SET_JAXLIB_PYTHON] = {"CAUSEWAY_JAXLIB_PYTHON", NULL, CW__WRK, "jaxlib-python",
                              CW_SETTING_STRING, 0, 0, "", false, false,
                              "the Python (a venv's bin/python) whose jaxlib gives the "
                              "worker jaxlib's CPU kernels (LAPACK): loaded at start, or the "
                              "worker stops; empty: the PJRT plugin's venv, loaded when a "
                              "program first needs it; off: none"},
    [CW_SET_PROXY_LISTEN] = {"CAUSEWAY_PROXY_LISTEN", NULL, CW__PRX, "listen", CW_SETTING_STRING,
                             0, 0, "127.0.0.1:0", false, false,
                             "host:port the IFRT proxy front serves gRPC on (port 0: any), "
                             "or a Unix socket path only its owner may connect to"},
    [CW_SET_PROXY_PJRT_LIBRARY] = {"CAUSEWAY_PROXY_PJRT_LIBRARY", NULL, CW__PRX, "pjrt-library",
                                   CW_SETTING_STRING, 0, 0, "", false, false,
                                   "the PJRT plugin the proxy drives; empty: "
                                   "libcauseway_pjrt.so beside the proxy (../lib)"},
    [CW_SET_PROXY_MAX_MESSAGE] = {"CAUSEWAY_PROXY_MAX_MESSAGE", NULL, CW__PRX, "max-message",
                                  CW_SETTING_INT, 4 * KIB, 1023 * MIB, "67108864", false, false,
                                  "largest gRPC message (bytes) the proxy takes or sends"},
    [CW_SET_PROXY_BUFFER_CACHE] = {"CAUSEWAY_PROXY_BUFFER_CACHE", NULL, CW__PRX, "buffer-cache",
                                   CW_SETTING_INT, 0, 64 * GIB, "268435456", false, false,
                                   "bytes of released host buffers (1 MiB and up) the proxy keeps "
                                   "for the next ones; 0: none"},
    [CW_SET_PROXY_TRANSFER_DIR] = {"CAUSEWAY_PROXY_TRANSFER_DIR", NULL, CW__PRX, "transfer-dir",
                                   CW_SETTING_STRING, 0, 0, "", false, false,
                                   "the directory IFRT clients on this host name in "
                                   "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY, "
                                   "where they leave large host buffers for the proxy to read; "
                                   "empty: HostBufferReadFromDisk is refused"},
    [CW_SET_PROXY_MAX_HOST_BUFFER] = {"CAUSEWAY_PROXY_MAX_HOST_BUFFER", NULL, CW__PRX,
                                      "max-host-buffer", CW_SETTING_INT, 1, 1024 * GIB,
                                      "68719476736", false, false,
                                      "largest host buffer (bytes) a client may store or leave "
                                      "in the transfer directory"},
    [CW_SET_PROXY_MAX_SESSIONS] = {"CAUSEWAY_PROXY_MAX_SESSIONS", NULL, CW__PRX, "max-sessions",
                                   CW_SETTING_INT, 1, 4096, "64", false, false,
                                   "IfrtSession streams open at once (each holds a thread and a "
                                   "session of the cluster, or an embedded cluster); more are "
                                   "refused RESOURCE_EXHAUSTED"},
    [CW_SET_PROXY_HOST_BUFFER_BUDGET] = {"CAUSEWAY_PROXY_HOST_BUFFER_BUDGET", NULL, CW__PRX,
                                         "host-buffer-budget", CW_SETTING_INT, 0, 1024 * 1024 * GIB,
                                         "0", false, false,
                                         "bytes of host buffers the proxy holds for all sessions "
                                         "together, each session at most half; a store, disk "
                                         "read or read back that would pass it is refused; 0: "
                                         "half of the memory the proxy may use (physical, or its "
                                         "memory cgroup's limit where lower)"},
};

const cw_setting_def_t* cw_settings_def(cw_setting_id_t id) {
  return ((unsigned)id < CW_SET_COUNT) ? &cw__defs[id] : NULL;
}

// A whole decimal, or hexadecimal after 0x; leading zeros are not octal.
static bool cw__parse_int(const char* text, long long* out) {
  const char* digits = text + (text[0] == '-' || text[0] == '+');
  int base = (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) ? 16 : 10;
  errno = 0;
  char* end = NULL;
  *out = strtoll(text, &end, base);
  return !errno && end && end != text && !*end;
}

// Parses `value` into setting `id`; `label` names where it came from (the
// variable, or the flag) in errors.
static cw_status_t cw__set_one(cw_settings_t* s, cw_setting_id_t id, const char* label,
                               const char* value) {
  const cw_setting_def_t* d = &cw__defs[id];
  switch (d->type) {
    case CW_SETTING_BOOL:
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes")) {
        s->ints[id] = 1;
      } else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no")) {
        s->ints[id] = 0;
      } else {
        return cw_make_status(CW_INVALID_ARGUMENT,
                              "%s: '%s' is not a boolean (1, true, yes, 0, false or no)", label,
                              value);
      }
      return cw_ok_status();
    case CW_SETTING_INT: {
      long long v = 0;
      if (!cw__parse_int(value, &v)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "%s: '%s' is not an integer", label, value);
      }
      if (v < d->min || v > d->max) {
        return cw_make_status(CW_OUT_OF_RANGE, "%s: %lld is outside [%" PRId64 ", %" PRId64 "]",
                              label, v, d->min, d->max);
      }
      s->ints[id] = v;
      return cw_ok_status();
    }
    case CW_SETTING_SECONDS: {
      errno = 0;
      char* end = NULL;
      double sec = strtod(value, &end);
      if (errno || !end || end == value || *end || !isfinite(sec)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "%s: '%s' is not a number of seconds", label,
                              value);
      }
      if (sec * 1000.0 < (double)d->min || sec * 1000.0 > (double)d->max) {
        return cw_make_status(CW_OUT_OF_RANGE, "%s: %s is outside [%g, %g] seconds", label, value,
                              (double)d->min / 1000.0, (double)d->max / 1000.0);
      }
      int64_t ms = (int64_t)(sec * 1000.0 + 0.5);
      s->ints[id] = sec > 0 && ms == 0 ? 1 : ms;  // a positive wait never reads as "none"
      return cw_ok_status();
    }
    case CW_SETTING_STRING:
      break;
  }
  char* copy = strdup(value);
  if (!copy) return cw_make_status(CW_RESOURCE_EXHAUSTED, "%s: out of memory", label);
  free(s->strings[id]);
  s->strings[id] = copy;
  return cw_ok_status();
}

static bool cw__is_unset_default(const cw_setting_def_t* d) {
  return d->type != CW_SETTING_STRING && !d->default_value[0];
}

cw_status_t cw_settings_initialize(cw_settings_t* out, unsigned scope) {
  memset(out, 0, sizeof(*out));
  out->scope = scope;
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = &cw__defs[i];
    cw_status_t st = cw__is_unset_default(d)
                         ? cw_ok_status()
                         : cw__set_one(out, (cw_setting_id_t)i, "default", d->default_value);
    const char* env = (d->scope & scope) ? getenv(d->env) : NULL;
    if (!st && env && (*env || d->empty_is_value)) {
      st = cw__set_one(out, (cw_setting_id_t)i, d->env, env);
      out->given[i] = true;
    }
    if (st) {
      cw_settings_deinitialize(out);
      return st;
    }
  }
  return cw_ok_status();
}

void cw_settings_deinitialize(cw_settings_t* settings) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    char* text = settings->strings[i];
    if (text && cw__defs[i].secret) explicit_bzero(text, strlen(text));
    free(text);
    settings->strings[i] = NULL;
  }
}

// The flag `name` of `scope`, or -1.
static int cw__find_flag(const char* name, unsigned scope) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    if (cw__defs[i].name && (cw__defs[i].scope & scope) && !strcmp(cw__defs[i].name, name)) {
      return i;
    }
  }
  return -1;
}

cw_status_t cw_settings_set(cw_settings_t* settings, const char* name, const char* value,
                            bool from_command_line) {
  int i = cw__find_flag(name, settings->scope);
  if (i < 0) return cw_make_status(CW_INVALID_ARGUMENT, "unknown setting --%s (see --help)", name);
  if (from_command_line && cw__defs[i].secret) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "--%s may not be given on the command line; set %s or use a file",
                          name, cw__defs[i].env);
  }
  char label[80];
  snprintf(label, sizeof(label), "--%s", name);
  CW_RETURN_IF_ERROR(cw__set_one(settings, (cw_setting_id_t)i, label, value), "");
  settings->given[i] = true;
  return cw_ok_status();
}

cw_status_t cw_settings_parse_args(cw_settings_t* settings, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "unexpected argument '%s'", a);
    }
    char name[64];
    const char* eq = strchr(a + 2, '=');
    const char* value;
    size_t n = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
    if (n == 0 || n >= sizeof(name)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "bad flag '%s'", a);
    }
    memcpy(name, a + 2, n);
    name[n] = 0;
    int k = cw__find_flag(name, settings->scope);
    if (eq) {
      value = eq + 1;
    } else if (k >= 0 && cw__defs[k].type == CW_SETTING_BOOL) {
      value = "1";  // a bare boolean flag
    } else if (k < 0 || cw__defs[k].secret) {
      value = "";  // refused by name below, whatever follows ("--bogus" last said "needs a value")
    } else {
      if (i + 1 >= argc) return cw_make_status(CW_INVALID_ARGUMENT, "--%s needs a value", name);
      value = argv[++i];
    }
    CW_RETURN_IF_ERROR(cw_settings_set(settings, name, value, true), "");
  }
  return cw_ok_status();
}

void cw_token_set_clear(cw_token_set_t* set) {
  for (size_t i = 0; i < set->count; ++i) {
    explicit_bzero(set->tokens[i], strlen(set->tokens[i]));
    free(set->tokens[i]);
  }
  free(set->tokens);
  set->tokens = NULL;
  set->count = 0;
}

static cw_status_t cw__token_set_add(cw_token_set_t* set, const char* token, const char* path) {
  for (size_t i = 0; i < set->count; ++i) {
    if (!strcmp(set->tokens[i], token)) return cw_ok_status();
  }
  char** grown = realloc(set->tokens, (set->count + 1) * sizeof(*grown));
  char* copy = grown ? strdup(token) : NULL;
  if (grown) set->tokens = grown;
  if (!copy) return cw_make_status(CW_RESOURCE_EXHAUSTED, "token file %s: out of memory", path);
  set->tokens[set->count++] = copy;
  return cw_ok_status();
}

// A token file's lines into `out` (a rotation lists the other token after
// the first); too many or too long lines are refused, not cut.
static cw_status_t cw__token_file_read(const char* path, bool warn_mode, cw_token_set_t* out) {
  memset(out, 0, sizeof(*out));
  FILE* f = fopen(path, "r");
  if (!f) {
    return cw_make_status(CW_NOT_FOUND, "token file %s: %s", path, strerror(errno));
  }
  struct stat sb;
  if (warn_mode && fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077)) {
    CW_LOGW("token file %s is readable by group or others (mode %03o); chmod 600 it", path,
            (unsigned)(sb.st_mode & 0777));
  }
  char line[1024];
  cw_status_t st = cw_ok_status();
  for (int n = 1; !st && fgets(line, sizeof(line), f); ++n) {
    size_t len = strcspn(line, "\r\n");
    if (!line[len] && !feof(f)) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "token file %s: line %d is longer than %zu "
                          "bytes", path, n, sizeof(line) - 2);
    } else if (len > 0 && out->count >= CW_TOKEN_SET_MAX) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "token file %s: more than %d tokens (the first "
                          "line is presented, each further line accepted too)", path,
                          CW_TOKEN_SET_MAX);
    } else if (len > 0) {
      line[len] = 0;
      st = cw__token_set_add(out, line, path);
    } else if (n == 1) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "token file %s is empty", path);
    }
  }
  if (!st && out->count == 0) {
    st = cw_make_status(CW_INVALID_ARGUMENT, "token file %s is empty", path);
  }
  explicit_bzero(line, sizeof(line));
  fclose(f);
  if (st) cw_token_set_clear(out);
  return st;
}

cw_status_t cw_token_set_read_file(const char* path, cw_token_set_t* out) {
  return cw__token_file_read(path, true, out);
}

cw_status_t cw_settings_read_tokens(const cw_settings_t* settings, cw_token_set_t* out) {
  memset(out, 0, sizeof(*out));
  if (settings->given[CW_SET_TOKEN]) {
    const char* token = cw_settings_string(settings, CW_SET_TOKEN);
    return token[0] ? cw__token_set_add(out, token, "(CAUSEWAY_TOKEN)") : cw_ok_status();
  }
  const char* path = cw_settings_string(settings, CW_SET_TOKEN_FILE);
  if (!path[0]) return cw_ok_status();
  return cw_token_set_read_file(path, out);
}

static cw_status_t cw__load_token(cw_settings_t* settings, bool warn_mode) {
  if (cw_settings_string(settings, CW_SET_TOKEN)[0]) return cw_ok_status();
  const char* path = cw_settings_string(settings, CW_SET_TOKEN_FILE);
  if (!path[0]) return cw_ok_status();
  cw_token_set_t set;
  CW_RETURN_IF_ERROR(cw__token_file_read(path, warn_mode, &set), "");
  char* token = strdup(set.tokens[0]);
  cw_token_set_clear(&set);
  if (!token) return cw_make_status(CW_RESOURCE_EXHAUSTED, "token file %s: out of memory", path);
  free(settings->strings[CW_SET_TOKEN]);
  settings->strings[CW_SET_TOKEN] = token;
  return cw_ok_status();
}

cw_status_t cw_settings_load_token(cw_settings_t* settings) {
  return cw__load_token(settings, true);
}

bool cw_settings_token_set_empty(void) {
  const char* v = getenv(cw__defs[CW_SET_TOKEN].env);
  return v && !v[0];
}

const char* cw_settings_getenv(cw_setting_id_t id) {
  const cw_setting_def_t* d = cw_settings_def(id);
  const char* v = d ? getenv(d->env) : NULL;
  return v && *v ? v : NULL;
}

size_t cw_settings_warn_old_names(unsigned scope) {
  size_t n = 0;
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = &cw__defs[i];
    if (!d->old_env || !(d->scope & scope) || !getenv(d->old_env)) continue;
    CW_LOGW("%s is set but no longer read: causeway reads %s (docs/operations.md, \"Renamed "
            "settings\")", d->old_env, d->env);
    ++n;
  }
  return n;
}

void cw_settings_print_help(FILE* out, unsigned scope) {
  for (int i = 0; i < CW_SET_COUNT; ++i) {
    const cw_setting_def_t* d = &cw__defs[i];
    if (!(d->scope & scope)) continue;
    char flag[64] = "";
    if (d->name && !d->secret) snprintf(flag, sizeof(flag), "--%s", d->name);
    char bounds[64] = "";
    if (d->type == CW_SETTING_INT) {
      snprintf(bounds, sizeof(bounds), " [%" PRId64 ", %" PRId64 "]", d->min, d->max);
    } else if (d->type == CW_SETTING_SECONDS) {
      snprintf(bounds, sizeof(bounds), " [%g, %g] seconds", (double)d->min / 1000.0,
               (double)d->max / 1000.0);
    }
    const char* dflt = d->secret ? "unset" : d->default_value[0] ? d->default_value
                                           : cw__is_unset_default(d) ? "unset" : "\"\"";
    fprintf(out, "  %-26s %-34s %s%s (default %s)\n", flag, d->env, d->help, bounds, dflt);
  }
}

bool cw_settings_initialize_for_main(const char* program, const char* usage,
                                     const char* log_name, unsigned scope, int argc,
                                     char** argv, cw_settings_t* settings, int* out_exit_code) {
  *out_exit_code = 0;
  memset(settings, 0, sizeof(*settings));
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: %s %s\n\nFlags and environment variables (the usage line names the usual "
             "ones; every one below is taken):\n", program, usage);
      cw_settings_print_help(stdout, scope);
      return false;
    }
  }
  cw_log_initialize(log_name, CW_LOG_WARN);
  cw_settings_warn_old_names(scope);
  cw_status_t st = cw_settings_initialize(settings, scope);
  if (!st) st = cw_settings_parse_args(settings, argc, argv);
  // A daemon reads the file again as it starts its credentials, which warn
  // of a loose mode then (once, not twice).
  if (!st) st = cw__load_token(settings, false);
  if (st) {
    fprintf(stderr, "%s: settings: %s\n", program, cw_status_message(st));
    cw_status_free(st);
    cw_settings_deinitialize(settings);
    *out_exit_code = 2;  // as any other bad command line
    return false;
  }
  cw_log_level_t level = CW_LOG_WARN;
  const char* text = cw_settings_string(settings, CW_SET_LOG_LEVEL);
  if (!cw_log_parse_level(text, &level)) {
    fprintf(stderr, "%s: %s/--log-level: unknown log level '%s' (error, warn, info or debug)\n",
            program, cw__defs[CW_SET_LOG_LEVEL].env, text);
    *out_exit_code = 2;
  } else if ((scope & CW_SCOPE_DAEMONS) && !*cw_settings_string(settings, CW_SET_LISTEN)) {
    fprintf(stderr, "%s: --listen is required (see --help)\n", program);
    *out_exit_code = 2;
  } else if (cw_settings_token_set_empty() && !cw_settings_string(settings, CW_SET_TOKEN)[0]) {
    // A secret that came out empty (a Kubernetes Secret not filled in, an
    // unset shell variable) must not turn into "no token: anyone may connect".
    fprintf(stderr, "%s: %s is set but empty: set the cluster's token there or in %s, or unset "
            "%s to serve without one\n", program, cw__defs[CW_SET_TOKEN].env,
            cw__defs[CW_SET_TOKEN_FILE].env, cw__defs[CW_SET_TOKEN].env);
    *out_exit_code = 2;
  }
  if (*out_exit_code) {
    cw_settings_deinitialize(settings);
    return false;
  }
  cw_log_set_level(level);
  return true;
}

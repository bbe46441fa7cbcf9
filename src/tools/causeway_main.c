// `causeway`: the operator's tool. Talks to causeway-controller with the C
// client library (ADMIN_* messages, docs/protocol.md); see cw_cli.c for the
// command line and output, cw_up.c for `causeway up` / `down`,
// docs/operations.md and docs/deploy.md for examples.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_certs.h"
#include "cw_cli.h"
#include "cw_client.h"
#include "cw_settings.h"
#include "cw_time.h"
#include "cw_tls.h"
#include "cw_up.h"

static int cw__exit_for(cw_status_t st) {
  switch (cw_status_code(st)) {
    case CW_NOT_FOUND:
      return CW_CLI_NOT_FOUND;
    case CW_UNAUTHENTICATED:
      return CW_CLI_UNREACHABLE;
    default:
      return CW_CLI_FAILED;
  }
}

// Prints the error (takes st) and returns the exit code for it.
static int cw__report(const char* what, cw_status_t st) {
  fprintf(stderr, "causeway: %s: %s: %s\n", what, cw_status_code_name(cw_status_code(st)),
          cw_status_message(st));
  int code = cw__exit_for(st);
  cw_status_free(st);
  return code;
}

// max_age_s < 0: fresh numbers from every worker.
static cw_status_t cw__get_status(cw_client_t* c, double max_age_s,
                                  Causeway__V1__AdminStatus** out) {
  Causeway__V1__AdminStatusRequest req = CAUSEWAY__V1__ADMIN_STATUS_REQUEST__INIT;
  if (max_age_s >= 0) req.max_age_ms = (uint32_t)(max_age_s * 1000.0);
  return cw_client_call(c, CW_MSG_ADMIN_STATUS, &req.base, NULL, 0, NULL,
                        (ProtobufCMessage**)out, NULL);
}

static int cw__status(cw_client_t* c, const cw_cli_args_t* a) {
  Causeway__V1__AdminStatus* st = NULL;
  cw_status_t s = cw__get_status(c, a->max_age_s, &st);
  if (s) return cw__report("status", s);
  int rc = CW_CLI_OK;
  if (a->json) {
    char* text = cw_cli_status_json(st);
    if (text) fputs(text, stdout);
    else rc = cw__report("status", cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    free(text);
  } else {
    cw_cli_print_status(stdout, st);
  }
  protobuf_c_message_free_unpacked(&st->base, NULL);
  return rc;
}

static int cw__pause(cw_client_t* c, const cw_cli_args_t* a) {
  Causeway__V1__AdminSessionRequest req = CAUSEWAY__V1__ADMIN_SESSION_REQUEST__INIT;
  req.session_id = a->session_id;
  if (!a->session_id) req.name = (char*)a->target;
  uint16_t type = a->command == CW_CLI_PAUSE ? CW_MSG_ADMIN_PAUSE : CW_MSG_ADMIN_RESUME;
  ProtobufCMessage* reply = NULL;
  cw_status_t s = cw_client_call(c, type, &req.base, NULL, 0, NULL, &reply, NULL);
  if (s) return cw__report(a->command == CW_CLI_PAUSE ? "pause" : "resume", s);
  const Causeway__V1__AdminAck* ack = (const Causeway__V1__AdminAck*)reply;
  if (a->command == CW_CLI_PAUSE) {
    printf("%s; %" PRIu64 " launches held\n", ack->text, ack->launches_held);
  } else {
    printf("%s\n", ack->text);
  }
  protobuf_c_message_free_unpacked(reply, NULL);
  return CW_CLI_OK;
}

// drain --wait: polls ADMIN_STATUS until the worker says idle.
static int cw__wait_idle(cw_client_t* c, const cw_cli_args_t* a) {
  int64_t deadline = cw_time_now_ms() + (int64_t)(a->timeout_s * 1000.0);
  char last[160] = "unknown";
  for (;;) {
    Causeway__V1__AdminStatus* st = NULL;
    cw_status_t s = cw__get_status(c, -1, &st);
    if (s) return cw__report("drain --wait", s);
    const Causeway__V1__AdminWorker* found = NULL;
    for (size_t i = 0; i < st->n_workers; ++i) {
      if (!strcmp(st->workers[i]->name, a->target)) found = st->workers[i];  // newest wins
    }
    bool idle = found && !strcmp(found->state, "idle");
    bool dead = found && !strcmp(found->state, "dead");
    if (found) {
      snprintf(last, sizeof(last), "%s: %" PRIu64 " launches queued, %" PRIu64 " in flight",
               found->state, found->queue_depth, found->launches_in_flight);
    }
    protobuf_c_message_free_unpacked(&st->base, NULL);
    if (idle) {
      printf("worker %s is idle\n", a->target);
      return CW_CLI_OK;
    }
    if (dead) {
      fprintf(stderr, "causeway: drain --wait: worker %s died while draining\n", a->target);
      return CW_CLI_FAILED;
    }
    if (cw_time_now_ms() >= deadline) {
      fprintf(stderr, "causeway: drain --wait: worker %s is not idle after %.1f s (%s)\n",
              a->target, a->timeout_s, last);
      return CW_CLI_TIMEOUT;
    }
    usleep(200 * 1000);
  }
}

static int cw__drain(cw_client_t* c, const cw_cli_args_t* a) {
  Causeway__V1__AdminDrainRequest req = CAUSEWAY__V1__ADMIN_DRAIN_REQUEST__INIT;
  req.worker = (char*)a->target;
  uint16_t type = a->command == CW_CLI_DRAIN ? CW_MSG_ADMIN_DRAIN : CW_MSG_ADMIN_UNDRAIN;
  ProtobufCMessage* reply = NULL;
  cw_status_t s = cw_client_call(c, type, &req.base, NULL, 0, NULL, &reply, NULL);
  if (s) return cw__report(a->command == CW_CLI_DRAIN ? "drain" : "undrain", s);
  printf("%s\n", ((const Causeway__V1__AdminAck*)reply)->text);
  protobuf_c_message_free_unpacked(reply, NULL);
  if (a->command == CW_CLI_DRAIN && a->wait) return cw__wait_idle(c, a);
  return CW_CLI_OK;
}

int main(int argc, char** argv) {
  // Certificates need no controller and have their own words (cw_certs.c).
  if (argc > 1 && !strcmp(argv[1], "certs")) return cw_certs_main(argc, argv);
  cw_cli_args_t args;
  char err[256];
  if (!cw_cli_parse(argc, argv, &args, err, sizeof(err))) {
    if (!err[0]) {
      fputs(cw_cli_usage, stdout);
      return CW_CLI_OK;
    }
    fprintf(stderr, "causeway: %s\n", err);
    return CW_CLI_USAGE;
  }
  // CAUSEWAY_CONTROLLER and the token as the daemons read it: CAUSEWAY_TOKEN,
  // else the file CAUSEWAY_TOKEN_FILE names.
  cw_settings_warn_old_names(CW_SCOPE_TOOL);
  cw_settings_t settings;
  cw_status_t s = cw_settings_initialize(&settings, CW_SCOPE_TOOL);
  if (!s && (args.command == CW_CLI_UP || args.command == CW_CLI_DOWN)) {
    // A local cluster of its own (cw_up.c): no controller to reach, and no
    // token of the caller's (up makes one).
    int rc = args.command == CW_CLI_UP ? cw_up_start(&args, &settings) : cw_up_stop(&args);
    cw_settings_deinitialize(&settings);
    return rc;
  }
  if (!s) s = cw_settings_load_token(&settings);
  if (s) {
    fprintf(stderr, "causeway: settings: %s\n", cw_status_message(s));
    cw_status_free(s);
    cw_settings_deinitialize(&settings);
    return CW_CLI_USAGE;
  }
  const char* address =
      args.controller ? args.controller : cw_settings_string(&settings, CW_SET_CONTROLLER);
  if (!address[0]) {
    fprintf(stderr, "causeway: no controller address: pass --controller ADDR or set "
            "CAUSEWAY_CONTROLLER\n");
    cw_settings_deinitialize(&settings);
    return CW_CLI_USAGE;
  }
  // TLS settings are this host's: a mistake there is not an unreachable
  // controller. (A Unix socket stays plaintext.)
  cw_tls_t* tls = NULL;
  s = strchr(address, '/') ? cw_ok_status() : cw_client_tls_from_environment(&tls);
  if (s) {
    fprintf(stderr, "causeway: TLS settings: %s\n", cw_status_message(s));
    cw_status_free(s);
    cw_settings_deinitialize(&settings);
    return CW_CLI_USAGE;
  }
  cw_client_options_t opts = {0};
  opts.tls = tls;
  opts.token = cw_settings_string(&settings, CW_SET_TOKEN);
  opts.peer_name = "causeway-cli";
  opts.connect_timeout_ms = 5000;
  // A controller that stops answering after HELLO fails the call (PING is
  // answered by a live one however long the request takes) instead of
  // hanging the tool.
  opts.liveness_ms = (int)cw_settings_int(&settings, CW_SET_CONTROLLER_TIMEOUT_MS);
  cw_client_t* c = NULL;
  s = cw_client_connect(address, &opts, &c);
  cw_tls_release(tls);  // the connection keeps what it needs
  if (s) {
    fprintf(stderr, "causeway: cannot reach the controller at %s: %s\n", address,
            cw_status_message(s));
    cw_status_free(s);
    cw_settings_deinitialize(&settings);
    return CW_CLI_UNREACHABLE;
  }
  cw_settings_deinitialize(&settings);
  int rc = CW_CLI_OK;
  switch (args.command) {
    case CW_CLI_STATUS:
      rc = cw__status(c, &args);
      break;
    case CW_CLI_PAUSE:
    case CW_CLI_RESUME:
      rc = cw__pause(c, &args);
      break;
    case CW_CLI_DRAIN:
    case CW_CLI_UNDRAIN:
      rc = cw__drain(c, &args);
      break;
    case CW_CLI_HELP:
    case CW_CLI_UP:
    case CW_CLI_DOWN:
      break;
  }
  cw_client_release(c);
  return rc;
}

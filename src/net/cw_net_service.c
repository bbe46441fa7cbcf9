// What every accepted connection goes through before a daemon's handler
// runs: HELLO first and once (credentials, protocol version, role), then the
// message table's rules for each request (served here, a sender that may
// send it, a session where it needs one). One place for both daemons.
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cw_log.h"
#include "cw_net_internal.h"

static void cw__free_msg(ProtobufCMessage* msg) {
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
}

// "CLIENT or WORKER": the roles a service accepts in HELLO.
static void cw__roles_text(uint32_t roles, char* out, size_t capacity) {
  size_t used = 0;
  int n = 0;
  out[0] = 0;
  for (int role = CAUSEWAY__V1__ROLE__ROLE_CLIENT; role <= CAUSEWAY__V1__ROLE__ROLE_CONTROLLER;
       ++role) {
    if (!(roles & CW_ROLE_BIT(role)) || used >= capacity) continue;
    int k = snprintf(out + used, capacity - used, "%s%s", n++ ? " or " : "", cw_role_name(role));
    if (k > 0) used += (size_t)k;
  }
}

static void cw__hello(cw_net_conn_t* c, const cw_frame_header_t* h,
                      const Causeway__V1__HelloRequest* r) {
  cw_net_t* net = c->net;
  const cw_net_service_t* svc = net->service;
  // Credentials first: an unauthenticated peer learns nothing else.
  char* one[1] = {(char*)net->options.token};
  cw_token_set_t only = {one, net->options.token[0] ? 1 : 0};
  cw_status_t st = cw_net_hello_authenticate(net->tokens ? net->tokens : &only, r->token.data,
                                             r->token.len, c->name, r->role);
  if (!st && (r->min_version > r->max_version || r->max_version < CW_PROTOCOL_MIN_VERSION ||
              r->min_version > CW_PROTOCOL_VERSION)) {
    st = cw_make_status(CW_UNIMPLEMENTED, "protocol versions %u..%u not supported (%s speaks "
                        "%u..%u)", r->min_version, r->max_version, svc->name,
                        CW_PROTOCOL_MIN_VERSION, CW_PROTOCOL_VERSION);
  }
  bool known = r->role >= CAUSEWAY__V1__ROLE__ROLE_CLIENT &&
               r->role <= CAUSEWAY__V1__ROLE__ROLE_CONTROLLER;
  if (!st && (!known || !(svc->hello_roles & CW_ROLE_BIT(r->role)))) {
    char roles[64];
    cw__roles_text(svc->hello_roles, roles, sizeof(roles));
    st = cw_make_status(CW_PERMISSION_DENIED, "the %s accepts HELLO role %s, not %d", svc->name,
                        roles, r->role);
  }
  if (st) {
    cw_net_conn_violation(c, h->type, h->request_id, st);
    return;
  }
  if (r->peer_name && r->peer_name[0]) cw_net_conn_set_name(c, r->peer_name);
  uint64_t session_id = 0;
  bool has_session = false;
  if (svc->on_hello) st = svc->on_hello(c, r, &session_id, &has_session);
  if (st) {
    cw_net_conn_violation(c, h->type, h->request_id, st);
    return;
  }
  cw_net__hello_accepted(c, r->role, has_session);
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = CW_PROTOCOL_VERSION;
  rep.session_id = session_id;
  rep.worker_name = (char*)net->options.name;
  rep.max_payload = net->options.limits.max_payload;
  rep.max_bulk = net->options.limits.max_bulk;
  rep.same_host_copies = svc->same_host_copies && cw_net_conn_peer_pid(c) > 0;
  rep.session_key = c->hello_session_key;
  rep.session_seq_next = c->hello_seq_next;
  if (r->keepalive_ms) rep.keepalive_ms = cw_net__keepalive_start(c, r->keepalive_ms);
  CW_LOGI("%s: HELLO role %s session %" PRIu64, c->name, cw_role_name(r->role), session_id);
  cw_net_conn_reply(c, h->type, h->request_id, &rep.base);
}

// The message table's rules; NULL when the request may be handled.
static cw_status_t cw__check_rules(const cw_net_conn_t* c, const cw_frame_header_t* h) {
  const cw_net_service_t* svc = c->net->service;
  const cw_msg_info_t* m = cw_msg_info(h->type);
  const char* name = cw_msg_type_name(h->type);
  if (!m || !svc->handlers[h->type]) {
    return cw_make_status(CW_UNIMPLEMENTED, "the %s does not serve %s%s", svc->name, name,
                          svc->unserved_hint ? svc->unserved_hint : "");
  }
  if (!(m->senders & CW_ROLE_BIT(c->role))) {
    char who[64];
    cw_msg_senders_text(m->senders, who, sizeof(who));
    return cw_make_status(CW_PERMISSION_DENIED, "%s is for %s (this connection's HELLO role is "
                          "%s)", name, who, cw_role_name(c->role));
  }
  if (m->needs_session && !c->has_session) {
    return cw_make_status(CW_FAILED_PRECONDITION, "%s needs a session (this %s connection has "
                          "none)", name, cw_role_name(c->role));
  }
  return cw_ok_status();
}

void cw_net__serve(cw_net_conn_t* c, const cw_frame_header_t* h, ProtobufCMessage* msg) {
  const cw_net_service_t* svc = c->net->service;
  if (h->type == CW_MSG_HELLO) {
    if (c->hello_done) {
      cw_net_conn_violation(c, h->type, h->request_id,
                            cw_make_status(CW_FAILED_PRECONDITION, "second HELLO"));
    } else {
      cw__hello(c, h, (const Causeway__V1__HelloRequest*)msg);
    }
    cw__free_msg(msg);
    return;
  }
  if (!c->hello_done) {  // the parser refuses these already; kept for any other path
    cw__free_msg(msg);
    cw_net_conn_violation(c, h->type, h->request_id,
                          cw_make_status(CW_FAILED_PRECONDITION, "%s before HELLO",
                                         cw_msg_type_name(h->type)));
    return;
  }
  cw_status_t st = cw__check_rules(c, h);
  if (st) {
    cw__free_msg(msg);
    cw_net_conn_reply_error(c, h->type, h->request_id, st);  // bulk bytes are discarded
    return;
  }
  if (svc->admit && !svc->admit(c, h, &msg)) {
    cw__free_msg(msg);
    return;
  }
  assert(svc->handlers[h->type]);  // cw__check_rules refused types not served here
  svc->handlers[h->type](c, h, &msg);
  cw__free_msg(msg);
  if (svc->applied) svc->applied(c, h);
}

void cw_net_reply_ping(cw_net_conn_t* conn, const cw_frame_header_t* h, ProtobufCMessage** msg) {
  cw_net_conn_reply(conn, h->type, h->request_id, *msg);
}

void cw_net_conn_set_hello_session(cw_net_conn_t* c, uint64_t key, uint64_t seq_next) {
  c->hello_session_key = key;
  c->hello_seq_next = seq_next;
}

uint64_t cw_net_conn_hello_session_key(const cw_net_conn_t* c) { return c->hello_session_key; }

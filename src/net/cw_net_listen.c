// Where connections come from (see cw_net.h): addresses, listening and
// accepting (with the connection budget and HELLO deadline), connecting
// (with HELLO sent at once), and the parent watch.
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cw_dirs.h"
#include "cw_log.h"
#include "cw_messages.h"
#include "cw_net_internal.h"
#include "cw_time.h"

// host:port split and checked, a bracketed IPv6 host unwrapped; no lookup.
static cw_status_t cw__split_host_port(const char* address, char* host, size_t cap,
                                       int* out_port) {
  const char* colon = strrchr(address, ':');
  if (!colon || colon == address || !colon[1]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "address '%s' is not host:port or a socket path",
                          address);
  }
  size_t hl = (size_t)(colon - address);
  if (hl >= cap) return cw_make_status(CW_INVALID_ARGUMENT, "host name too long");
  memcpy(host, address, hl);
  host[hl] = 0;
  if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = 0;
  }
  char* end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!end || *end || port < 0 || port > 65535) {
    return cw_make_status(CW_INVALID_ARGUMENT, "bad port in '%s'", address);
  }
  *out_port = (int)port;
  return cw_ok_status();
}

// A numeric host: true, *out filled.
static bool cw__literal(const char* host, int port, struct sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  return uv_ip4_addr(host, port, (struct sockaddr_in*)out) == 0 ||
         uv_ip6_addr(host, port, (struct sockaddr_in6*)out) == 0;
}

static void cw__set_port(struct sockaddr_storage* sa, int port) {
  if (sa->ss_family == AF_INET) ((struct sockaddr_in*)sa)->sin_port = htons((uint16_t)port);
  else ((struct sockaddr_in6*)sa)->sin6_port = htons((uint16_t)port);
}

cw_status_t cw_net_parse_host_port(const char* address, struct sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  char host[256];
  int port = 0;
  cw_status_t st = cw__split_host_port(address, host, sizeof(host), &port);
  if (st) return st;
  if (cw__literal(host, port, out)) return cw_ok_status();
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc || !res) {
    return cw_make_status(CW_UNAVAILABLE, "cannot resolve '%s': %s", host, gai_strerror(rc));
  }
  memcpy(out, res->ai_addr, res->ai_addrlen);
  cw__set_port(out, port);
  freeaddrinfo(res);
  return cw_ok_status();
}

cw_status_t cw_net_tcp_listen(uv_tcp_t* listener, const char* address, uv_connection_cb cb,
                              char* out_address, size_t cap) {
  struct sockaddr_storage sa;
  CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "listen");
  int rc = uv_tcp_bind(listener, (const struct sockaddr*)&sa, 0);
  if (rc >= 0) rc = uv_listen((uv_stream_t*)listener, SOMAXCONN, cb);
  if (rc < 0) return cw_make_status(CW_UNAVAILABLE, "cannot listen on %s: %s", address,
                                    uv_strerror(rc));
  struct sockaddr_storage bound;
  int len = sizeof(bound);
  uv_tcp_getsockname(listener, (struct sockaddr*)&bound, &len);
  int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&bound)->sin6_port)
                                         : ntohs(((struct sockaddr_in*)&bound)->sin_port);
  const char* colon = strrchr(address, ':');
  snprintf(out_address, cap, "%.*s:%d", (int)(colon - address), address, port);
  return cw_ok_status();
}

// Accepts per loop pass (cw_net_pacer_t): a burst of connects is taken in
// slices, with the reads of those already accepted in between.
#define CW__ACCEPTS_PER_PASS 16
// Warnings a flood repeats: one line per period, with a count.
#define CW__WARN_PERIOD_MS 5000

static void cw__hello_timeout(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  if (c->closing || c->hello_done) return;
  cw_net_t* net = c->net;
  net->hello_timeouts++;
  uint64_t more = 0;
  if (cw_net_warn_limit_pass(&net->warn_hello, cw_time_now_ms(), CW__WARN_PERIOD_MS, &more)) {
    CW_LOGW("%s: no HELLO within %" PRId64 " ms; closing (%" PRIu64 " more since the last "
            "such warning)", c->name, net->options.hello_timeout_ms, more);
  }
  cw_net_conn_close(c, cw_make_status(CW_DEADLINE_EXCEEDED, "no HELLO in time"));
}

// A TCP peer whose host died or dropped off the network sends no FIN: the
// socket stays open, and with it what the peer held (a vanished client's
// session and its devices at the controller, a lost controller the worker
// would only learn of at its next retransmission, minutes after a partition
// heals). Keepalive probes end an idle one after about the link timeout.
// Bytes sent and never acknowledged end one (TCP_USER_TIMEOUT) only where the
// peer never holds its reading, since the kernel counts a zero window that
// lasts as long the same way: on accepted connections (clients, the
// controller's links, peers' PUT links read what a daemon answers at once)
// and on a worker's link to its controller, not on links to a worker, which
// holds a connection's reading for memory and for its order of requests (a
// paused session) as long as it needs.
int64_t cw_net__tcp_peer_timeout_ms(const cw_net_t* net) {
  int64_t ms = net->options.link_timeout_ms;
  return ms <= 0 ? 0 : ms < 1000 ? 1000 : ms;  // not under TCP's own retransmission timeouts
}

static void cw__watch_tcp_peer(cw_net_conn_t* c, bool always_reads) {
  int64_t ms = cw_net__tcp_peer_timeout_ms(c->net);
  uv_os_fd_t fd;
  if (!ms || c->h.handle.type != UV_TCP || uv_fileno(&c->h.handle, &fd) != 0) return;
  int one = 1, idle = (int)(ms / 2000) > 0 ? (int)(ms / 2000) : 1;
  int intvl = (int)(ms / 8000) > 0 ? (int)(ms / 8000) : 1, cnt = 8;
  unsigned int user = (unsigned int)ms;
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  if (always_reads) (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof(user));
}

void cw_net_conn_peer_always_reads(cw_net_conn_t* c) {
  c->peer_always_reads = true;
  if (c->connected) cw__watch_tcp_peer(c, true);
}

// Names the peer and sets its address for the gate.
static void cw__name_peer(cw_net_conn_t* c) {
  uv_os_fd_t fd = -1;
  if (uv_fileno(&c->h.handle, &fd) != 0) fd = -1;
  cw_net_describe_unix_peer(fd, c->name, sizeof(c->name));
  cw_net_peer_key_from_sockaddr(NULL, &c->gate.peer);
  if (c->net->is_pipe) return;
  struct sockaddr_storage sa;
  int len = sizeof(sa);
  if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr*)&sa, &len) == 0) {
    cw_net_peer_key_from_sockaddr((const struct sockaddr*)&sa, &c->gate.peer);
    char ip[64] = "?";
    int port = 0;
    if (sa.ss_family == AF_INET) {
      uv_ip4_name((struct sockaddr_in*)&sa, ip, sizeof(ip));
      port = ntohs(((struct sockaddr_in*)&sa)->sin_port);
    } else if (sa.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6*)&sa, ip, sizeof(ip));
      port = ntohs(((struct sockaddr_in6*)&sa)->sin6_port);
    }
    snprintf(c->name, sizeof(c->name), "%s:%d", ip, port);
  }
  uv_tcp_nodelay(&c->h.tcp, 1);
  cw__watch_tcp_peer(c, true);
}

// Closes a connection before HELLO to make room for a newcomer.
static void cw__evict(cw_net_t* net, cw_net_conn_t* victim, const char* newcomer,
                      const char* budget) {
  uint64_t more = 0;
  if (cw_net_warn_limit_pass(&net->warn_evict, cw_time_now_ms(), CW__WARN_PERIOD_MS, &more)) {
    CW_LOGW("%s: closing the oldest connection without HELLO to make room for %s (%s full; "
            "%" PRIu64 " more since the last such warning)", victim->name, newcomer, budget,
            more);
  }
  cw_net_conn_close(victim, cw_make_status(CW_RESOURCE_EXHAUSTED,
                                           "closed before HELLO to make room (%s)", budget));
}

static cw_net_conn_t* cw__conn_of(cw_net_gate_entry_t* e) {
  return (cw_net_conn_t*)((char*)e - offsetof(cw_net_conn_t, gate));
}

static void cw__accept_one(uv_stream_t* server) {
  cw_net_t* net = server->data;
  cw_net_conn_t* c = cw_net__conn_create(net, false, net->is_pipe);
  if (!c) {
    cw_net_pacer_retry(&net->pacer);  // (before, the daemon never accepted again)
    return;
  }
  if (uv_accept(server, &c->h.stream) < 0) {
    cw_net_conn_close(c, NULL);
    return;
  }
  cw__name_peer(c);
  c->tls = net->tls_listener;
  // Room before HELLO first (closing a waiting one if need be), then room in
  // all: a waiting one goes before the newcomer is refused.
  bool per_peer = net->gate.max_per_peer < net->gate.max_total &&
                  cw_net_gate_peer_count(&net->gate, &c->gate.peer) >= net->gate.max_per_peer;
  cw_net_gate_entry_t* victim = cw_net_gate_admit(&net->gate, &c->gate);
  if (victim) {
    cw__evict(net, cw__conn_of(victim), c->name,
              per_peer ? "its address's budget, --max-unauth-per-peer"
                       : "the budget of connections before HELLO, --max-unauth-connections");
  }
  if ((int64_t)net->inbound_connections > net->options.max_connections) {
    // The newcomer is the last silent entry: any other one is older.
    cw_net_gate_entry_t* oldest = net->gate.silent_head != &c->gate ? net->gate.silent_head
                                                                    : net->gate.active_head;
    if (oldest) {
      cw__evict(net, cw__conn_of(oldest), c->name, "--max-connections");
    } else {
      net->refused++;
      uint64_t more = 0;
      if (cw_net_warn_limit_pass(&net->warn_full, cw_time_now_ms(), CW__WARN_PERIOD_MS,
                                 &more)) {
        CW_LOGW("%s: too many connections (--max-connections %" PRId64 ", all past HELLO); "
                "refusing (%" PRIu64 " more since the last such warning)", c->name,
                net->options.max_connections, more);
      }
      cw_net_conn_close(c, NULL);
      return;
    }
  }
  uv_update_time(c->timer.loop);  // from now, not from the loop's last pass
  uv_timer_start(&c->timer, cw__hello_timeout, (uint64_t)net->options.hello_timeout_ms, 0);
  if (net->on_accept) net->on_accept(net, c);
  if (!c->closing) cw_net__conn_start_reading(c);
}

static void cw__on_connection(uv_stream_t* server, int status) {
  cw_net_t* net = server->data;
  if (status < 0) {
    CW_LOGW("accept failed: %s", uv_strerror(status));
    return;
  }
  if (cw_net_pacer_take(&net->pacer)) cw__accept_one(server);
}

// Every connection is a descriptor: the soft limit rises (to the hard one at
// most) to the connection budget plus room for the daemon's own files.
static void cw__raise_fd_limit(const cw_net_t* net) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = (rlim_t)net->options.max_connections + 256;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want) ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
      CW_LOGW("open files limited to %llu (ulimit -Hn): fewer than --max-connections %" PRId64
              " + 256; raise the hard limit", (unsigned long long)rl.rlim_cur,
              net->options.max_connections);
    } else {
      CW_LOGI("open files limit raised from %llu to %llu", (unsigned long long)was,
              (unsigned long long)rl.rlim_cur);
    }
  }
}

cw_status_t cw_net_unix_prepare(const char* path) {
  // libuv's uv_pipe_bind cuts a longer path short without a word: the
  // socket would land elsewhere (beside its directory) under another name.
  size_t max = sizeof(((struct sockaddr_un*)0)->sun_path) - 1;
  if (strlen(path) > max) {
    return cw_make_status(CW_INVALID_ARGUMENT, "Unix socket path too long (%zu > %zu bytes): %s",
                          strlen(path), max, path);
  }
  struct stat sb;
  // libuv reports a missing directory as "permission denied": say what it is.
  const char* slash = strrchr(path, '/');
  if (slash && slash > path) {
    char dir[sizeof(((struct sockaddr_un*)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    int e = stat(dir, &sb) != 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
    if (e) return cw_make_status(CW_INVALID_ARGUMENT, "%s: %s: %s", path, dir, strerror(e));
  }
  // A stale socket from an earlier run would make bind fail; one that a
  // live process still answers on is not stale, and is left to it.
  if (stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
    if (cw_dirs_socket_live(path)) {
      return cw_make_status(CW_FAILED_PRECONDITION, "%s: another process is listening there "
                            "(stop it, or choose another path)", path);
    }
    unlink(path);
  }
  return cw_ok_status();
}

int cw_net_unix_bind(const char* path, bool owner_only) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
  mode_t old = owner_only ? umask(0077) : 0;
  int rc = bind(fd, (struct sockaddr*)&sun, sizeof(sun));
  int e = errno;
  if (owner_only) umask(old);
  if (rc != 0) {
    close(fd);
    return -e;
  }
  return fd;
}

void cw_net_unix_remember(const char* path, cw_net_unix_id_t* id) {
  struct stat sb;
  id->set = stat(path, &sb) == 0;
  id->dev = id->set ? sb.st_dev : 0;
  id->ino = id->set ? sb.st_ino : 0;
}

void cw_net_unix_unlink_own(const char* path, const cw_net_unix_id_t* id) {
  struct stat sb;
  if (id->set && stat(path, &sb) == 0 && sb.st_dev == id->dev && sb.st_ino == id->ino) {
    unlink(path);
  }
}

cw_status_t cw_net_listen(cw_net_t* net, const char* address, const cw_net_service_t* service,
                          cw_net_accept_fn on_accept) {
  int rc;
  net->on_accept = on_accept;
  net->service = service;
  int64_t unauth = net->options.max_unauth_connections;
  if (unauth <= 0 || unauth > net->options.max_connections) unauth = net->options.max_connections;
  int64_t per_peer = net->options.max_unauth_per_peer;
  CW_RETURN_IF_ERROR(cw_net_gate_initialize(&net->gate, (size_t)(unauth > 0 ? unauth : 1),
                                            (size_t)(per_peer > 0 ? per_peer : 0)),
                     "--listen");
  net->gate_on = true;
  if (strchr(address, '/')) {
    CW_RETURN_IF_ERROR(cw_net_unix_prepare(address), "--listen");
    net->is_pipe = true;
    rc = uv_pipe_init(net->loop, &net->listener.pipe, 0);
    if (rc == 0) {
      net->listening = true;
      int fd = cw_net_unix_bind(address, false);
      rc = fd < 0 ? fd : uv_pipe_open(&net->listener.pipe, fd);
      if (fd >= 0 && rc < 0) close(fd);
    }
    if (rc == 0) {
      net->unix_path = strdup(address);
      cw_net_unix_remember(address, &net->unix_id);
      snprintf(net->listen_address, sizeof(net->listen_address), "%s", address);
    }
  } else {
    struct sockaddr_storage sa;
    CW_RETURN_IF_ERROR(cw_net_parse_host_port(address, &sa), "--listen");
    if (net->options.tls.enabled) {
      // The certificate is loaded now: a daemon with a bad one does not start.
      cw_tls_t* tls = NULL;
      CW_RETURN_IF_ERROR(cw_net__tls_context(net, true, &tls), "--listen %s", address);
      net->tls_listener = true;
    }
    rc = uv_tcp_init(net->loop, &net->listener.tcp);
    if (rc == 0) {
      net->listening = true;
      rc = uv_tcp_bind(&net->listener.tcp, (const struct sockaddr*)&sa, 0);
    }
    if (rc == 0) {
      struct sockaddr_storage bound;
      int len = sizeof(bound);
      rc = uv_tcp_getsockname(&net->listener.tcp, (struct sockaddr*)&bound, &len);
      int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&bound)->sin6_port)
                                             : ntohs(((struct sockaddr_in*)&bound)->sin_port);
      const char* colon = strrchr(address, ':');
      snprintf(net->listen_address, sizeof(net->listen_address), "%.*s:%d",
               (int)(colon - address), address, port);
    }
  }
  net->listener.handle.data = net;
  // A long accept queue: a burst of connects waits there instead of having
  // SYNs dropped (the newcomer then makes room, cw_net_gate.h).
  if (rc == 0) rc = uv_listen(&net->listener.stream, SOMAXCONN, cw__on_connection);
  if (rc < 0) {
    return cw_make_status(CW_UNAVAILABLE, "cannot listen on %s: %s", address, uv_strerror(rc));
  }
  cw_net_pacer_initialize(&net->pacer, net->loop, &net->listener.stream, CW__ACCEPTS_PER_PASS,
                          cw__accept_one, "");
  cw__raise_fd_limit(net);
  return cw_ok_status();
}

static void cw__redial(cw_net_conn_t* c);

static void cw__connected(uv_connect_t* req, int status) {
  cw_net_conn_t* c = req->data;
  if (status < 0 && !c->closing && c->addr_next) {
    cw__redial(c);  // the deadline runs on; the request's reference goes to the next try
    return;
  }
  // On success the deadline runs on until the peer answers HELLO (below).
  if (!c->closing && status < 0) uv_timer_stop(&c->timer);
  if (status < 0) {
    if (!c->closing) {
      c->unusable = true;
      cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", c->address,
                                          uv_strerror(status)));
    }
  } else if (!c->closing) {
    c->connected = true;
    if (c->h.handle.type == UV_TCP) uv_tcp_nodelay(&c->h.tcp, 1);
    cw__watch_tcp_peer(c, c->peer_always_reads);
    cw_net__conn_start_reading(c);
    if (c->dialing) {
      c->dialing = false;
      cw_net__conn_write_waiting(c);
    }
  }
  cw_net_conn_release(c);
}

// Connects to the name's next address; the connect request holds the
// reference the lookup held.
static void cw__dial_next(cw_net_conn_t* c) {
  struct addrinfo* ai = c->addr_next;
  c->addr_next = ai->ai_next;
  struct sockaddr_storage sa;
  memset(&sa, 0, sizeof(sa));
  memcpy(&sa, ai->ai_addr, ai->ai_addrlen <= sizeof(sa) ? ai->ai_addrlen : sizeof(sa));
  int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, (const struct sockaddr*)&sa, cw__connected);
  if (rc >= 0) return;
  if (c->addr_next) {  // at once (no route for that family): the next
    cw__redial(c);
    return;
  }
  c->unusable = true;
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", c->address,
                                      uv_strerror(rc)));
  cw_net_conn_release(c);
}

static void cw__redial_closed(uv_handle_t* h) {
  cw_net_conn_t* c = h->data;
  c->redialing = false;
  if (c->closing) {  // closed meanwhile: this was the handle's close too
    cw_net_conn_release(c);  // the handle's
    cw_net_conn_release(c);  // the connect request's
    return;
  }
  (void)uv_tcp_init(c->timer.loop, &c->h.tcp);  // no socket yet: cannot fail
  c->h.handle.data = c;
  cw__dial_next(c);
}

static void cw__redial(cw_net_conn_t* c) {
  c->redialing = true;
  uv_close(&c->h.handle, cw__redial_closed);
}

// A host name resolved (on libuv's thread pool): connect to its addresses in
// turn; what waited for the socket goes when one connects. The lookup's
// reference becomes the connect request's.
static void cw__resolved(uv_getaddrinfo_t* req, int status, struct addrinfo* res) {
  cw_net_conn_t* c = req->data;
  c->resolving = false;
  if (c->closing) {  // closed meanwhile (its deadline, or its owner)
    uv_freeaddrinfo(res);
    cw_net_conn_release(c);
    return;
  }
  int rc = status;
  if (rc >= 0 && !res) rc = UV_EAI_NONAME;
  if (rc >= 0) {
    c->addrs = c->addr_next = res;  // freed with the connection
    c->dialing = true;
    cw__dial_next(c);
    return;
  }
  char host[256] = "";
  int port = 0;
  cw_status_free(cw__split_host_port(c->address, host, sizeof(host), &port));
  c->unusable = true;
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: cannot resolve "
                                      "'%s': %s", c->address, host, uv_strerror(rc)));
  uv_freeaddrinfo(res);
  cw_net_conn_release(c);
}

// The connect deadline covers the TLS handshake and the HELLO answer too: a
// peer that accepts and then says nothing (wedged, or hostile) would
// otherwise hold the connection, and whoever waits on it, for ever.
static void cw__connect_timeout(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  if (c->closing || c->hello_done) return;
  c->unusable = true;
  const char* what = c->resolving              ? "resolving its name timed out"
                     : !c->connected            ? "connect timed out"
                     : c->tls && !c->tls_up     ? "connected, but the TLS handshake timed out"
                                                : "connected, but HELLO got no answer in time";
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", c->address,
                                      what));
}

// An outbound link whose peer keeps it warm (HelloReply.keepalive_ms): one
// that owes answers and brings nothing for link_timeout_ms is lost, though
// its peer may live on for others (a one-way partition). Closing it fails
// what it owes, with the reason.
static void cw__link_watch(uv_timer_t* t) {
  cw_net_conn_t* c = t->data;
  int64_t limit = c->link_limit_ms;
  uint64_t now = (uint64_t)cw_time_now_ms();
  uint64_t quiet = now > c->last_rx_ms ? now - c->last_rx_ms : 0;
  if (c->closing || !c->num_outreqs || quiet < (uint64_t)limit) return;
  // Timers run before the loop polls: after a long pass of this loop, bytes
  // may wait unread in the socket. Those are not silence.
  uv_os_fd_t fd;
  char b;
  if (uv_fileno(&c->h.handle, &fd) == 0 && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0) return;
  CW_LOGW("%s: nothing from %s for %llu ms, not even its keepalive: closing the link",
          c->name, c->address, (unsigned long long)quiet);
  cw_net_conn_close(c, cw_make_status(CW_UNAVAILABLE, "no answer from %s for %llu ms, not even "
                                      "its keepalive: it is hung or unreachable (the link "
                                      "waits %lld ms)", c->address, (unsigned long long)quiet,
                                      (long long)limit));
}

static void cw__hello_answered(void* user, cw_net_conn_t* c, cw_status_t status,
                               const ProtobufCMessage* reply, uint8_t* bulk, uint64_t bulk_len) {
  free(bulk);
  if (!status) {
    c->hello_done = true;
    c->hello_session_key = ((const Causeway__V1__HelloReply*)reply)->session_key;
    if (c->closing) return;
    uv_timer_stop(&c->timer);
    int64_t limit = c->net->options.link_timeout_ms;
    uint32_t period = ((const Causeway__V1__HelloReply*)reply)->keepalive_ms;
    if (limit > 0 && period) {
      limit = c->link_limit_ms = cw_keepalive_limit(limit, period);
      uint64_t tick = limit >= 8 ? (uint64_t)limit / 4 : 2;
      c->last_rx_ms = (uint64_t)cw_time_now_ms();
      uv_timer_start(&c->timer, cw__link_watch, tick, tick);
    }
    return;
  }
  if (c->closing) {  // unreachable: already said why
    cw_status_free(status);
    return;
  }
  CW_LOGW("peer %s refused HELLO: %s", c->name, cw_status_message(status));
  c->unusable = true;
  cw_net_conn_close(c, cw_status_annotate(status, "peer %s refused HELLO", c->name));
}

static cw_status_t cw__connect(cw_net_t* net, const char* address, const char* name, int role,
                               uint64_t session_id, bool fresh_session,
                               const cw_net_conn_callbacks_t* callbacks, void* user,
                               int64_t timeout_ms, cw_net_conn_t** out_conn) {
  *out_conn = NULL;
  bool pipe = strchr(address, '/') != NULL;
  if (pipe && strlen(address) >= sizeof(((struct sockaddr_un*)0)->sun_path)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "peer %s: Unix socket path too long (%zu > %zu "
                          "bytes)", address, strlen(address),
                          sizeof(((struct sockaddr_un*)0)->sun_path) - 1);
  }
  struct sockaddr_storage sa;
  char host[256] = "";
  int port = 0;
  bool named = false;  // a host name: resolved off the loop (a slow DNS must not stall it)
  if (!pipe) {
    CW_RETURN_IF_ERROR(cw__split_host_port(address, host, sizeof(host), &port), "peer %s",
                       address);
    named = !cw__literal(host, port, &sa);
  }
  cw_net_conn_t* c = cw_net__conn_create(net, true, pipe);
  if (!c) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a connection");
  snprintf(c->address, sizeof(c->address), "%s", address);
  cw_net_conn_set_name(c, name ? name : address);
  if (!pipe && net->options.tls.enabled) {
    cw_status_t st = cw_net__tls_start_outbound(c, address);
    if (st) {
      c->unusable = true;
      cw_net_conn_close(c, cw_status_clone(st));
      return st;
    }
  }
  c->connect_req.data = c;
  if (pipe) {
    uv_pipe_connect(&c->connect_req, &c->h.pipe, address, cw__connected);
    cw_net_conn_retain(c);  // held by the connect request
  } else if (named) {
    char service[8];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    c->resolve_req.data = c;
    int rc = uv_getaddrinfo(c->timer.loop, &c->resolve_req, cw__resolved, host, service, &hints);
    if (rc < 0) {
      cw_status_t st = cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: cannot resolve "
                                      "'%s': %s", address, host, uv_strerror(rc));
      c->unusable = true;
      cw_net_conn_close(c, cw_status_clone(st));
      return st;
    }
    c->resolving = true;
    cw_net_conn_retain(c);  // held by the lookup, then by the connect request
  } else {
    int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, (const struct sockaddr*)&sa,
                            cw__connected);
    if (rc < 0) {
      cw_status_t st = cw_make_status(CW_UNAVAILABLE, "peer %s unreachable: %s", address,
                                      uv_strerror(rc));
      c->unusable = true;
      cw_net_conn_close(c, cw_status_clone(st));
      return st;
    }
    cw_net_conn_retain(c);  // held by the connect request
  }
  cw_net_conn_set_callbacks(c, callbacks, user);
  // From now, not from the loop's last pass (its cached time).
  uv_update_time(c->timer.loop);
  uv_timer_start(&c->timer, cw__connect_timeout, (uint64_t)timeout_ms, 0);
  // HELLO goes out at once; libuv holds writes until the connect completes.
  Causeway__V1__HelloRequest hello;
  const char* token = net->tokens ? (net->tokens->count ? net->tokens->tokens[0] : "")
                                  : net->options.token;
  cw_hello_request_fill(&hello, role, token, session_id, net->options.name);
  hello.fresh_session = fresh_session;
  if (net->options.link_timeout_ms > 0) {
    hello.keepalive_ms = cw_keepalive_ask(net->options.link_timeout_ms);
  }
  cw_net_conn_request(c, CW_MSG_HELLO, &hello.base, NULL, 0, NULL, NULL, cw__hello_answered, NULL);
  if (c->closing) {
    // The write failed at once (libuv reports a pipe connect that failed
    // immediately as EPIPE on the first write) and closed the connection.
    return c->close_reason ? cw_status_clone(c->close_reason)
                           : cw_make_status(CW_UNAVAILABLE, "peer %s unreachable", address);
  }
  *out_conn = c;
  return cw_ok_status();
}

cw_status_t cw_net_connect(cw_net_t* net, const char* address, const char* name, int role,
                           uint64_t session_id, const cw_net_conn_callbacks_t* callbacks,
                           void* user, int64_t timeout_ms, cw_net_conn_t** out_conn) {
  return cw__connect(net, address, name, role, session_id, false, callbacks, user, timeout_ms,
                     out_conn);
}

cw_status_t cw_net_connect_fresh(cw_net_t* net, const char* address, const char* name, int role,
                                 uint64_t session_id, const cw_net_conn_callbacks_t* callbacks,
                                 void* user, int64_t timeout_ms, cw_net_conn_t** out_conn) {
  return cw__connect(net, address, name, role, session_id, true, callbacks, user, timeout_ms,
                     out_conn);
}

// --- Parent watch ----------------------------------------------------------------

static void cw__watch_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  cw_net_watch_t* w = h->data;
  buf->base = w->buf;
  buf->len = sizeof(w->buf);
}

static void cw__watch_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
  cw_net_watch_t* w = s->data;
  if (nread >= 0) return;  // the parent wrote something: ignored
  uv_read_stop(s);
  if (w->fn) {
    void (*fn)(void*) = w->fn;
    w->fn = NULL;
    fn(w->user);
  }
}

cw_status_t cw_net_watch_start(uv_loop_t* loop, int fd, void (*fn)(void* user), void* user,
                               cw_net_watch_t* w) {
  memset(w, 0, sizeof(*w));
  int rc = uv_pipe_init(loop, &w->pipe, 0);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "watch-fd: %s", uv_strerror(rc));
  w->started = true;
  w->pipe.data = w;
  w->fn = fn;
  w->user = user;
  rc = uv_pipe_open(&w->pipe, fd);
  if (rc == 0) rc = uv_read_start((uv_stream_t*)&w->pipe, cw__watch_alloc, cw__watch_read);
  if (rc < 0) return cw_make_status(CW_INVALID_ARGUMENT, "--watch-fd %d: %s", fd, uv_strerror(rc));
  return cw_ok_status();
}

void cw_net_watch_stop(cw_net_watch_t* w) {
  if (!w->started) return;
  w->started = false;
  w->fn = NULL;
  uv_close((uv_handle_t*)&w->pipe, NULL);
}

// --- libuv's thread pool ------------------------------------------------------------

// Waits until the caller has made them all: they must be alive at once, as
// libuv's will be.
static void* cw__pool_probe(void* arg) {
  pthread_mutex_t* hold = arg;
  pthread_mutex_lock(hold);
  pthread_mutex_unlock(hold);
  return NULL;
}
static void cw__pool_work(uv_work_t* req) { (void)req; }
static void cw__pool_done(uv_work_t* req, int status) { (void)req; (void)status; }

cw_status_t cw_net_threadpool_start(uv_loop_t* loop) {
  static uv_work_t req;  // once a process
  static bool started;
  if (started) return cw_ok_status();
  // libuv's own count, read as libuv reads it: atoi of UV_THREADPOOL_SIZE
  // into an unsigned (so "-1" is 1024), 0 is 1, at most 1024; unset: 4.
  const char* env = getenv("UV_THREADPOOL_SIZE");
  unsigned n = env ? (unsigned)atoi(env) : 4;
  if (n == 0) n = 1;
  if (n > 1024) n = 1024;
  pthread_t t[1024];
  pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&hold);
  unsigned made = 0;
  int rc = 0;
  while (made < n && (rc = pthread_create(&t[made], NULL, cw__pool_probe, &hold)) == 0) {
    made++;
  }
  pthread_mutex_unlock(&hold);
  for (unsigned i = 0; i < made; ++i) pthread_join(t[i], NULL);
  if (rc) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED,
                          "cannot start libuv's %u worker threads (%s): the process's thread "
                          "limit (ulimit -u, or its pids cgroup's pids.max) is too low",
                          n, strerror(rc));
  }
  rc = uv_queue_work(loop, &req, cw__pool_work, cw__pool_done);
  if (rc < 0) return cw_make_status(CW_INTERNAL, "uv_queue_work: %s", uv_strerror(rc));
  started = true;
  return cw_ok_status();
}

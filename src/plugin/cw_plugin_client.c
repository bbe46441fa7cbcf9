// PJRT_Client: joining (or starting) a cluster, the session with the
// controller, one direct connection per worker, and the client's queries
// (devices, memories, the default device assignment). The devices and
// memories themselves: cw_plugin_device.c; the workers: cw_plugin_worker.c.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cw_plugin_alloc.h"
#include "cw_plugin_attributes.h"
#include "cw_plugin_client.h"
#include "cw_plugin_cluster.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_fill.h"
#include "cw_plugin_health.h"
#include "cw_plugin_hostcb.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_resume.h"
#include "cw_plugin_token.h"
#include "cw_plugin_trace.h"
#include "cw_plugin_transfer.h"
#include "cw_plugin_worker.h"
#include "cw_time.h"

#define CW__CONNECT_TIMEOUT_MS 8000     // an unreachable controller fails within 10 s

// ---- Client creation ---------------------------------------------------------------

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

static void cw__client_free(cw_plugin_client_t* c) {
  if (!c) return;
  pthread_mutex_lock(&c->teardown_mu);
  c->closing = true;
  pthread_mutex_unlock(&c->teardown_mu);
  // The controller first: failing its pending launches may still send seq
  // fillers on the worker connections, which must be alive for that (those
  // of relayed requests are not taken: the session ends).
  cw_plugin_fill_close(c);
  cw_plugin_resume_stop(c);
  if (c->ctrl) cw_client_release(c->ctrl);
  cw_plugin_resume_release(c);
  cw_plugin_fill_stop(c);  // no more are queued: the controller's reader is gone
  for (size_t i = 0; i < c->num_workers; ++i) {
    if (c->workers[i].conn) cw_client_release(c->workers[i].conn);
  }
  for (size_t i = 0; i < c->num_devices; ++i) cw_plugin_device_deinitialize(&c->devices[i]);
  for (size_t i = 0; i < c->num_workers; ++i) cw_plugin_worker_deinitialize(&c->workers[i]);
  free(c->workers);
  free(c->devices);
  free(c->device_ptrs);
  free(c->memory_ptrs);
  free(c->platform_name);
  free(c->platform_version);
  free(c->ctrl_address);
  cw_plugin_token_deinitialize(&c->token);
  if (c->cluster) cw_plugin_cluster_stop(c->cluster);
  cw_tls_release(c->tls);
  cw_settings_deinitialize(&c->settings);
  pthread_mutex_destroy(&c->teardown_mu);
  free(c);
}

// Unsolicited ClusterEvent from the controller (reader thread): a worker
// that went down fails every later request to it at once.
static void cw__on_cluster_event(void* user, const ProtobufCMessage* msg) {
  cw_plugin_client_t* c = user;
  const Causeway__V1__ClusterEvent* alloc_ev = (const Causeway__V1__ClusterEvent*)msg;
  if (alloc_ev && alloc_ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__ALLOC_WAITING &&
      alloc_ev->message) {
    // The session waits in the controller's device queue: say why.
    fprintf(stderr, "%s\n", alloc_ev->message);
    return;
  }
  if (alloc_ev && alloc_ev->kind == CAUSEWAY__V1__CLUSTER_EVENT__KIND__LEASE_CHANGED) {
    // The controller only withdraws, and for the whole session. Kept even
    // when the workers cannot be told yet: whoever sets them up after this
    // (client creation, a resume) reads the flag, or sees it after its fence.
    if (alloc_ev->direct_launch) return;
    atomic_store(&c->leases_withdrawn, true);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->ready, memory_order_acquire) &&
        !cw_plugin_resume_events_muted(c)) {
      cw_plugin_worker_withdraw_leases(c);
    }
    return;
  }
  if (!atomic_load_explicit(&c->ready, memory_order_acquire)) return;
  // A controller we are resuming the session on numbers workers its own way
  // until its reply has been applied.
  if (cw_plugin_resume_hold_event(c, msg)) return;
  // Events may arrive before the worker table exists; those workers are
  // then absent from the session anyway.
  if (msg) cw_plugin_health_on_event(c, (const Causeway__V1__ClusterEvent*)msg);
}

void cw_plugin_client_controller_options(cw_plugin_client_t* c, cw_client_options_t* out) {
  // A controller that owes answers and stays silent this long (it answers
  // PING even while compiles run) is hung: calls through it fail UNAVAILABLE.
  int liveness = (int)cw_settings_int(&c->settings, CW_SET_CONTROLLER_TIMEOUT_MS);
  *out = (cw_client_options_t){.token = cw_plugin_token_now(&c->token),
                               .peer_name = "causeway-pjrt",
                               .connect_timeout_ms = CW__CONNECT_TIMEOUT_MS,
                               .on_event = cw__on_cluster_event,
                               .event_user = c,
                               .liveness_ms = liveness,
                               .tls = c->tls};
}

// A worker link silent this long (not even the worker's keepalive) while it
// owes answers is lost, though the worker may live on for its controller (a
// one-way partition): calls through it fail UNAVAILABLE.
void cw_plugin_client_worker_options(cw_plugin_client_t* c, cw_client_options_t* out) {
  *out = (cw_client_options_t){.token = cw_plugin_token_now(&c->token),
                               .session_id = c->session_id,
                               .peer_name = "causeway-pjrt",
                               .connect_timeout_ms = CW__CONNECT_TIMEOUT_MS,
                               .liveness_ms = (int)cw_settings_int(&c->settings,
                                                                   CW_SET_WORKER_LINK_TIMEOUT_MS),
                               .liveness_by_keepalive = true,
                               .tls = c->tls,
                               .on_request = cw_plugin_hostcb_on_request,
                               .on_release = cw_plugin_hostcb_released};
}

// Connects to the controller (an embedded one listens already: the cluster
// started waits for that).
static cw_status_t cw__connect_controller(cw_plugin_client_t* c, cw_client_t** out) {
  cw_client_options_t o;
  cw_plugin_client_controller_options(c, &o);
  cw_status_t s = cw_client_connect(c->ctrl_address, &o, out);
  if (s && cw_status_code(s) == CW_UNAUTHENTICATED) {
    return cw_plugin_token_refused(s, "controller", c->ctrl_address);
  }
  if (s && c->cluster) {
    return cw_plugin_cluster_annotate(
        c->cluster, cw_status_annotate(s, "causeway: cannot reach the embedded controller"));
  }
  CW_RETURN_IF_ERROR(s, "causeway: cannot reach the controller at %s (CAUSEWAY_CONTROLLER)",
                     c->ctrl_address);
  return cw_ok_status();
}

// OPEN_SESSION failed with `s` (taken). When the connection to a joined
// cluster's controller was lost meanwhile (a session queued for devices
// waits there: a controller restart ended it), reconnects and asks again,
// for up to CAUSEWAY_CONTROLLER_RECONNECT_MS, as an open session resumes (an
// audit: the client died 'connection ... lost' where resumed sessions went
// on). Returns the last answer's status, the reply in *reply.
static cw_status_t cw__open_again(cw_plugin_client_t* c, Causeway__V1__OpenSessionRequest* req,
                                  cw_status_t s, ProtobufCMessage** reply,
                                  cw_plugin_cancel_t* cancel) {
  int64_t bound = c->cluster ? 0 : cw_settings_int(&c->settings, CW_SET_CONTROLLER_RECONNECT_MS);
  bool said = false;
  int64_t deadline = cw_time_now_ms() + bound, asked_ms = 0;
  while (s && bound > 0 && cw_status_code(s) == CW_UNAVAILABLE &&
         !cw_plugin_cancel_fired(cancel)) {
    cw_status_t alive = cw_client_ping(c->ctrl);
    if (!alive) break;  // the controller answered UNAVAILABLE itself: that is its answer
    cw_status_free(alive);
    // A loss after the re-asked request waited a while (in the new
    // controller's queue) gets the whole bound again, as a resumed session's
    // does; one right after it (a controller that fails it at once) does not.
    if (asked_ms && cw_time_now_ms() - asked_ms >= 1000) deadline = cw_time_now_ms() + bound;
    if (cw_time_now_ms() >= deadline) break;
    fprintf(stderr,
            "causeway: lost the controller at %s while opening a session (%s); "
            "reconnecting for up to %lld ms (CAUSEWAY_CONTROLLER_RECONNECT_MS)\n",
            c->ctrl_address, cw_status_message(s), (long long)bound);
    said = true;
    cw_client_t* old = c->ctrl;
    if (!cw_plugin_cancel_swap(cancel, NULL)) break;
    cw_client_release(old);
    for (int64_t nap = 100; !c->ctrl && cw_time_now_ms() < deadline &&
                            !cw_plugin_cancel_fired(cancel);
         nap = nap < 1000 ? 2 * nap : nap) {
      struct timespec t = {.tv_sec = nap / 1000, .tv_nsec = (nap % 1000) * 1000000L};
      nanosleep(&t, NULL);
      cw_client_t* fresh = NULL;
      cw_status_t cs = cw__connect_controller(c, &fresh);
      if (cs) cw_status_free(cs);
      else if (!cw_plugin_cancel_swap(cancel, fresh)) break;
    }
    if (cw_plugin_cancel_fired(cancel)) break;
    if (!c->ctrl) {
      return cw_status_annotate(s,
                                "the controller did not come back within %lld ms "
                                "(CAUSEWAY_CONTROLLER_RECONNECT_MS)",
                                (long long)bound);
    }
    cw_status_free(s);
    asked_ms = cw_time_now_ms();
    s = cw_client_call(c->ctrl, CW_MSG_OPEN_SESSION, &req->base, NULL, 0, NULL, reply, NULL);
  }
  if (said && !s) {
    fprintf(stderr, "causeway: reached the controller at %s again\n", c->ctrl_address);
  }
  return s;
}

static cw_status_t cw__open_session(cw_plugin_client_t* c, uint32_t min_workers) {
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = min_workers;
  req.wait_ms = (uint32_t)cw_settings_int(&c->settings, CW_SET_WAIT_MS);
  // What `causeway status` calls this session.
  char host[256] = "", name[400];
  gethostname(host, sizeof(host) - 1);
  const char* given = cw_settings_string(&c->settings, CW_SET_SESSION_NAME);
  if (given[0]) snprintf(name, sizeof(name), "%s", given);
  else snprintf(name, sizeof(name), "%s@%s:%d", program_invocation_short_name, host, (int)getpid());
  req.name = name;
  req.client_host = host;
  req.client_pid = (uint32_t)getpid();
  cw_plugin_alloc_t alloc;
  cw_status_t s =
      cw_plugin_alloc_initialize(&alloc, &c->settings, &req);  // CAUSEWAY_DEVICES and friends
  if (!s) s = cw_plugin_resume_set_open(c, &req);  // what a restarted controller is told again
  ProtobufCMessage* reply = NULL;
  cw_plugin_cancel_t cancel;
  if (!s) s = cw_plugin_cancel_start(&cancel, c->cancel_fd, &c->ctrl);
  if (!s) {
    s = cw_client_call(c->ctrl, CW_MSG_OPEN_SESSION, &req.base, NULL, 0, NULL, &reply, NULL);
    if (s) s = cw__open_again(c, &req, s, &reply, &cancel);
    cw_plugin_cancel_stop(&cancel);
    s = cw_plugin_cancel_status(&cancel, s);
    if (s && reply) {  // answered as the caller gave up: the connection is shut down
      protobuf_c_message_free_unpacked(reply, NULL);
      reply = NULL;
    }
  } else {
    cw_plugin_alloc_deinitialize(&alloc);
    return s;
  }
  uint32_t asked = req.num_devices;  // (alloc's storage goes next)
  cw_plugin_alloc_deinitialize(&alloc);
  if (s) {
    // What it waited for: devices it asked for, else workers.
    char what[64];
    if (asked) snprintf(what, sizeof(what), "asking for %u devices", asked);
    else snprintf(what, sizeof(what), "waiting for %u worker%s", min_workers,
                  min_workers == 1 ? "" : "s");
    s = cw_status_annotate(s, "causeway: opening a session at %s (%s)", c->ctrl_address, what);
    return c->cluster ? cw_plugin_cluster_annotate(c->cluster, s) : s;
  }
  Causeway__V1__SessionInfo* info = (Causeway__V1__SessionInfo*)reply;
  c->session_id = info->session_id;
  c->platform_name = strdup(info->platform_name && info->platform_name[0] ? info->platform_name
                                                                          : "cpu");
  c->platform_version = strdup(info->platform_version ? info->platform_version : "");
  if (!c->platform_name || !c->platform_version) s = cw__oom();
  if (!s && (info->n_workers == 0 || info->n_devices == 0)) {
    s = cw_make_status(CW_UNAVAILABLE, "causeway: the controller at %s has no workers",
                       c->ctrl_address);
  }
  if (!s) {
    c->workers = calloc(info->n_workers, sizeof(*c->workers));
    c->devices = calloc(info->n_devices, sizeof(*c->devices));
    c->device_ptrs = calloc(info->n_devices, sizeof(*c->device_ptrs));
    if (!c->workers || !c->devices || !c->device_ptrs) s = cw__oom();
  }
  for (size_t i = 0; !s && i < info->n_workers; ++i) {
    s = cw_plugin_worker_initialize(&c->workers[c->num_workers++], c, info->workers[i]);
  }
  for (size_t i = 0; !s && i < info->n_devices; ++i) {
    c->num_devices = i + 1;
    s = cw_plugin_device_initialize(&c->devices[i], c, i, info->devices[i]);
    c->device_ptrs[i] = (PJRT_Device*)&c->devices[i];
  }
  if (!s) {
    c->memory_ptrs = calloc(c->num_memories ? c->num_memories : 1, sizeof(*c->memory_ptrs));
    if (!c->memory_ptrs) s = cw__oom();
  }
  for (size_t i = 0, n = 0; !s && i < c->num_devices; ++i) {
    for (size_t k = 0; k < c->devices[i].num_memories; ++k) {
      c->memory_ptrs[n++] = c->devices[i].memory_ptrs[k];
    }
  }
  if (!s) cw_plugin_attributes_set(info->plugin_attributes, info->n_plugin_attributes);
  protobuf_c_message_free_unpacked(reply, NULL);
  return s;
}

// A worker we cannot reach is marked dead (its devices stay listed and fail
// with UNAVAILABLE naming it); the session needs at least one live worker.
static cw_status_t cw__connect_workers(cw_plugin_client_t* c) {
  cw_status_t first = cw_ok_status();
  size_t live = 0;
  for (size_t i = 0; i < c->num_workers; ++i) {
    cw_plugin_worker_t* w = &c->workers[i];
    cw_client_options_t o;
    cw_plugin_client_worker_options(c, &o);
    cw_client_t* conn = NULL;
    cw_status_t s = cw_client_connect(cw_plugin_worker_address(w), &o, &conn);
    w->conn = conn;
    if (!s) {
      w->session_key = cw_client_session_key(conn);
      ++live;
      continue;
    }
    s = cw_plugin_token_refused(s, "worker", cw_plugin_worker_address(w));
    cw_plugin_worker_mark_dead(w, cw_status_message(s));
    if (!first) {
      first = cw_status_annotate(s, "causeway: connecting to worker %s at %s", w->name,
                                 cw_plugin_worker_address(w));
    } else {
      cw_status_free(s);
    }
  }
  if (live) {
    cw_status_free(first);
    for (size_t i = 0; i < c->num_workers; ++i) cw_plugin_transfer_probe_direct(&c->workers[i]);
    return cw_ok_status();
  }
  return first;
}

// Variables renamed to CAUSEWAY_* are no longer read: say so once per
// process, for the daemons of an embedded cluster too (their logs are files).
static void cw__settings_warn(void) { (void)cw_settings_warn_old_names(CW_SCOPE_ALL); }
static void cw__settings_warn_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cw__settings_warn);
}

// The create option `name` as an int64 (JAX passes ints, and strings from
// jax_pjrt_client_create_options="name:8"); 0 when absent or not a number.
// The embedded cluster's only option: cpu_device_count, the CPU devices JAX
// asks for (causeway_jax passes jax_num_cpu_devices).
static int64_t cw__option_int(const PJRT_NamedValue* opts, size_t n, const char* name) {
  for (size_t i = 0; opts && i < n; ++i) {
    const PJRT_NamedValue* o = &opts[i];
    if (!o->name || o->name_size != strlen(name) || memcmp(o->name, name, o->name_size)) continue;
    if (o->type == PJRT_NamedValue_kInt64) return o->int64_value;
    if (o->type == PJRT_NamedValue_kString && o->string_value && o->value_size < 32) {
      char buf[32];
      memcpy(buf, o->string_value, o->value_size);
      buf[o->value_size] = '\0';
      char* end = NULL;
      long long v = strtoll(buf, &end, 10);
      return end && end != buf && !*end ? v : 0;
    }
  }
  return 0;
}

PJRT_Error* cw_plugin_client_create(PJRT_Client_Create_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_Create_Args, client);
  args->client = NULL;
  cw_plugin_client_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_plugin_error_from_status(cw__oom());
  atomic_init(&c->next_id, 1);
  pthread_mutex_init(&c->teardown_mu, NULL);
  cw__settings_warn_once();
  cw_status_t s = cw_settings_initialize(&c->settings, CW_SCOPE_PLUGIN);
  if (s) s = cw_status_annotate(s, "causeway");
  uint32_t min_workers = (uint32_t)cw_settings_int(&c->settings, CW_SET_MIN_WORKERS);
  c->wait_spin_us = cw_settings_int(&c->settings, CW_SET_WAIT_SPIN_US);
  cw_plugin_future_set_handback_us(cw_settings_int(&c->settings, CW_SET_HANDBACK_US));
  const char* addr = cw_settings_string(&c->settings, CW_SET_CONTROLLER);
  // jax.distributed.initialize(num_processes=N) makes N JAX processes, each
  // a controller of its own devices: multi-controller. Here one process sees
  // every device of the cluster; N of them would each take the whole cluster.
  int64_t num_nodes = cw__option_int(args->create_options, args->num_options, "num_nodes");
  // A caller that may give up the create while it waits (cw_plugin_cancel.h).
  int64_t cancel_fd = cw__option_int(args->create_options, args->num_options,
                                     "causeway_cancel_fd");
  c->cancel_fd = cancel_fd > 0 && cancel_fd <= INT32_MAX ? (int)cancel_fd : -1;
  if (!s && num_nodes > 1) {
    s = cw_make_status(CW_INVALID_ARGUMENT,
                       "causeway: jax.distributed.initialize made this one of %lld JAX "
                       "processes (num_nodes %lld), but causeway is a single controller: one "
                       "JAX process sees every device of the cluster. Run one process, without "
                       "jax.distributed.initialize (or with num_processes=1)",
                       (long long)num_nodes, (long long)num_nodes);
  }
  if (!s && !*addr) {
    int64_t jax_devices = cw__option_int(args->create_options, args->num_options,
                                         "cpu_device_count");
    s = cw_plugin_cluster_start(&c->settings, jax_devices, &c->cluster, &addr, &min_workers);
    if (!s) {
      s = cw_plugin_token_fixed(cw_plugin_cluster_token(c->cluster), &c->token);
    }
  } else if (!s) {
    s = cw_plugin_token_load(&c->settings, &c->token);
    // TLS for the cluster's TCP connections (the embedded one is on Unix
    // sockets: none there).
    cw_tls_config_t tls;
    cw_tls_config_from_settings(&c->settings, &tls);
    if (!s && tls.enabled) {
      s = cw_tls_create(&tls, false, &c->tls);
      if (s) s = cw_status_annotate(s, "causeway");
    }
  }
  if (!s) {
    c->ctrl_address = strdup(addr);
    if (!c->ctrl_address) s = cw__oom();
  }
  if (!s) s = cw_plugin_resume_create(c);  // CAUSEWAY_CONTROLLER_RECONNECT_MS
  if (!s) s = cw__connect_controller(c, &c->ctrl);
  if (!s) s = cw__open_session(c, min_workers);
  if (!s) s = cw__connect_workers(c);
  if (s) {
    cw__client_free(c);
    return cw_plugin_error_from_status(s);
  }
  atomic_store_explicit(&c->ready, true, memory_order_release);
  // A withdrawal that came while the workers were set up (cw__on_cluster_event).
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load(&c->leases_withdrawn)) cw_plugin_worker_withdraw_leases(c);
  s = cw_plugin_resume_start(c);
  if (s) {
    cw__client_free(c);
    return cw_plugin_error_from_status(s);
  }
  cw_plugin_trace_start(c);  // CAUSEWAY_TRACE
  args->client = (PJRT_Client*)c;
  return NULL;
}

PJRT_Error* cw_plugin_client_destroy(PJRT_Client_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_Destroy_Args, client);
  if (args->client) cw_plugin_trace_finish((cw_plugin_client_t*)args->client);
  cw__client_free((cw_plugin_client_t*)args->client);
  // Its launches' callbacks, those the close failed among them, before
  // Destroy returns.
  cw_plugin_future_run_handed_back();
  return NULL;
}

// ---- Client queries ----------------------------------------------------------------

#define CW__CLIENT(args) ((cw_plugin_client_t*)(args)->client)

PJRT_Error* cw_plugin_client_platform_name(PJRT_Client_PlatformName_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_PlatformName_Args, platform_name_size);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_PlatformName", "client");
  args->platform_name = CW__CLIENT(args)->platform_name;
  args->platform_name_size = strlen(CW__CLIENT(args)->platform_name);
  return NULL;
}

PJRT_Error* cw_plugin_client_process_index(PJRT_Client_ProcessIndex_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_ProcessIndex_Args, process_index);
  args->process_index = 0;  // one client process sees every device
  return NULL;
}

// jax.distributed's coordination service reporting its processes' states.
// A single controller has one process; the cluster's own health is the
// controller's. Taken and ignored: jaxlib ends the process on an error here
// (LOG(FATAL)), and jax.distributed.initialize with one process calls it
// (session 41's conformance sweep).
PJRT_Error* cw_plugin_client_update_global_process_info(
    PJRT_Client_UpdateGlobalProcessInfo_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_UpdateGlobalProcessInfo_Args, num_process_infos);
  return NULL;
}

PJRT_Error* cw_plugin_client_platform_version(PJRT_Client_PlatformVersion_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_PlatformVersion_Args, platform_version_size);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_PlatformVersion", "client");
  args->platform_version = CW__CLIENT(args)->platform_version;
  args->platform_version_size = strlen(CW__CLIENT(args)->platform_version);
  return NULL;
}

PJRT_Error* cw_plugin_client_devices(PJRT_Client_Devices_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_Devices_Args, num_devices);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_Devices", "client");
  args->devices = CW__CLIENT(args)->device_ptrs;
  args->num_devices = CW__CLIENT(args)->num_devices;
  return NULL;
}

PJRT_Error* cw_plugin_client_addressable_devices(PJRT_Client_AddressableDevices_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_AddressableDevices_Args, num_addressable_devices);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_AddressableDevices", "client");
  args->addressable_devices = CW__CLIENT(args)->device_ptrs;
  args->num_addressable_devices = CW__CLIENT(args)->num_devices;
  return NULL;
}

PJRT_Error* cw_plugin_client_lookup_device(PJRT_Client_LookupDevice_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_LookupDevice_Args, device);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_LookupDevice", "client");
  cw_plugin_device_t* d = cw_plugin_device_find(CW__CLIENT(args), args->id);
  if (!d) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "no causeway device with global id %d", args->id));
  }
  args->device = (PJRT_Device*)d;
  return NULL;
}

PJRT_Error* cw_plugin_client_lookup_addressable_device(
    PJRT_Client_LookupAddressableDevice_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_LookupAddressableDevice_Args, addressable_device);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_LookupAddressableDevice", "client");
  // local_hardware_id == global id for our devices.
  cw_plugin_device_t* d = cw_plugin_device_find(CW__CLIENT(args), args->local_hardware_id);
  if (!d) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "no causeway device with hardware id %d", args->local_hardware_id));
  }
  args->addressable_device = (PJRT_Device*)d;
  return NULL;
}

PJRT_Error* cw_plugin_client_addressable_memories(PJRT_Client_AddressableMemories_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_AddressableMemories_Args, num_addressable_memories);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_AddressableMemories", "client");
  args->addressable_memories = CW__CLIENT(args)->memory_ptrs;
  args->num_addressable_memories = CW__CLIENT(args)->num_memories;
  return NULL;
}

PJRT_Error* cw_plugin_client_default_device_assignment(
    PJRT_Client_DefaultDeviceAssignment_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_DefaultDeviceAssignment_Args, default_assignment);
  CW_PLUGIN_NEED(args->client, "PJRT_Client_DefaultDeviceAssignment", "client");
  cw_plugin_client_t* c = CW__CLIENT(args);
  size_t need = (size_t)(args->num_replicas > 0 ? args->num_replicas : 0) *
                (size_t)(args->num_partitions > 0 ? args->num_partitions : 0);
  if (need == 0 || need > args->default_assignment_size || !args->default_assignment) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_INVALID_ARGUMENT, "default device assignment: %d x %d does not fit %zu entries",
        args->num_replicas, args->num_partitions, args->default_assignment_size));
  }
  // One program runs inside one island: take the first island with enough
  // devices, in global id order.
  for (size_t start = 0; start < c->num_devices; ++start) {
    uint32_t island = c->devices[start].island;
    if (start > 0 && c->devices[start - 1].island == island) continue;
    size_t n = 0;
    for (size_t i = start; i < c->num_devices && c->devices[i].island == island; ++i) ++n;
    if (n < need) continue;
    // Replica-major, as PJRT reads it; partition p of replica r gets the
    // island's device p * replicas + r, as XLA's computation placer does.
    size_t nr = (size_t)args->num_replicas, np = (size_t)args->num_partitions;
    for (size_t r = 0; r < nr; ++r) {
      for (size_t p = 0; p < np; ++p) {
        args->default_assignment[r * np + p] = c->devices[start + p * nr + r].global_id;
      }
    }
    return NULL;
  }
  return cw_plugin_error_from_status(cw_make_status(
      CW_INVALID_ARGUMENT,
      "no causeway island has %zu devices for %d replicas x %d partitions (a program runs "
      "within one island; use jax.device_put to move data between islands)",
      need, args->num_replicas, args->num_partitions));
}

// The direct-launch lease: whether a session may send LAUNCH straight to a
// worker instead of through this controller's island queue.
//
// A session whose devices on a worker are its own needs no total order
// across sessions there: its seq numbers (docs/protocol.md, "Ordering across
// connections") already order its launches among its other requests, so the
// relay hop only adds latency. Devices shared with another session (both
// asked to share) stay relayed so the island scheduler stamps every
// session's launches in one order (cw_ctl_sched.c).
#include "cw_ctl_internal.h"

bool cw__session_direct_launch(cw_controller_t* ctl, cw_ctl_session_t* s,
                               uint32_t worker_index) {
  if (cw_settings_int(ctl->settings, CW_SET_RELAY_LAUNCHES) != 0) return false;
  // An island of several workers: its programs' parts go out from the
  // island's scheduler, one stamp for all of them (cw_ctl_island.c).
  if (worker_index < ctl->num_workers && cw_ctl_island_spans(ctl->workers[worker_index])) {
    return false;
  }
  // A session that asked for no devices sees every device and reserves none
  // (the embedded cluster's one client): its launches on a one-worker island
  // are issued by that worker's single loop in arrival order. A session that
  // asked for devices goes direct only where they are its alone.
  return !s->allocated || cw_ctl_alloc_exclusive_on(ctl, s, worker_index);
}

// The direct-launch lease: whether a session may send LAUNCH straight to a
// worker instead of through this controller's island queue.
//
// A session whose devices on a worker are its own needs no total order
// across sessions there: its seq numbers (docs/protocol.md, "Ordering across
// connections") already order its launches among its other requests, so the
// relay hop only adds latency. Devices shared with another session must stay
// relayed so the island queue orders every session's launches.
#include "cw_ctl_internal.h"

bool cw__session_direct_launch(cw_controller_t* ctl, cw_ctl_session_t* s,
                               uint32_t worker_index) {
  (void)s;
  (void)worker_index;
  // Sessions never share devices today; relaying is forced only by setting.
  return cw_settings_int(ctl->settings, CW_SET_RELAY_LAUNCHES) == 0;
}

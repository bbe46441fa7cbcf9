// Metrics (cw_ctl_metrics.c): Prometheus text over HTTP on --metrics-listen,
// from the controller's counters and the workers' polled STATS, and the
// health probes (/healthz, /readyz) on the same port.
#ifndef CW_CTL_METRICS_H_
#define CW_CTL_METRICS_H_

#include "cw_ctl_internal.h"

// Starts the HTTP listener when --metrics-listen is set.
CW_MUST_USE cw_status_t cw_ctl_metrics_start(cw_controller_t* ctl);
// Closes the listener and every HTTP connection (the loop runs on).
void cw_ctl_metrics_stop(cw_controller_t* ctl);
// Frees what is left once the loop has closed its handles.
void cw_ctl_metrics_release(cw_controller_t* ctl);
// A launch reply (or error) from the island's worker for a relayed item.
void cw_ctl_metrics_on_launch_reply(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A client compile answered; cache_hit says whether it compiled nothing.
void cw_ctl_metrics_on_compile(cw_controller_t* ctl, int64_t elapsed_ms, bool cache_hit);

#endif  // CW_CTL_METRICS_H_

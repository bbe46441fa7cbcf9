// Island queues and gang order (cw_ctl_sched.c): one scheduler per island
// stamps the launches of every session on it in one total order.
#ifndef CW_CTL_SCHED_H_
#define CW_CTL_SCHED_H_

#include "cw_ctl_internal.h"

// A replacement took worker slot `w`: its island's stamps start again at 1.
void cw_ctl_sched_reset(cw_ctl_worker_t* w);
// Queues a request that names an executable on its island (it->worker) and
// relays what can go.
void cw_ctl_sched_push(cw_controller_t* ctl, cw_ctl_item_t* it);
// Relays what can go on island `index`: after a load, a reply, a worker loss.
void cw_ctl_sched_pump(cw_controller_t* ctl, uint32_t index);
// A relayed item is answered: true when it was a stamped launch (the island
// has room again; pump it once the reply is handled).
bool cw_ctl_sched_done(cw_controller_t* ctl, const cw_ctl_item_t* it);
// A stamped launch of island `island` that the scheduler did not relay as an
// item (an island's parts, cw_ctl_island.c) is over: room for the next one.
void cw_ctl_sched_release(cw_controller_t* ctl, uint32_t island);
// Requests waiting in the queues of the island worker `w` schedules (0 for
// a member that does not head its island): all, or launches only.
uint64_t cw_ctl_sched_queued(const cw_ctl_worker_t* w, bool launches_only);
// Points st->sched_stamps at the record of stamps assigned; returns what the
// caller frees after replying (NULL: nothing).
void* cw_ctl_sched_stats(cw_controller_t* ctl, Causeway__V1__Stats* st);
void cw_ctl_sched_free(cw_controller_t* ctl);

#endif  // CW_CTL_SCHED_H_

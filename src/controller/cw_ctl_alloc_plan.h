// Device allocation as a pure function (no controller state): which physical
// devices a session asking for N gets, given every worker's devices and who
// uses them. The controller (cw_ctl_alloc.c) builds the inputs, applies the
// answer and queues requests that must wait; unit-tested in
// cw_ctl_alloc_plan_test.c.
#ifndef CW_CTL_ALLOC_PLAN_H_
#define CW_CTL_ALLOC_PLAN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

// How a physical device is used now.
enum {
  CW_ALLOC_FREE = 0,
  CW_ALLOC_EXCLUSIVE = 1,  // one session holds it alone
  CW_ALLOC_SHARED = 2,     // sessions that asked to share hold it
};

typedef struct cw_alloc_worker_s {
  const char* name;
  const char* platform;
  // Takes new sessions now: registered and not draining. A slot that does
  // not still counts toward what a request can ever get (its worker may be
  // replaced, or undrained): such a request waits.
  bool alive;
  // Not alive because the controller holds it back for sessions still to
  // resume after a restart (cw_ctl_resume.h): for the waiting client's message.
  bool held;
  uint32_t num_devices;
  const uint8_t* use;  // [num_devices] CW_ALLOC_*
  // A member of an island of several workers (--island): `island` is the
  // index, in the same array, of the island's first member. Such an island
  // counts as one for packing and min_island. Not grouped: its own island.
  bool grouped;
  uint32_t island;
} cw_alloc_worker_t;

typedef struct cw_alloc_request_s {
  uint32_t num_devices;  // >= 1
  const char* platform;  // NULL or "": any
  uint32_t min_island;   // 0: 1
  const char* const* workers;  // names; none: any worker
  size_t num_workers;
  bool share;
} cw_alloc_request_t;

// A physical device: the worker's index in the array given and its local id.
typedef struct cw_alloc_device_s {
  uint32_t worker;
  uint32_t local;
} cw_alloc_device_t;

// Plans `r` over `workers`:
// - OK, *out_wait false: `out` ([r->num_devices]) holds the devices, grouped
//   by island and worker in worker order, the fewest islands possible (one island when
//   one can hold them all: the one that leaves the fewest usable devices
//   idle), each island giving at least min_island of them (but the last);
//   shared requests take devices other sharers use before free ones.
// - OK, *out_wait true: possible, not now; *out_usable says how many
//   matching devices are usable now and *out_capacity how many match at all.
// - an error: never possible (unknown worker or platform, more devices than
//   the matching workers have), with a message saying what was asked and what
//   the cluster has; the counts are set as far as they were known (a
//   controller that waits for workers to come back shows them).
// Whether worker w is one request r may be given devices of (its names and
// platform).
bool cw_alloc_matches(const cw_alloc_request_t* r, const cw_alloc_worker_t* w);
CW_MUST_USE cw_status_t cw_alloc_plan(const cw_alloc_worker_t* workers, size_t num_workers,
                                      const cw_alloc_request_t* r, cw_alloc_device_t* out,
                                      bool* out_wait, uint32_t* out_usable,
                                      uint32_t* out_capacity);

// Whether `r` could be planned once every session on the alive workers had
// closed: false when it waits for workers that are away (dead until a
// replacement registers, draining, held back for resumes), for which no
// session's end can do; such a request holds up no request behind it.
bool cw_alloc_reachable(const cw_alloc_worker_t* workers, size_t num_workers,
                        const cw_alloc_request_t* r);

#endif  // CW_CTL_ALLOC_PLAN_H_

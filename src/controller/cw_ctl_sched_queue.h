// The island scheduler's policy as plain data and decisions, with no I/O and
// no controller state (cw_ctl_sched.c judges heads, relays what is picked
// and reports answers); unit-tested in cw_ctl_sched_queue_test.c.
//
// - One FIFO per session, in order of arrival of the sessions.
// - Among the sessions whose head is a launch ready to go, the one with the
//   smallest pass goes next, and its pass grows by CW_SCHED_STRIDE / weight
//   (stride scheduling): backlogged sessions get launches in proportion to
//   their weights. Ties go to the session that arrived first.
// - Runs: the session picked last keeps going for up to max_run launches in a
//   row while its head is ready and its pass stays less than max_run of the
//   heaviest waiting session's strides above the smallest (1, the default: no
//   runs), so that no session then needs more than a run's worth in a row
//   to catch up. Shares over time are the same;
//   the caller sets max_run from how short the island's launches are, so a
//   run lasts about a millisecond (cw_ctl_sched.c). A run sends one
//   session's launches together on its links, which the loop then writes
//   with one system call each, where round robin touched every session's.
// - At most max_outstanding stamped launches are out (relayed, not yet
//   answered); the others wait here, where the weights decide.
// - A head that cannot go yet (its executable is loading) holds only its own
//   session; a head that is not a launch goes at once, unordered against
//   other sessions.
// - A session whose queue empties leaves; it rejoins at the island's virtual
//   time (the pass of the launch picked last), so an idle session gains no
//   credit.
// - Stamps count 1, 2, 3... with no gaps: one is taken only when the caller
//   says its launch went out.
// - A pick costs O(log S) for S sessions queued, not O(S): the launch heads
//   wait in a heap by pass and are judged when they reach its top (a FAILED
//   one is taken off then); only heads that are not launches, and launch
//   heads judged blocked, are judged at every pick. With 1,000 sessions on
//   one island, judging every head at each pick cost the controller 125 us
//   a launch (fleet_bench --shared-curve, docs/performance.md, session 45).
#ifndef CW_CTL_SCHED_QUEUE_H_
#define CW_CTL_SCHED_QUEUE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CW_SCHED_STRIDE (1ull << 20)
// Runs last about CW_SCHED_RUN_NS of the island's time, at most
// CW_SCHED_RUN_MAX launches. On a 2-core machine, 100 sessions pipelining
// tiny launches on one shared island: 38-39k launches/s one at a time,
// 111-121k in runs (fleet_bench, docs/performance.md, session 44). Launches
// of a millisecond or more get no runs, so a session waits behind no more of
// another's than before.
#define CW_SCHED_RUN_NS 1000000
#define CW_SCHED_RUN_MAX 32
// Weights count 1..CW_SCHED_MAX_WEIGHT (a larger one counts as this): a
// stride never reaches 0, which would let one session's pass stand still.
#define CW_SCHED_MAX_WEIGHT 1000

// A queued request: embedded in the caller's own struct and linked by the
// island while it is queued.
typedef struct cw_sched_item_s {
  struct cw_sched_item_s* next;
  uint64_t session_id;
  // The session's share (0 counts as 1), read when the item is picked: the
  // judge may refresh it.
  uint32_t weight;
  // A launch: ordered by weight and held by the cap. Otherwise it goes at
  // once when it heads its queue (the judge's READY).
  bool launch;
} cw_sched_item_t;

// What a queue's head may do now: the caller's verdict (cw_sched_island_pick).
typedef enum cw_sched_verdict_e {
  CW_SCHED_BLOCKED = 0,  // waits: skipped, and its session's later items with it
  CW_SCHED_READY,        // not a launch: goes at once, outside the weights and the cap
  CW_SCHED_LAUNCH,       // a launch ready to go: by weight, while under the cap
  CW_SCHED_FAILED,       // to be answered with an error: taken off at once
} cw_sched_verdict_t;

typedef struct cw_sched_queue_s cw_sched_queue_t;  // one session's FIFO

typedef struct cw_sched_island_s {
  cw_sched_queue_t* queues;  // sessions with items queued, in order of arrival
  uint64_t last_stamp;       // stamps taken so far: 1..last_stamp
  uint64_t vtime;            // the pass of the launch picked last
  uint32_t outstanding;      // stamped launches out, not yet answered
  uint32_t max_outstanding;
  uint32_t max_run;          // see "Runs" above; the caller's, 1 after initialize
  uint32_t run;              // launches picked in a row from `last`
  cw_sched_queue_t* last;    // the queue of the launch picked last (NULL once it left)
  // The policy's own (cw_ctl_sched_queue.c).
  cw_sched_queue_t* queues_tail;
  size_t num_queues;
  uint64_t arrivals;
  uint64_t picks;              // picks so far: a head is judged once a pick
  cw_sched_queue_t** buckets;  // by session id
  size_t num_buckets;
  cw_sched_queue_t** heap;     // launch heads not judged blocked, by pass
  size_t heap_len, heap_cap;
  uint32_t* weight_counts;     // heap members by weight, [CW_SCHED_MAX_WEIGHT + 1]
  uint32_t heaviest;           // of the heap members (1 when none)
  // Bit w: weight_counts[w] > 0, so that the next heaviest is found in a
  // few words when the heaviest leaves, not by walking down the counts.
  uint64_t weight_seen[CW_SCHED_MAX_WEIGHT / 64 + 1];
  cw_sched_queue_t* urgent;    // heads that are not launches
  cw_sched_queue_t* blocked;   // launch heads judged blocked
} cw_sched_island_t;

// The run length for launches answered every `each_ns` on average: as many
// as fit in CW_SCHED_RUN_NS, 1 to CW_SCHED_RUN_MAX.
uint32_t cw_sched_run_for(int64_t each_ns);

// `isl` is caller storage; its tables (allocated at the first push) go with
// cw_sched_island_deinitialize, once nothing is queued.
void cw_sched_island_initialize(cw_sched_island_t* isl, uint32_t max_outstanding);
void cw_sched_island_deinitialize(cw_sched_island_t* isl);

// Queues `item` (borrowed until it is picked or taken) behind its session's
// earlier ones. False without memory (nothing queued).
bool cw_sched_island_push(cw_sched_island_t* isl, cw_sched_item_t* item);

// Takes one item off its queue, judging heads with judge(user, head), each
// at most once: the first head that is not a launch and is judged READY or
// FAILED (in the order they came to head their queues); else one judged FAILED among the
// launch heads judged blocked before; else, if fewer than max_outstanding
// stamped launches are out, the launch head with the smallest pass (judged
// FAILED there, it is taken off instead, moving no pass; judged BLOCKED, it
// waits aside and the next one is judged), or the session picked last when
// its run goes on (its pass then grows). NULL when nothing can go now.
// *out_verdict says which.
cw_sched_item_t* cw_sched_island_pick(cw_sched_island_t* isl,
                                      cw_sched_verdict_t (*judge)(void* user,
                                                                  cw_sched_item_t* head),
                                      void* user, cw_sched_verdict_t* out_verdict);

// Takes some queued item off (NULL when none is left): to empty the island.
cw_sched_item_t* cw_sched_island_take_any(cw_sched_island_t* isl);

// fn(user, item) for every queued item, sessions in order of arrival, each
// session's in its order.
void cw_sched_island_visit(const cw_sched_island_t* isl,
                           void (*fn)(void* user, const cw_sched_item_t* item), void* user);

// The stamp the next stamped launch gets (not taken until cw_sched_island_stamped).
uint64_t cw_sched_island_next_stamp(const cw_sched_island_t* isl);
// The launch stamped cw_sched_island_next_stamp went out: the stamp is
// taken, and it counts `outstanding` (>= 1) against the cap until answered.
void cw_sched_island_stamped(cw_sched_island_t* isl, uint32_t outstanding);
// A stamped launch out is answered: room for the next.
void cw_sched_island_answered(cw_sched_island_t* isl);
// The island's workers were replaced: stamps count from 1 again, what was
// out died with them, and runs stop (max_run 1). The queues stay.
void cw_sched_island_restart(cw_sched_island_t* isl);

#endif  // CW_CTL_SCHED_QUEUE_H_

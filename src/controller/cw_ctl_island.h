// Islands that span several workers (cw_ctl_island.c): membership, one
// compile with a part per member, launches relayed to every member in two
// phases, whole-island restart.
#ifndef CW_CTL_ISLAND_H_
#define CW_CTL_ISLAND_H_

#include "cw_ctl_compile.h"
#include "cw_ctl_internal.h"

// REGISTER's island fields: a clear error when they do not fit the members
// already registered. `replacing`: the slot a same-name worker takes over
// (a member of an island of several workers only once all of them died).
CW_MUST_USE cw_status_t cw_ctl_island_check(cw_controller_t* ctl,
                                            const Causeway__V1__RegisterRequest* r,
                                            const cw_ctl_worker_t* replacing);
// Sets the new slot w's island from its REGISTER.
void cw_ctl_island_join(cw_controller_t* ctl, cw_ctl_worker_t* w,
                        const Causeway__V1__RegisterRequest* r);
// A replacement took slot `w` (cw_ctl_health_take_over): when w is a member
// of an island of several workers (all of which had died), the island's
// stamps count from 1 again and its programs fail until compiled again.
void cw_ctl_island_restarted(cw_controller_t* ctl, cw_ctl_worker_t* w);
// Whether w belongs to an island of several workers.
bool cw_ctl_island_spans(const cw_ctl_worker_t* w);
// A LAUNCH or DELETE `it` for an island of several workers, as it comes:
// notes the life of the session at each member that the session's link there
// is in (none for a member without an open link that joined). Its parts
// carry them (`session_life`), so one that waits here while every
// connection of that life closes is refused by the next life, not applied.
void cw_ctl_island_note_lives(cw_controller_t* ctl, cw_ctl_item_t* it);
// The registered members of island `island` in rank order, into out[max];
// returns how many.
size_t cw_ctl_island_members(cw_controller_t* ctl, uint32_t island, uint32_t* out, size_t max);
// COMPILE placement found devices on several workers. *out_one: whether they
// all belong to one island of several workers; then checks that the program
// can run there (every member, each one's devices together, in rank order)
// and fills parts/part_devices (malloc'd).
CW_MUST_USE cw_status_t cw_ctl_island_place(cw_controller_t* ctl, cw_ctl_session_t* s,
                                            const int64_t* assigned, size_t n, bool* out_one,
                                            uint32_t** out_parts, uint32_t** out_part_devices,
                                            size_t* out_num_parts);
// Starts the parts of an island compile: one child of `cp` per part (cp is
// taken). start(child) runs each through the usual compile path.
void cw_ctl_island_compile(cw_ctl_compile_t* cp, uint32_t* parts, uint32_t* part_devices,
                           size_t num_parts, void (*start)(cw_ctl_compile_t*, void*),
                           void* user);
// A part's compile ended: with an error (st, taken) or loaded (info
// borrowed). Returns true when `cp` was a part (the island's reply is sent
// once every part ended); false: the caller answers as for one worker.
bool cw_ctl_island_compile_done(cw_ctl_compile_t* cp, cw_status_t* st,
                                const Causeway__V1__ExecutableInfo* info);
// Relays a stamped LAUNCH of an island executable to every part, all with
// the stamp `stamp`, in two phases (prepare, then go or cancel; takes `it`).
// Returns 1 when the launch went out (one outstanding stamped launch until
// cw_ctl_sched_release), 0 when it was answered at once (no stamp taken).
uint32_t cw_ctl_island_relay_launch(cw_controller_t* ctl, cw_ctl_item_t* it, cw_ctl_exe_t* e,
                                uint64_t stamp);
// Relays an item of an island (DELETE) to every member (takes `it`).
void cw_ctl_island_relay_all(cw_controller_t* ctl, cw_ctl_item_t* it, uint32_t island);

#endif  // CW_CTL_ISLAND_H_

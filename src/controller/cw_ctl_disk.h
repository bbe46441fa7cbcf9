// The compile cache on disk (cw_ctl_disk.c, docs/operations.md): serialized
// executables by cache key under --compile-cache-dir, read and written off
// the loop thread, bounded by --compile-cache-disk-bytes.
#ifndef CW_CTL_DISK_H_
#define CW_CTL_DISK_H_

#include "cw_ctl_compile.h"

// Opens the cache in --compile-cache-dir (off when empty): creates the
// directory and starts its scan in the background (pruning, the byte
// account, the trim to --compile-cache-disk-bytes); reads no entry.
CW_MUST_USE cw_status_t cw_ctl_disk_create(cw_controller_t* ctl);
// The controller stops: a running scan ends early, waiting writes are dropped.
void cw_ctl_disk_stop(cw_controller_t* ctl);
void cw_ctl_disk_release(cw_controller_t* ctl);
// After a memory miss: looks for f's key on disk off the loop thread (the
// thread pool). Returns false when the disk cache is off (the caller sends
// COMPILE); true when the lookup runs: a hit then finishes `f` with the
// entry, a miss sends COMPILE with copies of the request's parts.
bool cw_ctl_disk_lookup(cw_controller_t* ctl, cw_ctl_inflight_t* f, const char* format,
                        const uint8_t* code, size_t code_size, const uint8_t* options,
                        size_t options_size);
// Stores a freshly compiled entry (retained until written) off the loop
// thread, after the scans and stores queued before it.
void cw_ctl_disk_store(cw_controller_t* ctl, const uint8_t* key, size_t key_size,
                       cw_compile_cache_entry_t* entry);
// A worker could not load an entry read from the disk: counted in
// disk_errors (the compile that follows rewrites it).
void cw_ctl_disk_refused(cw_controller_t* ctl);
// Fills the disk fields of a STATS reply.
void cw_ctl_disk_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st);

#endif  // CW_CTL_DISK_H_

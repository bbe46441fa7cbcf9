// The controller's compile cache on disk (--compile-cache-dir), glued to
// its loop: every file operation runs on the libuv thread pool
// (uv_queue_work) and its result is applied on the loop thread in the
// after-work callback. The memory cache is always looked at first
// (cw_controller.c); this module is reached only after a memory miss, and
// only while no identical compilation is in flight (the in-flight record
// makes identical requests wait for the disk answer too).
//
// Start-up reads nothing: the controller listens at once, and a scan of the
// directory runs in the background (cw_compile_disk_scan with headers: a
// listing, a stat and the 80-byte header of each entry). It removes files
// that cannot be entries, counts what the entries hold, and trims them to
// the bound. Lookups never wait for it: an entry's file is named by its
// key's digest, so a lookup opens that one file, before the scan finished
// as after. The directory is the index; the scan only keeps the account.
//
// A hit inserts the bytes into the memory cache and finishes the in-flight
// compilation with them: no COMPILE goes to a worker. A miss, or a file
// that is invalid (logged, counted in disk_errors, removed, never trusted),
// sends COMPILE as if there were no disk cache. A fresh compilation is
// written back atomically.
//
// The account (disk_bytes): the last scan's total plus what this controller
// wrote and removed since. Scans and stores run one at a time, in order (the
// lane), so a write is counted once, by the scan or after it. A store that
// takes the account over --compile-cache-disk-bytes queues an eviction scan
// (no header reads) that removes the oldest entries (by mtime, refreshed on
// every hit) down to 90% of the bound and counts again, which also brings
// in what other controllers sharing the directory wrote.
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cw_compile_disk.h"
#include "cw_ctl_compile.h"
#include "cw_ctl_disk.h"
#include "cw_log.h"
#include "cw_time.h"

typedef struct cw__job_s cw__job_t;

struct cw_ctl_disk_s {
  char* dir;       // immutable while jobs run (freed after the loop ends)
  uint64_t bound;
  uint64_t bytes;    // the account (see the top)
  uint64_t entries;
  uint64_t hits, misses, errors;
  bool scanned;        // the start-up scan finished
  bool evict_queued;   // an eviction scan waits in the lane or runs
  bool lane_busy;      // a lane job runs on the thread pool
  cw__job_t* lane_head;  // lane jobs waiting, oldest first
  cw__job_t* lane_tail;
  atomic_bool stop;    // the controller stops: a running scan ends early
};

typedef enum cw__kind_e {
  CW__LOOKUP,
  CW__SCAN,   // at start-up: headers checked
  CW__EVICT,  // over the bound
  CW__STORE,
} cw__kind_t;

struct cw__job_s {
  uv_work_t req;
  cw__job_t* next;  // in the lane
  cw__kind_t kind;
  cw_controller_t* ctl;
  cw_ctl_disk_t* d;  // the thread reads only d->dir, d->bound and d->stop
  uint8_t digest[CW_COMPILE_DISK_DIGEST_SIZE];
  const uint8_t* key;  // lookup: f->key, immutable while f waits for us; store: owned
  size_t key_size;
  cw_status_t status;  // from the thread
  // Lookup.
  cw_ctl_inflight_t* f;
  uint8_t* bytes;
  size_t size;
  uint64_t file_size;  // the entry's size before it was read (a refused one is removed)
  // Store.
  cw_compile_cache_entry_t* entry;  // retained
  int64_t added_bytes, added_entries;
  // Scans.
  cw_compile_disk_scan_t scan;
  int64_t ms;
};

static cw__job_t* cw__job_create(cw_controller_t* ctl, cw__kind_t kind) {
  cw__job_t* j = calloc(1, sizeof(*j));
  if (!j) return NULL;
  j->kind = kind;
  j->ctl = ctl;
  j->d = ctl->disk;
  j->req.data = j;
  return j;
}

static void cw__job_free(cw__job_t* j) {
  cw_status_free(j->status);
  free(j->bytes);
  if (j->kind == CW__STORE) {
    cw_compile_cache_entry_release(j->entry);
    free((void*)j->key);
  }
  free(j);
}

// --- The lane: scans and stores, one at a time ----------------------------------------

static void cw__lane_work(uv_work_t* req);
static void cw__lane_done(uv_work_t* req, int status);

static void cw__lane_next(cw_ctl_disk_t* d) {
  while (!d->lane_busy && d->lane_head) {
    cw__job_t* j = d->lane_head;
    d->lane_head = j->next;
    if (!d->lane_head) d->lane_tail = NULL;
    j->next = NULL;
    if (atomic_load_explicit(&d->stop, memory_order_relaxed)) {
      cw__job_free(j);
      continue;
    }
    int rc = uv_queue_work(&j->ctl->loop, &j->req, cw__lane_work, cw__lane_done);
    if (rc < 0) {
      d->errors++;
      if (j->kind == CW__EVICT) d->evict_queued = false;
      CW_LOGW("compile cache: uv_queue_work: %s", uv_strerror(rc));
      cw__job_free(j);
      continue;
    }
    d->lane_busy = true;
  }
}

static void cw__lane_push(cw_ctl_disk_t* d, cw__job_t* j) {
  if (d->lane_tail) d->lane_tail->next = j;
  else d->lane_head = j;
  d->lane_tail = j;
  cw__lane_next(d);
}

// Down to this when over the bound, so a full cache is not scanned on every store.
static uint64_t cw__evict_target(uint64_t bound) { return bound - bound / 10; }

static void cw__lane_work(uv_work_t* req) {
  cw__job_t* j = req->data;
  cw_ctl_disk_t* d = j->d;
  int64_t t0 = cw_time_now_ms();
  if (j->kind == CW__SCAN || j->kind == CW__EVICT) {
    j->status = cw_compile_disk_scan(d->dir, d->bound, cw__evict_target(d->bound),
                                     j->kind == CW__SCAN, &d->stop, &j->scan);
    j->ms = cw_time_now_ms() - t0;
    return;
  }
  // Store: what the write adds to the account (it may replace a file).
  j->status = cw_compile_disk_digest(j->key, j->key_size, j->digest);
  char* path = NULL;
  if (!j->status) j->status = cw_compile_disk_path(d->dir, j->digest, &path);
  struct stat sb;
  bool existed = path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
  free(path);
  if (!j->status) j->status = cw_compile_disk_write(d->dir, j->digest, j->entry->bytes,
                                                    j->entry->size);
  if (!j->status) {
    j->added_bytes = (int64_t)(j->entry->size + CW_COMPILE_DISK_HEADER_SIZE) -
                     (existed ? (int64_t)sb.st_size : 0);
    j->added_entries = existed ? 0 : 1;
  }
}

static uint64_t cw__add(uint64_t v, int64_t delta) {
  if (delta < 0 && (uint64_t)-delta > v) return 0;
  return v + (uint64_t)delta;
}

static void cw__lane_done(uv_work_t* req, int status) {
  cw__job_t* j = req->data;
  cw_ctl_disk_t* d = j->d;
  d->lane_busy = false;
  bool ok = status == 0 && !j->status;
  if (j->kind == CW__STORE) {
    if (ok) {
      d->bytes = cw__add(d->bytes, j->added_bytes);
      d->entries = cw__add(d->entries, j->added_entries);
    } else if (status == 0) {
      d->errors++;
      CW_LOGW("compile cache: writing to %s: %s", d->dir, cw_status_message(j->status));
    }
  } else {
    if (j->kind == CW__EVICT) d->evict_queued = false;
    if (ok) {
      d->bytes = j->scan.bytes;
      d->entries = j->scan.entries;
    }
    if (j->kind == CW__SCAN) d->scanned = true;
    if (ok && (j->kind == CW__SCAN || j->scan.evicted)) {
      CW_LOGI("compile cache on disk: %s: %" PRIu64 " entries, %" PRIu64 " bytes (bound %" PRIu64
              "); removed %" PRIu64 " invalid, %" PRIu64 " oldest, %" PRIu64
              " stale temporaries; scanned in %" PRId64 " ms",
              d->dir, d->entries, d->bytes, d->bound, j->scan.pruned, j->scan.evicted,
              j->scan.temporaries, j->ms);
    } else if (status == 0 && cw_status_code(j->status) != CW_CANCELLED) {
      d->errors++;
      CW_LOGW("compile cache on disk: scanning %s: %s", d->dir, cw_status_message(j->status));
    }
  }
  cw_controller_t* ctl = j->ctl;
  bool stored = j->kind == CW__STORE;  // scans trim by themselves
  cw__job_free(j);
  if (stored && d->bytes > d->bound && !d->evict_queued &&
      !atomic_load_explicit(&d->stop, memory_order_relaxed)) {
    cw__job_t* e = cw__job_create(ctl, CW__EVICT);
    if (e) {
      d->evict_queued = true;
      cw__lane_push(d, e);
    }
  }
  cw__lane_next(d);
}

// --- Lifetime -------------------------------------------------------------------------

cw_status_t cw_ctl_disk_create(cw_controller_t* ctl) {
  const char* dir = cw_settings_string(ctl->settings, CW_SET_COMPILE_CACHE_DIR);
  if (!dir[0]) return cw_ok_status();
  CW_RETURN_IF_ERROR(cw_compile_disk_prepare_dir(dir), "--compile-cache-dir");
  cw_ctl_disk_t* d = calloc(1, sizeof(*d));
  if (d) d->dir = strdup(dir);
  if (!d || !d->dir) {
    free(d);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  d->bound = (uint64_t)cw_settings_int(ctl->settings, CW_SET_COMPILE_CACHE_DISK_BYTES);
  atomic_init(&d->stop, false);
  ctl->disk = d;
  cw__job_t* j = cw__job_create(ctl, CW__SCAN);
  if (!j) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  cw__lane_push(d, j);  // starts on the thread pool now; applied once the loop runs
  CW_LOGI("compile cache on disk: %s (bound %" PRIu64 " bytes); scanning in the background",
          d->dir, d->bound);
  return cw_ok_status();
}

void cw_ctl_disk_stop(cw_controller_t* ctl) {
  cw_ctl_disk_t* d = ctl->disk;
  if (!d) return;
  atomic_store_explicit(&d->stop, true, memory_order_relaxed);
  while (d->lane_head) {
    cw__job_t* j = d->lane_head;
    d->lane_head = j->next;
    cw__job_free(j);
  }
  d->lane_tail = NULL;
}

void cw_ctl_disk_release(cw_controller_t* ctl) {
  if (!ctl->disk) return;
  cw_ctl_disk_stop(ctl);  // nothing runs any more: the loop has ended
  free(ctl->disk->dir);
  free(ctl->disk);
  ctl->disk = NULL;
}

// --- Lookup ---------------------------------------------------------------------------

static void cw__lookup_work(uv_work_t* req) {
  cw__job_t* j = req->data;
  j->status = cw_compile_disk_digest(j->key, j->key_size, j->digest);
  char* path = NULL;
  if (!j->status) j->status = cw_compile_disk_path(j->d->dir, j->digest, &path);
  struct stat sb;
  if (path && stat(path, &sb) == 0) j->file_size = (uint64_t)sb.st_size;
  free(path);
  if (!j->status) {
    j->status = cw_compile_disk_read(j->d->dir, j->digest, j->d->bound, &j->bytes, &j->size);
  }
}

static void cw__lookup_done(uv_work_t* req, int status) {
  cw__job_t* j = req->data;
  cw_controller_t* ctl = j->ctl;
  cw_ctl_disk_t* d = ctl->disk;
  cw_ctl_inflight_t* f = j->f;
  if (status == UV_ECANCELED || ctl->shutting_down) {
    cw_ctl_compile_inflight_finish(f, NULL, cw_make_status(CW_CANCELLED, "the controller is stopping"));
    cw__job_free(j);
    return;
  }
  if (!j->status) {
    cw_compile_cache_entry_t* e =
        cw_compile_cache_insert(ctl->cache, f->key, f->key_size, j->bytes, j->size);
    j->bytes = NULL;  // taken (freed on failure)
    if (e) {
      d->hits++;
      CW_LOGI("compile cache: disk hit (%zu bytes)", j->size);
      for (cw_ctl_compile_t* cp = f->waiters; cp; cp = cp->next)
        cp->cache_hit = cp->disk_hit = true;
      cw_ctl_compile_inflight_finish(f, e, cw_ok_status());
      cw__job_free(j);
      return;
    }
    d->errors++;
    CW_LOGW("compile cache: out of memory for a %zu-byte disk entry; compiling", j->size);
  } else if (cw_status_code(j->status) == CW_NOT_FOUND) {
    d->misses++;
  } else {
    // Never trusted: recompiled (and rewritten) as on a miss.
    d->misses++;
    d->errors++;
    CW_LOGW("compile cache: ignoring a disk entry (recompiling): %s",
            cw_status_message(j->status));
    if (cw_status_code(j->status) == CW_DATA_LOSS && d->scanned) {  // the file was removed
      d->bytes = cw__add(d->bytes, -(int64_t)j->file_size);
      d->entries = cw__add(d->entries, -1);
    }
  }
  cw_ctl_compile_send_kept(f);
  cw__job_free(j);
}


bool cw_ctl_disk_lookup(cw_controller_t* ctl, cw_ctl_inflight_t* f, const char* format,
                        const uint8_t* code, size_t code_size, const uint8_t* options,
                        size_t options_size) {
  if (!ctl->disk) return false;
  cw__job_t* j = cw__job_create(ctl, CW__LOOKUP);
  if (!j || !cw_ctl_compile_keep(f, format, code, code_size, options, options_size)) {
    free(j);
    return false;  // compile without the disk
  }
  j->f = f;
  j->key = f->key;
  j->key_size = f->key_size;
  int rc = uv_queue_work(&ctl->loop, &j->req, cw__lookup_work, cw__lookup_done);
  if (rc < 0) {
    CW_LOGW("compile cache: uv_queue_work: %s", uv_strerror(rc));
    cw__job_free(j);
    cw_ctl_compile_drop_kept(f);
    return false;
  }
  return true;
}

// --- Store ----------------------------------------------------------------------------

void cw_ctl_disk_store(cw_controller_t* ctl, const uint8_t* key, size_t key_size,
                       cw_compile_cache_entry_t* entry) {
  if (!ctl->disk || ctl->shutting_down) return;
  cw__job_t* j = cw__job_create(ctl, CW__STORE);
  uint8_t* key_copy = malloc(key_size ? key_size : 1);
  if (!j || !key_copy) {
    free(key_copy);
    free(j);
    ctl->disk->errors++;
    return;
  }
  memcpy(key_copy, key, key_size);
  j->key = key_copy;
  j->key_size = key_size;
  j->entry = entry;
  cw_compile_cache_entry_retain(entry);
  cw__lane_push(ctl->disk, j);
}

void cw_ctl_disk_refused(cw_controller_t* ctl) {
  if (ctl->disk) ctl->disk->errors++;
}

void cw_ctl_disk_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st) {
  st->compiles_sent = ctl->compiles_sent;
  st->compiles_dropped = ctl->compiles_dropped;
  st->compiles_queued = ctl->compiles_queued;
  if (!ctl->disk) return;
  st->disk_hits = ctl->disk->hits;
  st->disk_misses = ctl->disk->misses;
  st->disk_bytes = ctl->disk->bytes;
  st->disk_errors = ctl->disk->errors;
}

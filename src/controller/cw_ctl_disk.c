// The controller's compile cache on disk (--compile-cache-dir), glued to
// its loop: every file operation runs on the libuv thread pool
// (uv_queue_work) and its result is applied on the loop thread in the
// after-work callback. The memory cache is always looked at first
// (cw_controller.c); this module is reached only after a memory miss, and
// only while no identical compilation is in flight (the in-flight record
// makes identical requests wait for the disk answer too).
//
// A hit inserts the bytes into the memory cache and finishes the in-flight
// compilation with them: no COMPILE goes to a worker. A miss, or a file
// that is invalid (logged, counted in disk_errors, removed, never trusted),
// sends COMPILE as if there were no disk cache. A fresh compilation is
// written back atomically and the directory trimmed to its byte bound,
// oldest entries (by mtime, refreshed on every hit) first.
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_compile_disk.h"
#include "cw_ctl_compile.h"
#include "cw_ctl_disk.h"
#include "cw_log.h"

struct cw_ctl_disk_s {
  char* dir;
  uint64_t bound;
  uint64_t bytes;  // on disk, as of the last trim
  uint64_t hits, misses, errors;
};

typedef struct cw__job_s {
  uv_work_t req;
  cw_controller_t* ctl;
  char* dir;  // copy: the thread must not read ctl
  uint64_t bound;
  uint8_t digest[CW_COMPILE_DISK_DIGEST_SIZE];
  const uint8_t* key;  // lookup: f->key, immutable while f waits for us
  size_t key_size;
  cw_status_t status;  // from the thread
  // Lookup.
  cw_ctl_inflight_t* f;
  uint8_t* bytes;
  size_t size;
  // Store.
  cw_compile_cache_entry_t* entry;  // retained
  uint64_t bytes_after;
} cw__job_t;

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
  ctl->disk = d;
  // Before the loop serves anyone: a directory scan, once.
  cw_status_t s = cw_compile_disk_evict(d->dir, d->bound, &d->bytes);
  if (s) {
    CW_LOGW("compile cache %s: %s", d->dir, cw_status_message(s));
    cw_status_free(s);
  }
  CW_LOGI("compile cache on disk: %s (%" PRIu64 " bytes, bound %" PRIu64 ")", d->dir, d->bytes,
          d->bound);
  return cw_ok_status();
}

void cw_ctl_disk_release(cw_controller_t* ctl) {
  if (!ctl->disk) return;
  free(ctl->disk->dir);
  free(ctl->disk);
  ctl->disk = NULL;
}

static cw__job_t* cw__job_create(cw_controller_t* ctl) {
  cw__job_t* j = calloc(1, sizeof(*j));
  if (j) j->dir = strdup(ctl->disk->dir);
  if (j && !j->dir) {
    free(j);
    return NULL;
  }
  if (j) {
    j->ctl = ctl;
    j->bound = ctl->disk->bound;
    j->req.data = j;
  }
  return j;
}

static void cw__job_free(cw__job_t* j) {
  cw_status_free(j->status);
  free(j->bytes);
  free(j->dir);
  free(j);
}

// --- Lookup ---------------------------------------------------------------------------

static void cw__lookup_work(uv_work_t* req) {
  cw__job_t* j = req->data;
  j->status = cw_compile_disk_digest(j->key, j->key_size, j->digest);
  if (!j->status) j->status = cw_compile_disk_read(j->dir, j->digest, j->bound, &j->bytes, &j->size);
}

static void cw__inflight_drop_request(cw_ctl_inflight_t* f) {
  free(f->code);
  free(f->format);
  free(f->options);
  f->code = f->options = NULL;
  f->format = NULL;
}

static void cw__lookup_done(uv_work_t* req, int status) {
  cw__job_t* j = req->data;
  cw_controller_t* ctl = j->ctl;
  cw_ctl_disk_t* d = ctl->disk;
  cw_ctl_inflight_t* f = j->f;
  if (status == UV_ECANCELED || ctl->shutting_down) {
    cw__inflight_drop_request(f);
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
      for (cw_ctl_compile_t* cp = f->waiters; cp; cp = cp->next) cp->cache_hit = true;
      cw__inflight_drop_request(f);
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
  }
  uint8_t* code = f->code;
  uint8_t* options = f->options;
  char* format = f->format;
  size_t code_size = f->code_size, options_size = f->options_size;
  f->code = f->options = NULL;
  f->format = NULL;
  cw_ctl_compile_send(f, format, code, code_size, options, options_size);
  free(code);
  free(options);
  free(format);
  cw__job_free(j);
}

bool cw_ctl_disk_lookup(cw_controller_t* ctl, cw_ctl_inflight_t* f, const char* format,
                        const uint8_t* code, size_t code_size, const uint8_t* options,
                        size_t options_size) {
  if (!ctl->disk) return false;
  cw__job_t* j = cw__job_create(ctl);
  f->code = malloc(code_size ? code_size : 1);
  f->options = malloc(options_size ? options_size : 1);
  f->format = strdup(format);
  if (!j || !f->code || !f->options || !f->format) {
    free(j ? j->dir : NULL);
    free(j);
    cw__inflight_drop_request(f);
    return false;  // compile without the disk
  }
  if (code_size) memcpy(f->code, code, code_size);  // empty parts may be NULL
  if (options_size) memcpy(f->options, options, options_size);
  f->code_size = code_size;
  f->options_size = options_size;
  j->f = f;
  j->key = f->key;
  j->key_size = f->key_size;
  int rc = uv_queue_work(&ctl->loop, &j->req, cw__lookup_work, cw__lookup_done);
  if (rc < 0) {
    CW_LOGW("compile cache: uv_queue_work: %s", uv_strerror(rc));
    cw__job_free(j);
    cw__inflight_drop_request(f);
    return false;
  }
  return true;
}

// --- Store ----------------------------------------------------------------------------

static void cw__store_work(uv_work_t* req) {
  cw__job_t* j = req->data;
  j->status = cw_compile_disk_digest(j->key, j->key_size, j->digest);
  if (!j->status) j->status = cw_compile_disk_write(j->dir, j->digest, j->entry->bytes,
                                                    j->entry->size);
  if (!j->status) j->status = cw_compile_disk_evict(j->dir, j->bound, &j->bytes_after);
}

static void cw__store_done(uv_work_t* req, int status) {
  cw__job_t* j = req->data;
  cw_ctl_disk_t* d = j->ctl->disk;
  if (status == 0 && !j->status) {
    d->bytes = j->bytes_after;
  } else if (status == 0) {
    d->errors++;
    CW_LOGW("compile cache: writing to %s: %s", d->dir, cw_status_message(j->status));
  }
  cw_compile_cache_entry_release(j->entry);
  free((void*)j->key);
  cw__job_free(j);
}

void cw_ctl_disk_store(cw_controller_t* ctl, const uint8_t* key, size_t key_size,
                       cw_compile_cache_entry_t* entry) {
  if (!ctl->disk || ctl->shutting_down) return;
  cw__job_t* j = cw__job_create(ctl);
  uint8_t* key_copy = malloc(key_size ? key_size : 1);
  if (!j || !key_copy) {
    free(key_copy);
    if (j) cw__job_free(j);
    ctl->disk->errors++;
    return;
  }
  memcpy(key_copy, key, key_size);
  j->key = key_copy;
  j->key_size = key_size;
  j->entry = entry;
  cw_compile_cache_entry_retain(entry);
  int rc = uv_queue_work(&ctl->loop, &j->req, cw__store_work, cw__store_done);
  if (rc < 0) {
    ctl->disk->errors++;
    cw_compile_cache_entry_release(entry);
    free(key_copy);
    cw__job_free(j);
  }
}

void cw_ctl_disk_stats(const cw_controller_t* ctl, Causeway__V1__Stats* st) {
  st->compiles_sent = ctl->compiles_sent;
  if (!ctl->disk) return;
  st->disk_hits = ctl->disk->hits;
  st->disk_misses = ctl->disk->misses;
  st->disk_bytes = ctl->disk->bytes;
  st->disk_errors = ctl->disk->errors;
}

#include "cw_store.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

// Open addressing with linear probing; removed slots become tombstones until
// the next rehash. The table grows from the number of live entries only.
#define CW__TOMBSTONE ((cw_store_entry_t*)(uintptr_t)1)
#define CW__MIN_CAPACITY 64

struct cw_store_s {
  cw_store_entry_t** slots;
  size_t capacity;  // power of two
  size_t count;
  size_t tombstones;
  uint64_t next_serial;
  cw_store_entry_t* detached;  // removed but referenced entries
  size_t num_detached;
  // The same by (session, id), chained through dhnext: a PUT looks one up,
  // and a client can make tens of thousands.
  cw_store_entry_t** dbuckets;
  size_t num_dbuckets;  // a power of two
  // Per session: its entries in the table and their counts, kept as they
  // change: STATS asks every second, and counting a table of 400,000
  // entries took the loop 146 ms.
  struct cw__sess_s** sbuckets;
  size_t num_sbuckets;  // a power of two
  size_t num_sess;
  cw_store_stats_t totals;
  cw_store_release_fn release;
  void* release_user;
};

typedef struct cw__sess_s {
  uint64_t key;
  size_t entries;
  cw_store_stats_t stats;
  cw_store_entry_t* head;  // its entries, through snext/sprev
  struct cw__sess_s* next;  // hash chain
} cw__sess_t;

static uint64_t cw__hash(uint64_t session, uint64_t id) {
  uint64_t h = session * 0x9E3779B97F4A7C15ull ^ id;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

cw_status_t cw_store_create(cw_store_release_fn release, void* user, cw_store_t** out) {
  *out = NULL;
  cw_store_t* s = calloc(1, sizeof(*s));
  if (!s) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the store");
  s->slots = calloc(CW__MIN_CAPACITY, sizeof(*s->slots));
  s->dbuckets = calloc(CW__MIN_CAPACITY, sizeof(*s->dbuckets));
  s->sbuckets = calloc(CW__MIN_CAPACITY, sizeof(*s->sbuckets));
  if (!s->slots || !s->dbuckets || !s->sbuckets) {
    free(s->slots);
    free(s->dbuckets);
    free(s->sbuckets);
    free(s);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for the store");
  }
  s->num_dbuckets = CW__MIN_CAPACITY;
  s->num_sbuckets = CW__MIN_CAPACITY;
  s->capacity = CW__MIN_CAPACITY;
  s->next_serial = 1;
  s->release = release;
  s->release_user = user;
  *out = s;
  return cw_ok_status();
}


// --- Per-session records and counts ------------------------------------------

static cw__sess_t** cw__sbucket(const cw_store_t* s, uint64_t key) {
  return &s->sbuckets[cw__hash(key, 0) & (s->num_sbuckets - 1)];
}

static cw__sess_t* cw__sess_find(const cw_store_t* s, uint64_t key) {
  for (cw__sess_t* r = *cw__sbucket(s, key); r; r = r->next) {
    if (r->key == key) return r;
  }
  return NULL;
}

// The record of `key`, made if need be; NULL without memory for it. The
// buckets grow with the records (without memory, the chains get longer).
static cw__sess_t* cw__sess_get(cw_store_t* s, uint64_t key) {
  cw__sess_t* r = cw__sess_find(s, key);
  if (r) return r;
  r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->key = key;
  if (s->num_sess >= s->num_sbuckets) {
    size_t n = 2 * s->num_sbuckets;
    cw__sess_t** grown = calloc(n, sizeof(*grown));
    if (grown) {
      cw__sess_t** old = s->sbuckets;
      size_t old_n = s->num_sbuckets;
      s->sbuckets = grown;
      s->num_sbuckets = n;
      for (size_t i = 0; i < old_n; ++i) {
        for (cw__sess_t *x = old[i], *next; x; x = next) {
          next = x->next;
          cw__sess_t** b = cw__sbucket(s, x->key);
          x->next = *b;
          *b = x;
        }
      }
      free(old);
    }
  }
  cw__sess_t** b = cw__sbucket(s, key);
  r->next = *b;
  *b = r;
  s->num_sess++;
  return r;
}

static void cw__sess_drop(cw_store_t* s, cw__sess_t* r) {
  cw__sess_t** b = cw__sbucket(s, r->key);
  while (*b != r) b = &(*b)->next;
  *b = r->next;
  s->num_sess--;
  free(r);
}

// What `e` adds to its counts (sign 1) or takes away (sign -1).
static void cw__count(const cw_store_entry_t* e, int sign, cw_store_stats_t* out) {
  if (e->kind != CW_STORE_BUFFER) {
    out->executables += (uint64_t)(int64_t)sign;
  } else if (e->state != CW_STORE_ERROR) {
    out->buffers += (uint64_t)(int64_t)sign;
    out->buffer_bytes += sign > 0 ? e->bytes : -e->bytes;
  }
}

// Counts `e` (in the table) in or out of its session's and the totals.
static void cw__account(cw_store_t* s, const cw_store_entry_t* e, int sign) {
  cw__sess_t* r = cw__sess_find(s, e->session);
  assert(r);
  if (r) cw__count(e, sign, &r->stats);
  cw__count(e, sign, &s->totals);
}

static size_t cw__probe(const cw_store_t* s, uint64_t session, uint64_t id, bool* out_found) {
  size_t mask = s->capacity - 1;
  size_t i = (size_t)cw__hash(session, id) & mask;
  size_t first_free = SIZE_MAX;
  for (;;) {
    cw_store_entry_t* e = s->slots[i];
    if (!e) {
      *out_found = false;
      return first_free != SIZE_MAX ? first_free : i;
    }
    if (e == CW__TOMBSTONE) {
      if (first_free == SIZE_MAX) first_free = i;
    } else if (e->session == session && e->id == id) {
      *out_found = true;
      return i;
    }
    i = (i + 1) & mask;
  }
}

static cw_status_t cw__rehash(cw_store_t* s) {
  size_t cap = CW__MIN_CAPACITY;
  while (cap < (s->count + 1) * 2) cap *= 2;
  cw_store_entry_t** slots = calloc(cap, sizeof(*slots));
  if (!slots) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory growing the store");
  for (size_t i = 0; i < s->capacity; ++i) {
    cw_store_entry_t* e = s->slots[i];
    if (!e || e == CW__TOMBSTONE) continue;
    size_t j = (size_t)cw__hash(e->session, e->id) & (cap - 1);
    while (slots[j]) j = (j + 1) & (cap - 1);
    slots[j] = e;
  }
  free(s->slots);
  s->slots = slots;
  s->capacity = cap;
  s->tombstones = 0;
  return cw_ok_status();
}

cw_status_t cw_store_insert(cw_store_t* s, uint64_t session, uint64_t id, cw_store_kind_t kind,
                            cw_store_entry_t** out) {
  *out = NULL;
  if (id == 0) return cw_make_status(CW_INVALID_ARGUMENT, "object id 0 is reserved");
  bool found;
  cw__probe(s, session, id, &found);
  if (found) return cw_make_status(CW_ALREADY_EXISTS, "object %llu already exists",
                                   (unsigned long long)id);
  // Keep the load (live + tombstones) under 70%.
  if ((s->count + s->tombstones + 1) * 10 > s->capacity * 7) {
    CW_RETURN_IF_ERROR(cw__rehash(s), "insert %llu", (unsigned long long)id);
  }
  cw_store_entry_t* e = calloc(1, sizeof(*e));
  cw__sess_t* r = e ? cw__sess_get(s, session) : NULL;
  if (!r) {
    free(e);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for object %llu",
                          (unsigned long long)id);
  }
  e->session = session;
  e->id = id;
  e->serial = s->next_serial++;
  e->kind = kind;
  e->state = CW_STORE_PENDING;
  e->device = -1;
  size_t i = cw__probe(s, session, id, &found);
  if (s->slots[i] == CW__TOMBSTONE) s->tombstones--;
  s->slots[i] = e;
  s->count++;
  e->snext = r->head;
  if (r->head) r->head->sprev = e;
  r->head = e;
  r->entries++;
  cw__account(s, e, 1);
  *out = e;
  return cw_ok_status();
}

cw_store_entry_t* cw_store_lookup(cw_store_t* s, uint64_t session, uint64_t id) {
  bool found;
  size_t i = cw__probe(s, session, id, &found);
  return found ? s->slots[i] : NULL;
}

static const char* cw__kind_name(cw_store_kind_t kind) {
  return kind == CW_STORE_BUFFER ? "buffer" : kind == CW_STORE_EXECUTABLE ? "executable" : "object";
}

cw_status_t cw_store_find(cw_store_t* s, uint64_t session, uint64_t id, cw_store_kind_t kind,
                          cw_store_entry_t** out) {
  *out = cw_store_lookup(s, session, id);
  if (!*out) {
    return cw_make_status(CW_NOT_FOUND, "%s %llu not found", cw__kind_name(kind),
                          (unsigned long long)id);
  }
  if ((*out)->kind != kind) {
    cw_store_kind_t have = (*out)->kind;
    *out = NULL;
    return cw_make_status(CW_INVALID_ARGUMENT, "object %llu is a %s, not a %s",
                          (unsigned long long)id, cw__kind_name(have), cw__kind_name(kind));
  }
  return cw_ok_status();
}

cw_status_t cw_store_add_waiter(cw_store_t* s, cw_store_entry_t* e, cw_store_waiter_fn fn,
                                void* user) {
  cw_store_waiter_t* w = malloc(sizeof(*w));
  if (!w) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a waiter");
  w->fn = fn;
  w->user = user;
  // Append so waiters run in registration order (at the tail: an object may
  // have tens of thousands).
  w->next = NULL;
  if (e->waiters) e->waiters_tail->next = w;
  else e->waiters = w;
  e->waiters_tail = w;
  return cw_ok_status();
}

// Runs a detached waiter list; the callbacks may change the store.
static void cw__run_waiters(cw_store_waiter_t* w) {
  while (w) {
    cw_store_waiter_t* next = w->next;
    w->fn(w->user);
    free(w);
    w = next;
  }
}

static void cw__release_handle(cw_store_t* s, cw_store_entry_t* e) {
  if ((e->handle || e->charge || e->parts) && s->release) s->release(s->release_user, e);
  e->handle = NULL;
  e->charge = 0;
  e->parts = NULL;
}

void cw_store_set_bytes(cw_store_t* s, cw_store_entry_t* e, uint64_t bytes) {
  if (!e->detached) cw__account(s, e, -1);
  e->bytes = bytes;
  if (!e->detached) cw__account(s, e, 1);
}

void cw_store_set_ready(cw_store_t* s, cw_store_entry_t* e, void* handle) {
  e->handle = handle;
  if (!e->detached) cw__account(s, e, -1);
  e->state = CW_STORE_READY;
  if (!e->detached) cw__account(s, e, 1);
  cw_store_waiter_t* w = e->waiters;
  e->waiters = NULL;
  cw__run_waiters(w);
}

void cw_store_set_error(cw_store_t* s, cw_store_entry_t* e, cw_status_t status) {
  cw__release_handle(s, e);
  cw_status_free(e->error);
  e->error = status;
  if (!e->detached) cw__account(s, e, -1);
  e->state = CW_STORE_ERROR;
  if (!e->detached) cw__account(s, e, 1);
  cw_store_waiter_t* w = e->waiters;
  e->waiters = NULL;
  cw__run_waiters(w);
}

static void cw__free_entry(cw_store_t* s, cw_store_entry_t* e) {
  cw__release_handle(s, e);
  cw_store_waiter_t* w = e->waiters;
  cw_status_free(e->error);
  free(e->dims);
  free(e->name);
  for (size_t k = 0; e->params && k < e->num_params; ++k) free(e->params[k].dims);
  free(e->params);
  free(e->devices);
  free(e->output_bytes);
  free(e);
  cw__run_waiters(w);
}

static cw_store_entry_t** cw__dbucket(cw_store_t* s, uint64_t session, uint64_t id) {
  return &s->dbuckets[cw__hash(session, id) & (s->num_dbuckets - 1)];
}

// Chains `e` in; grows the buckets with the list (out of memory: the chains
// only get longer).
static void cw__index_detached(cw_store_t* s, cw_store_entry_t* e) {
  if (s->num_detached > s->num_dbuckets) {
    size_t n = 2 * s->num_dbuckets;
    cw_store_entry_t** grown = calloc(n, sizeof(*grown));
    if (grown) {
      free(s->dbuckets);
      s->dbuckets = grown;
      s->num_dbuckets = n;
      for (cw_store_entry_t* x = s->detached; x; x = x->detached_next) {
        if (x == e) continue;
        cw_store_entry_t** b = cw__dbucket(s, x->session, x->id);
        x->dhnext = *b;
        *b = x;
      }
    }
  }
  cw_store_entry_t** b = cw__dbucket(s, e->session, e->id);
  e->dhnext = *b;
  *b = e;
}

static void cw__unlink_detached(cw_store_t* s, cw_store_entry_t* e) {
  cw_store_entry_t** b = cw__dbucket(s, e->session, e->id);
  while (*b && *b != e) b = &(*b)->dhnext;
  if (*b) *b = e->dhnext;
  e->dhnext = NULL;
  if (e->detached_prev) e->detached_prev->detached_next = e->detached_next;
  else s->detached = e->detached_next;
  if (e->detached_next) e->detached_next->detached_prev = e->detached_prev;
  e->detached_prev = e->detached_next = NULL;
  e->detached = false;
  s->num_detached--;
}

void cw_store_remove(cw_store_t* s, cw_store_entry_t* e) {
  if (e->detached) return;  // already removed; its holders free it
  bool found;
  size_t i = cw__probe(s, e->session, e->id, &found);
  if (found && s->slots[i] == e) {
    s->slots[i] = CW__TOMBSTONE;
    s->tombstones++;
    s->count--;
    cw__account(s, e, -1);
    cw__sess_t* r = cw__sess_find(s, e->session);
    if (e->sprev) e->sprev->snext = e->snext;
    else if (r) r->head = e->snext;
    if (e->snext) e->snext->sprev = e->sprev;
    e->snext = e->sprev = NULL;
    if (r && --r->entries == 0) cw__sess_drop(s, r);
  }
  if (e->refs > 0) {
    // A request applied earlier still uses it: keep it, out of the table.
    e->detached = true;
    e->detached_prev = NULL;
    e->detached_next = s->detached;
    if (s->detached) s->detached->detached_prev = e;
    s->detached = e;
    s->num_detached++;
    cw__index_detached(s, e);
    return;
  }
  cw__free_entry(s, e);
}

void cw_store_entry_retain(cw_store_entry_t* e) { e->refs++; }

void cw_store_entry_release(cw_store_t* s, cw_store_entry_t* e) {
  if (!e) return;
  assert(e->refs > 0);
  if (--e->refs > 0 || !e->detached) return;
  cw__unlink_detached(s, e);
  cw__free_entry(s, e);
}

cw_store_entry_t* cw_store_lookup_serial(cw_store_t* s, uint64_t session, uint64_t id,
                                         uint64_t serial) {
  cw_store_entry_t* e = cw_store_lookup(s, session, id);
  if (e && e->serial == serial) return e;
  for (e = *cw__dbucket(s, session, id); e; e = e->dhnext) {
    if (e->serial == serial && e->session == session && e->id == id) return e;
  }
  return NULL;
}

cw_store_entry_t* cw_store_lookup_detached_put(cw_store_t* s, uint64_t session, uint64_t id) {
  cw_store_entry_t* best = NULL;
  for (cw_store_entry_t* e = *cw__dbucket(s, session, id); e; e = e->dhnext) {
    if (e->session != session || e->id != id || !e->awaits_put || e->filling ||
        e->kind != CW_STORE_BUFFER || e->state != CW_STORE_PENDING) {
      continue;
    }
    if (!best || e->serial < best->serial) best = e;
  }
  return best;
}

size_t cw_store_detached_count(const cw_store_t* s) { return s->num_detached; }

void cw_store_remove_session(cw_store_t* s, uint64_t session) {
  // Collect keys first: waiters that run during removal may change the table.
  // One session's come from its list, all sessions' from the table.
  const cw__sess_t* r = session ? cw__sess_find(s, session) : NULL;
  size_t n = session ? (r ? r->entries : 0) : s->count;
  // None left in the table: its detached entries (below) may still wait.
  typedef struct { uint64_t session, id, serial; } cw__key_t;
  cw__key_t* keys = n ? malloc(n * sizeof(*keys)) : NULL;
  if (keys) {
    size_t k = 0;
    for (const cw_store_entry_t* e = r ? r->head : NULL; e && k < n; e = e->snext) {
      keys[k++] = (cw__key_t){e->session, e->id, e->serial};
    }
    for (size_t i = 0; !session && i < s->capacity && k < n; ++i) {
      cw_store_entry_t* e = s->slots[i];
      if (e && e != CW__TOMBSTONE) keys[k++] = (cw__key_t){e->session, e->id, e->serial};
    }
    for (size_t k2 = 0; k2 < k; ++k2) {
      cw_store_entry_t* e = cw_store_lookup(s, keys[k2].session, keys[k2].id);
      if (e && e->serial == keys[k2].serial) cw_store_remove(s, e);
    }
    free(keys);
  }
  // Without memory for the key list (or if waiters added entries), remove
  // one at a time.
  for (;;) {
    cw_store_entry_t* victim = NULL;
    if (session) {
      r = cw__sess_find(s, session);
      victim = r ? r->head : NULL;
    }
    for (size_t i = 0; !session && i < s->capacity && !victim; ++i) {
      cw_store_entry_t* e = s->slots[i];
      if (e && e != CW__TOMBSTONE) victim = e;
    }
    if (!victim) break;
    cw_store_remove(s, victim);
  }
  // Detached entries of the session still pending will not be filled now (or
  // their fill no longer matters): fail them so their holders finish and
  // release them. Waiters may change the list: keys first, each looked up
  // again (by the index), then a rescan for any the waiters added.
  for (;;) {
    size_t m = 0;
    for (cw_store_entry_t* e = s->detached; e; e = e->detached_next) {
      if (e->state == CW_STORE_PENDING && (session == 0 || e->session == session)) m++;
    }
    if (!m) break;
    cw__key_t* pending = malloc(m * sizeof(*pending));
    size_t k = 0;
    for (cw_store_entry_t* e = s->detached; pending && e && k < m; e = e->detached_next) {
      if (e->state == CW_STORE_PENDING && (session == 0 || e->session == session)) {
        pending[k++] = (cw__key_t){e->session, e->id, e->serial};
      }
    }
    for (size_t i = 0; i < k; ++i) {
      cw_store_entry_t* e =
          cw_store_lookup_serial(s, pending[i].session, pending[i].id, pending[i].serial);
      if (e && e->state == CW_STORE_PENDING) {
        cw_store_set_error(s, e, cw_make_status(CW_CANCELLED, "object %llu: its session closed",
                                                (unsigned long long)e->id));
      }
    }
    if (!pending) {  // out of memory: one at a time
      cw_store_entry_t* victim = NULL;
      for (cw_store_entry_t* e = s->detached; e && !victim; e = e->detached_next) {
        if (e->state == CW_STORE_PENDING && (session == 0 || e->session == session)) victim = e;
      }
      cw_store_set_error(s, victim, cw_make_status(CW_CANCELLED, "object %llu: its session "
                                                   "closed", (unsigned long long)victim->id));
    }
    free(pending);
  }
}

void cw_store_release(cw_store_t* s) {
  if (!s) return;
  cw_store_remove_session(s, 0);
  // Holders that never released (none should be left once the worker's loop
  // finished): free their entries anyway.
  while (s->detached) {
    cw_store_entry_t* e = s->detached;
    if (e->waiters) {
      // Their requests read the entry: fail them while it lives (one may
      // let go of it, freeing it), then look again.
      cw_store_set_error(s, e, cw_make_status(CW_CANCELLED, "object %llu: the worker is stopping",
                                              (unsigned long long)e->id));
      continue;
    }
    cw__unlink_detached(s, e);
    cw__free_entry(s, e);
  }
  free(s->slots);
  free(s->dbuckets);
  // Records go with their last entries; any left (entries added by waiters
  // while the store was being emptied) go now.
  for (size_t i = 0; i < s->num_sbuckets; ++i) {
    for (cw__sess_t *r = s->sbuckets[i], *next; r; r = next) {
      next = r->next;
      free(r);
    }
  }
  free(s->sbuckets);
  free(s);
}

void cw_store_stats(const cw_store_t* s, uint64_t session, cw_store_stats_t* out) {
  if (!session) {
    *out = s->totals;
    return;
  }
  const cw__sess_t* r = cw__sess_find(s, session);
  if (r) *out = r->stats;
  else memset(out, 0, sizeof(*out));
}

size_t cw_store_size(const cw_store_t* s) { return s->count; }

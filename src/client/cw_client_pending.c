// The pending-request table of the client library (cw_client_internal.h).
#include "cw_client_internal.h"

#include <stdlib.h>
#include <string.h>

#include "cw_prefetch.h"

#define CW__INITIAL_BUCKETS 64
// Enough for a window of launches in flight; more are freed.
#define CW__MAX_SPARE 256

void cw_client_pending_free(cw_client_pending_t* p) {
  if (!p) return;
  cw_status_free(p->status);
  if (p->reply) protobuf_c_message_free_unpacked(p->reply, NULL);
  free(p->alloc_data);
  free(p);
}

cw_status_t cw_client_table_initialize(cw_client_table_t* t) {
  t->buckets = calloc(CW__INITIAL_BUCKETS, sizeof(*t->buckets));
  if (!t->buckets) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  t->num_buckets = CW__INITIAL_BUCKETS;
  t->count = 0;
  return cw_ok_status();
}

void cw_client_table_deinitialize(cw_client_table_t* t) {
  if (!t->buckets) return;
  for (size_t i = 0; i < t->num_buckets; ++i) {
    cw_client_pending_t* p = t->buckets[i];
    while (p) {
      cw_client_pending_t* next = p->next;
      cw_client_pending_free(p);
      p = next;
    }
  }
  free(t->buckets);
  t->buckets = NULL;
  t->num_buckets = 0;
  t->count = 0;
  while (t->spare) {
    cw_client_pending_t* next = t->spare->next;
    free(t->spare);
    t->spare = next;
  }
  t->num_spare = 0;
}

static cw_client_pending_t** cw__table_slot(cw_client_table_t* t, uint64_t id) {
  cw_client_pending_t** slot = &t->buckets[id & (t->num_buckets - 1)];
  while (*slot && (*slot)->id != id) slot = &(*slot)->next;
  return slot;
}

cw_client_pending_t* cw_client_table_find(cw_client_table_t* t, uint64_t id) {
  return *cw__table_slot(t, id);
}

// Growth failure is harmless: chains just get longer.
static void cw__table_grow(cw_client_table_t* t) {
  size_t n = t->num_buckets * 2;
  cw_client_pending_t** b = calloc(n, sizeof(*b));
  if (!b) return;
  for (size_t i = 0; i < t->num_buckets; ++i) {
    cw_client_pending_t* p = t->buckets[i];
    while (p) {
      cw_client_pending_t* next = p->next;
      p->next = b[p->id & (n - 1)];
      b[p->id & (n - 1)] = p;
      p = next;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->num_buckets = n;
}

void cw_client_table_insert(cw_client_table_t* t, cw_client_pending_t* p) {
  if (t->count >= t->num_buckets * 2) cw__table_grow(t);
  cw_client_pending_t** head = &t->buckets[p->id & (t->num_buckets - 1)];
  p->next = *head;
  *head = p;
  t->count++;
}

cw_client_pending_t* cw_client_table_remove(cw_client_table_t* t, uint64_t id) {
  cw_client_pending_t** slot = cw__table_slot(t, id);
  cw_client_pending_t* p = *slot;
  if (p) {
    *slot = p->next;
    p->next = NULL;
    t->count--;
  }
  return p;
}

cw_client_pending_t* cw_client_table_new_record(cw_client_table_t* t) {
  cw_client_pending_t* p = t->spare;
  if (!p) return calloc(1, sizeof(*p));
  t->spare = p->next;
  t->num_spare--;
  cw_prefetch_write(t->spare, sizeof(*p));  // the next request's record
  memset(p, 0, sizeof(*p));
  return p;
}

void cw_client_table_recycle(cw_client_table_t* t, cw_client_pending_t* p) {
  if (t->num_spare >= CW__MAX_SPARE) {
    free(p);
    return;
  }
  p->next = t->spare;
  t->spare = p;
  t->num_spare++;
}

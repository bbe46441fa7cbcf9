// Threads for blocking work (see cw_pool.h).
#include "cw_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cw__task_s {
  struct cw__task_s* next;
  cw_pool_fn fn;
  void* user;
} cw__task_t;

struct cw_pool_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cw__task_t* head;
  cw__task_t* tail;
  size_t queued;   // tasks in the queue
  size_t idle;     // threads waiting for a task
  size_t max_threads;
  pthread_t* threads;
  size_t num_threads, cap_threads;
  bool stopping;
  char name[16];
};

static void* cw__main(void* arg) {
  cw_pool_t* p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->head && !p->stopping) {
      p->idle++;
      pthread_cond_wait(&p->cv, &p->mu);
      p->idle--;
    }
    cw__task_t* t = p->head;
    if (!t) break;  // stopping, and nothing left to run
    p->head = t->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    pthread_mutex_unlock(&p->mu);
    t->fn(t->user);
    free(t);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

cw_status_t cw_pool_create(const char* name, size_t max_threads, cw_pool_t** out) {
  *out = NULL;
  cw_pool_t* p = calloc(1, sizeof(*p));
  if (!p) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a thread pool");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->max_threads = max_threads ? max_threads : 1;
  snprintf(p->name, sizeof(p->name), "%s", name ? name : "cw-pool");
  *out = p;
  return cw_ok_status();
}

// Starts one more thread; the caller holds mu. False when it cannot.
static bool cw__grow(cw_pool_t* p) {
  if (p->num_threads >= p->max_threads) return false;
  if (p->num_threads == p->cap_threads) {
    size_t cap = p->cap_threads ? 2 * p->cap_threads : 4;
    pthread_t* grown = realloc(p->threads, cap * sizeof(*grown));
    if (!grown) return false;
    p->threads = grown;
    p->cap_threads = cap;
  }
  if (pthread_create(&p->threads[p->num_threads], NULL, cw__main, p) != 0) return false;
  pthread_setname_np(p->threads[p->num_threads], p->name);
  p->num_threads++;
  return true;
}

cw_status_t cw_pool_submit(cw_pool_t* p, cw_pool_fn fn, void* user) {
  cw__task_t* t = malloc(sizeof(*t));
  if (!t) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a task of %s", p->name);
  t->next = NULL;
  t->fn = fn;
  t->user = user;
  pthread_mutex_lock(&p->mu);
  // Every queued task needs a thread of its own unless one is idle for it.
  if (p->idle <= p->queued && !cw__grow(p) && p->num_threads == 0) {
    pthread_mutex_unlock(&p->mu);
    free(t);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "%s: cannot start a thread", p->name);
  }
  if (p->tail) p->tail->next = t;
  else p->head = t;
  p->tail = t;
  p->queued++;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return cw_ok_status();
}

size_t cw_pool_threads(cw_pool_t* p) {
  pthread_mutex_lock(&p->mu);
  size_t n = p->num_threads;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void cw_pool_release(cw_pool_t* p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  // No new thread starts now (only submit starts them, and nobody may submit
  // while releasing), so the array is stable.
  for (size_t i = 0; i < p->num_threads; ++i) pthread_join(p->threads[i], NULL);
  free(p->threads);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

// cw_gangplugin: a test PJRT plugin whose programs rendezvous across
// processes, so that "gang order" (every process of an island runs launches
// in the same order) can be tested without a multi-process vendor plugin.
//
// It wraps XLA's CPU plugin: the inner table is copied and a few slots are
// replaced. Programs in format "cwgang" ("allreduce_sum f32[N] TAG") are
// ours; everything else goes to the inner plugin. Ranks meet in a shared
// file (CW_GANG_DIR/gang.shm). See docs/gangplugin.md.
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cw_pjrt_c_api.h"
#include "cw_time.h"

#define CW_GANG_FORMAT "cwgang"
#define CW_GANG_MAGIC "CWGANG1\n"
#define CW_GANG_MAX_N 65536
#define CW_GANG_MAX_TAG 63
#define CW_GANG_MAX_SIZE 64
// Rounds a rank may post ahead of the slowest rank's reading: as deep as XLA's
// CPU plugin's queue per device (32), above the worker's bound on launches in
// flight (16), so that Execute, like a device, does not block the worker's loop.
#define CW_GANG_RING 32

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared-memory counters must be lock-free");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex waits on a counter's low half");

const PJRT_Api* GetPjrtApi(void);

// ---- Errors and the registry of our own objects ------------------------------

// Inner errors and executables are opaque to us, so every object we hand out
// is recorded here; slots that receive one answer themselves, others forward.
typedef enum { CW__ERROR = 1, CW__EXE = 2 } cw__kind_t;

typedef struct cw__reg_s {
  const void* obj;
  cw__kind_t kind;
  struct cw__reg_s* next;
} cw__reg_t;

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static cw__reg_t* g_reg;

static int cw__reg_add(const void* obj, cw__kind_t kind) {
  cw__reg_t* r = malloc(sizeof(*r));
  if (!r) return -1;
  pthread_mutex_lock(&g_reg_mu);
  *r = (cw__reg_t){obj, kind, g_reg};
  g_reg = r;
  pthread_mutex_unlock(&g_reg_mu);
  return 0;
}

static int cw__reg_has(const void* obj, cw__kind_t kind) {
  pthread_mutex_lock(&g_reg_mu);
  const cw__reg_t* r = g_reg;
  while (r && !(r->obj == obj && r->kind == kind)) r = r->next;
  pthread_mutex_unlock(&g_reg_mu);
  return r != NULL;
}

static void cw__reg_remove(const void* obj) {
  pthread_mutex_lock(&g_reg_mu);
  for (cw__reg_t** p = &g_reg; *p; p = &(*p)->next) {
    if ((*p)->obj == obj) {
      cw__reg_t* r = *p;
      *p = r->next;
      free(r);
      break;
    }
  }
  pthread_mutex_unlock(&g_reg_mu);
}

typedef struct cw__error_s {
  const PJRT_Error_FunctionTable* vtable;  // first, as the ABI lays errors out
  PJRT_Error_Code code;
  size_t size;
  char message[];
} cw__error_t;

static cw__error_t g_oom_error;

static void cw__vt_destroy(PJRT_Error* e) {
  if (!e || e == (PJRT_Error*)&g_oom_error) return;
  cw__reg_remove(e);
  free(e);
}

static void cw__vt_message(const PJRT_Error* e, const char** msg, size_t* size) {
  *msg = ((const cw__error_t*)e)->message;
  *size = ((const cw__error_t*)e)->size;
}

static PJRT_Error_Code cw__vt_code(const PJRT_Error* e) { return ((const cw__error_t*)e)->code; }

static void cw__vt_payloads(const PJRT_Error* e, PJRT_Error_PayloadVisitor v, void* arg) {}

static const PJRT_Error_FunctionTable cw__error_vtable = {
    .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable, for_each_payload),
    .instance_size = sizeof(cw__error_t),
    .destroy = cw__vt_destroy,
    .message = cw__vt_message,
    .get_code = cw__vt_code,
    .for_each_payload = cw__vt_payloads,
};

// Returned when even an error cannot be allocated; never freed.
static cw__error_t g_oom_error = {&cw__error_vtable, PJRT_Error_Code_RESOURCE_EXHAUSTED, 0};

__attribute__((format(printf, 2, 3))) static PJRT_Error* cw__err(PJRT_Error_Code code,
                                                                 const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  size_t size = n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
  cw__error_t* e = malloc(sizeof(*e) + size + 1);
  if (!e) return (PJRT_Error*)&g_oom_error;
  *e = (cw__error_t){&cw__error_vtable, code, size};
  memcpy(e->message, buf, size);
  e->message[size] = '\0';
  if (cw__reg_add(e, CW__ERROR)) {
    free(e);
    return (PJRT_Error*)&g_oom_error;
  }
  return (PJRT_Error*)e;
}

static int cw__is_ours(const PJRT_Error* e) {
  return e == (const PJRT_Error*)&g_oom_error || cw__reg_has(e, CW__ERROR);
}

// ---- Tables -------------------------------------------------------------------

static PJRT_Api g_inner;  // the inner plugin's table, as it gave it
static PJRT_Api g_api;    // what we hand out
static char g_load_error[1024];

static void cw__error_destroy(PJRT_Error_Destroy_Args* a) {
  if (!a->error || a->error == (PJRT_Error*)&g_oom_error) return;
  if (cw__is_ours(a->error)) cw__vt_destroy(a->error);
  else g_inner.PJRT_Error_Destroy(a);
}

static void cw__error_message(PJRT_Error_Message_Args* a) {
  if (cw__is_ours(a->error)) cw__vt_message(a->error, &a->message, &a->message_size);
  else g_inner.PJRT_Error_Message(a);
}

static PJRT_Error* cw__error_get_code(PJRT_Error_GetCode_Args* a) {
  if (!cw__is_ours(a->error)) return g_inner.PJRT_Error_GetCode(a);
  a->code = cw__vt_code(a->error);
  return NULL;
}

// Zeroed args of type T with struct_size set, for calls into the inner plugin.
#define CW__ARGS(T, var)        \
  T var;                        \
  memset(&var, 0, sizeof(var)); \
  var.struct_size = sizeof(T)

// ---- Clients --------------------------------------------------------------------

// What one rank posts for one round.
typedef struct cw__entry_s {
  uint64_t round;  // which round the entry holds: a rank that skipped one is caught
  uint64_t fingerprint;
  int64_t launch_id;
  uint32_t n;
  char tag[CW_GANG_MAX_TAG + 1];
  float data[CW_GANG_MAX_N];
} cw__entry_t;

// One rank's slot in the shared rendezvous file: round r is in ring[r % RING].
typedef struct cw__slot_s {
  _Atomic uint64_t posted;    // last round whose entry is written
  _Atomic uint64_t done;      // last round this rank finished reading
  _Atomic uint32_t sleepers;  // ranks' threads in a futex wait on this slot's counters
  cw__entry_t ring[CW_GANG_RING];
} cw__slot_t;

struct cw__job_s;

// Our state for one inner client, found by the inner client pointer.
typedef struct cw__client_s {
  PJRT_Client* inner;
  int rank, size, timeout_ms;
  cw__slot_t* slots;  // mmap'd, `size` of them
  FILE* log;          // written by the executor thread only
  pthread_mutex_t mu;  // posts rounds and queues their jobs in the order of Execute calls
  uint64_t round;
  // Jobs posted and not yet met, oldest first; the executor thread meets them.
  pthread_mutex_t queue_mu;
  pthread_cond_t queue_cv;
  struct cw__job_s *head, *tail;
  bool has_thread;
  pthread_t thread;
  float* sum;  // the executor's, CW_GANG_MAX_N floats
  _Atomic bool stopping;  // client destroy: rounds not met fail at once
  PJRT_Device* const* devices;  // owned by the inner client
  PJRT_Memory** memories;       // each device's default memory (owned by the inner client)
  size_t num_devices;
  struct cw__client_s* next;
} cw__client_t;

static pthread_mutex_t g_clients_mu = PTHREAD_MUTEX_INITIALIZER;
static cw__client_t* g_clients;

static cw__client_t* cw__client_find(const PJRT_Client* inner) {
  pthread_mutex_lock(&g_clients_mu);
  cw__client_t* c = g_clients;
  while (c && c->inner != inner) c = c->next;
  pthread_mutex_unlock(&g_clients_mu);
  return c;
}

static PJRT_Error* cw__executor_start(cw__client_t* c);
static void cw__executor_stop(cw__client_t* c);

static void cw__client_free(cw__client_t* c) {
  cw__executor_stop(c);
  if (c->slots) munmap(c->slots, (size_t)c->size * sizeof(cw__slot_t));
  if (c->log) fclose(c->log);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->queue_mu);
  pthread_cond_destroy(&c->queue_cv);
  free(c->sum);
  free(c->memories);
  free(c);
}

// Strict decimal integer in [lo, hi] from `name`, or an error naming it.
static PJRT_Error* cw__env_int(const char* name, long lo, long hi, long dflt, int* out) {
  const char* s = getenv(name);
  if (!s || !*s) {
    if (dflt >= lo) {
      *out = (int)dflt;
      return NULL;
    }
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_gangplugin: %s is not set", name);
  }
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cw_gangplugin: %s='%s' is not an integer in [%ld, %ld]", name, s, lo, hi);
  }
  *out = (int)v;
  return NULL;
}

// Reads the CW_GANG_* settings and maps the rendezvous file.
static PJRT_Error* cw__client_setup(cw__client_t* c) {
  const char* dir = getenv("CW_GANG_DIR");
  if (!dir || !*dir) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_gangplugin: CW_GANG_DIR is not set");
  }
  PJRT_Error* e = cw__env_int("CW_GANG_SIZE", 1, CW_GANG_MAX_SIZE, -1, &c->size);
  if (!e) e = cw__env_int("CW_GANG_RANK", 0, c->size - 1, -1, &c->rank);
  if (!e) e = cw__env_int("CW_GANG_TIMEOUT_MS", 1, 3600000, 3000, &c->timeout_ms);
  if (e) return e;
  char path[4096];
  snprintf(path, sizeof(path), "%s/gang.shm", dir);
  int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_gangplugin: CW_GANG_DIR: open %s: %s",
                   path, strerror(errno));
  }
  // Every rank grows the file to the same size; growing is idempotent and the
  // new pages read as zero, so ranks may race here.
  size_t bytes = (size_t)c->size * sizeof(cw__slot_t);
  struct stat st;
  int rc = fstat(fd, &st);
  if (!rc && (size_t)st.st_size < bytes) rc = ftruncate(fd, (off_t)bytes);
  void* m = rc ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (m == MAP_FAILED) {
    return cw__err(PJRT_Error_Code_INTERNAL, "cw_gangplugin: mapping %s: %s", path, strerror(err));
  }
  c->slots = m;
  snprintf(path, sizeof(path), "%s/rank%d.log", dir, c->rank);
  c->log = fopen(path, "ae");
  if (!c->log) {
    return cw__err(PJRT_Error_Code_INTERNAL, "cw_gangplugin: opening %s: %s", path,
                   strerror(errno));
  }
  return NULL;
}

// Every device's default memory, where Execute makes its outputs.
static PJRT_Error* cw__client_memories(cw__client_t* c) {
  c->memories = calloc(c->num_devices ? c->num_devices : 1, sizeof(*c->memories));
  if (!c->memories) return (PJRT_Error*)&g_oom_error;
  for (size_t d = 0; d < c->num_devices; ++d) {
    CW__ARGS(PJRT_Device_DefaultMemory_Args, dm);
    dm.device = c->devices[d];
    PJRT_Error* e = g_inner.PJRT_Device_DefaultMemory(&dm);
    if (e) return e;
    c->memories[d] = dm.memory;
  }
  return NULL;
}

static PJRT_Error* cw__client_create(PJRT_Client_Create_Args* a) {
  cw__client_t* c = calloc(1, sizeof(*c));
  if (!c) return (PJRT_Error*)&g_oom_error;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->queue_mu, NULL);
  pthread_cond_init(&c->queue_cv, NULL);
  PJRT_Error* e = cw__client_setup(c);
  if (!e) e = g_inner.PJRT_Client_Create(a);  // options go through unchanged
  if (e) {
    cw__client_free(c);
    return e;
  }
  c->inner = a->client;
  CW__ARGS(PJRT_Client_AddressableDevices_Args, d);
  d.client = c->inner;
  e = g_inner.PJRT_Client_AddressableDevices(&d);
  if (!e) {
    c->devices = d.addressable_devices;
    c->num_devices = d.num_addressable_devices;
    e = cw__client_memories(c);
    if (!e) e = cw__executor_start(c);
  }
  if (e) {
    CW__ARGS(PJRT_Client_Destroy_Args, x);
    x.client = c->inner;
    PJRT_Error* e2 = g_inner.PJRT_Client_Destroy(&x);
    if (e2) g_api.PJRT_Error_Destroy(&(PJRT_Error_Destroy_Args){.error = e2});
    a->client = NULL;
    cw__client_free(c);
    return e;
  }
  pthread_mutex_lock(&g_clients_mu);
  c->next = g_clients;
  g_clients = c;
  pthread_mutex_unlock(&g_clients_mu);
  return NULL;
}

static PJRT_Error* cw__client_destroy(PJRT_Client_Destroy_Args* a) {
  pthread_mutex_lock(&g_clients_mu);
  cw__client_t* c = NULL;
  for (cw__client_t** p = &g_clients; *p; p = &(*p)->next) {
    if ((*p)->inner == a->client) {
      c = *p;
      *p = c->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_clients_mu);
  if (c) cw__client_free(c);
  return g_inner.PJRT_Client_Destroy(a);
}

// The rank is the process index: that is where multi-process plugins say
// which process of the island this is.
static PJRT_Error* cw__client_process_index(PJRT_Client_ProcessIndex_Args* a) {
  const cw__client_t* c = cw__client_find(a->client);
  if (!c) return g_inner.PJRT_Client_ProcessIndex(a);
  a->process_index = c->rank;
  return NULL;
}

// ---- Executables ------------------------------------------------------------------

// One object serves as both PJRT_LoadedExecutable and PJRT_Executable
// (GetExecutable returns it with one more reference).
typedef struct cw__exe_s {
  cw__client_t* client;
  _Atomic int refs;
  uint32_t n;
  char tag[CW_GANG_MAX_TAG + 1];
  char* code;  // the program text, NUL-terminated
  size_t code_size;
  uint64_t fingerprint;
  char fingerprint_hex[17];
  char name[8 + CW_GANG_MAX_TAG];
  int64_t dims[1];
  size_t dim_sizes[1];
  PJRT_Buffer_Type types[1];
} cw__exe_t;

static const char* const g_memory_kinds[1] = {"device"};
static const size_t g_memory_kind_sizes[1] = {6};

static uint64_t cw__fnv1a(const char* s, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

// Strict parse of "allreduce_sum f32[N] TAG" (single spaces, nothing else).
static PJRT_Error* cw__parse(const char* code, size_t size, uint32_t* out_n, char* out_tag) {
  static const char op[] = "allreduce_sum ";
  static const char ty[] = "f32[";
  const char* p = code;
  const char* end = code + size;
  if (size < sizeof(op) - 1 || memcmp(p, op, sizeof(op) - 1)) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang program '%.*s': must start with 'allreduce_sum ' (the only operation)",
                   (int)(size > 80 ? 80 : size), code);
  }
  p += sizeof(op) - 1;
  if (end - p < (ptrdiff_t)sizeof(ty) - 1 || memcmp(p, ty, sizeof(ty) - 1)) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang program: expected 'f32[' after 'allreduce_sum ' (the only type)");
  }
  p += sizeof(ty) - 1;
  uint64_t n = 0;
  const char* digits = p;
  while (p < end && isdigit((unsigned char)*p) && n <= CW_GANG_MAX_N) {
    n = n * 10 + (uint64_t)(*p++ - '0');
  }
  if (p == digits || p >= end || *p != ']' || n < 1 || n > CW_GANG_MAX_N) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang program: the element count must be a decimal 1..%d followed by ']'",
                   CW_GANG_MAX_N);
  }
  p++;
  if (p >= end || *p != ' ') {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang program: expected ' TAG' after 'f32[%" PRIu64 "]'", n);
  }
  p++;
  size_t tl = (size_t)(end - p);
  int ok = tl >= 1 && tl <= CW_GANG_MAX_TAG;
  for (size_t i = 0; ok && i < tl; ++i) {
    ok = isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == '.' || p[i] == '-';
  }
  if (!ok) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang program: the tag must be 1..%d characters of [A-Za-z0-9_.-] and end "
                   "the text",
                   CW_GANG_MAX_TAG);
  }
  *out_n = (uint32_t)n;
  memcpy(out_tag, p, tl);
  out_tag[tl] = '\0';
  return NULL;
}

static PJRT_Error* cw__exe_create(cw__client_t* c, const char* code, size_t size,
                                  PJRT_LoadedExecutable** out) {
  cw__exe_t* x = calloc(1, sizeof(*x));
  if (!x) return (PJRT_Error*)&g_oom_error;
  PJRT_Error* e = cw__parse(code, size, &x->n, x->tag);
  if (!e && !(x->code = malloc(size + 1))) e = (PJRT_Error*)&g_oom_error;
  if (!e && cw__reg_add(x, CW__EXE)) e = (PJRT_Error*)&g_oom_error;
  if (e) {
    free(x->code);
    free(x);
    return e;
  }
  memcpy(x->code, code, size);
  x->code[size] = '\0';
  x->code_size = size;
  x->client = c;
  x->refs = 1;
  x->fingerprint = cw__fnv1a(code, size);
  snprintf(x->fingerprint_hex, sizeof(x->fingerprint_hex), "%016" PRIx64, x->fingerprint);
  snprintf(x->name, sizeof(x->name), "cwgang_%s", x->tag);
  x->dims[0] = x->n;
  x->dim_sizes[0] = 1;
  x->types[0] = PJRT_Buffer_Type_F32;
  *out = (PJRT_LoadedExecutable*)x;
  return NULL;
}

static void cw__exe_release(cw__exe_t* x) {
  if (atomic_fetch_sub(&x->refs, 1) != 1) return;
  cw__reg_remove(x);
  free(x->code);
  free(x);
}

// Our executable behind `p`, or NULL when it is the inner plugin's.
static cw__exe_t* cw__exe(const void* p) { return cw__reg_has(p, CW__EXE) ? (cw__exe_t*)p : NULL; }

static cw__client_t* cw__client_or_err(PJRT_Client* inner, PJRT_Error** out_err) {
  cw__client_t* c = cw__client_find(inner);
  if (!c) *out_err = cw__err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_gangplugin: unknown client");
  return c;
}

// Compile options are ignored: a cwgang program always runs on every
// addressable device of the process.
static PJRT_Error* cw__client_compile(PJRT_Client_Compile_Args* a) {
  const PJRT_Program* pr = a->program;
  if (!pr || pr->format_size != strlen(CW_GANG_FORMAT) ||
      memcmp(pr->format, CW_GANG_FORMAT, pr->format_size)) {
    return g_inner.PJRT_Client_Compile(a);
  }
  PJRT_Error* e = NULL;
  cw__client_t* c = cw__client_or_err(a->client, &e);
  return c ? cw__exe_create(c, pr->code ? pr->code : "", pr->code_size, &a->executable) : e;
}

static PJRT_Error* cw__deserialize(PJRT_Executable_DeserializeAndLoad_Args* a) {
  size_t m = strlen(CW_GANG_MAGIC);
  if (a->serialized_executable_size < m || memcmp(a->serialized_executable, CW_GANG_MAGIC, m)) {
    return g_inner.PJRT_Executable_DeserializeAndLoad(a);
  }
  PJRT_Error* e = NULL;
  cw__client_t* c = cw__client_or_err(a->client, &e);
  return c ? cw__exe_create(c, a->serialized_executable + m, a->serialized_executable_size - m,
                            &a->loaded_executable)
           : e;
}

static void cw__serialized_free(PJRT_SerializedExecutable* s) { free(s); }

static PJRT_Error* cw__serialize(PJRT_Executable_Serialize_Args* a) {
  const cw__exe_t* x = cw__exe(a->executable);
  if (!x) return g_inner.PJRT_Executable_Serialize(a);
  size_t m = strlen(CW_GANG_MAGIC);
  char* b = malloc(m + x->code_size);
  if (!b) return (PJRT_Error*)&g_oom_error;
  memcpy(b, CW_GANG_MAGIC, m);
  memcpy(b + m, x->code, x->code_size);
  a->serialized_bytes = b;
  a->serialized_bytes_size = m + x->code_size;
  a->serialized_executable = (PJRT_SerializedExecutable*)b;
  a->serialized_executable_deleter = cw__serialized_free;
  return NULL;
}

static PJRT_Error* cw__loaded_destroy(PJRT_LoadedExecutable_Destroy_Args* a) {
  cw__exe_t* x = cw__exe(a->executable);
  if (!x) return g_inner.PJRT_LoadedExecutable_Destroy(a);
  cw__exe_release(x);
  return NULL;
}

static PJRT_Error* cw__get_executable(PJRT_LoadedExecutable_GetExecutable_Args* a) {
  cw__exe_t* x = cw__exe(a->loaded_executable);
  if (!x) return g_inner.PJRT_LoadedExecutable_GetExecutable(a);
  atomic_fetch_add(&x->refs, 1);
  a->executable = (PJRT_Executable*)x;
  return NULL;
}

static PJRT_Error* cw__executable_destroy(PJRT_Executable_Destroy_Args* a) {
  cw__exe_t* x = cw__exe(a->executable);
  if (!x) return g_inner.PJRT_Executable_Destroy(a);
  cw__exe_release(x);
  return NULL;
}

static PJRT_Error* cw__addressable_devices(PJRT_LoadedExecutable_AddressableDevices_Args* a) {
  const cw__exe_t* x = cw__exe(a->executable);
  if (!x) return g_inner.PJRT_LoadedExecutable_AddressableDevices(a);
  a->addressable_devices = x->client->devices;
  a->num_addressable_devices = x->client->num_devices;
  return NULL;
}

// Slots that only read metadata: answer for ours, forward the rest.
#define CW__META(fn, Slot, body)                         \
  static PJRT_Error* fn(Slot##_Args* a) {                \
    const cw__exe_t* x = cw__exe(a->executable);         \
    if (!x) return g_inner.Slot(a);                      \
    body;                                                \
    return NULL;                                         \
  }

CW__META(cw__name, PJRT_Executable_Name,
         (a->executable_name = x->name, a->executable_name_size = strlen(x->name)))
CW__META(cw__num_outputs, PJRT_Executable_NumOutputs, a->num_outputs = 1)
CW__META(cw__num_replicas, PJRT_Executable_NumReplicas, a->num_replicas = 1)
CW__META(cw__num_partitions, PJRT_Executable_NumPartitions,
         a->num_partitions = x->client->num_devices)
CW__META(cw__output_types, PJRT_Executable_OutputElementTypes,
         (a->output_types = (PJRT_Buffer_Type*)x->types, a->num_output_types = 1))
CW__META(cw__output_dims, PJRT_Executable_OutputDimensions,
         (a->num_outputs = 1, a->dims = x->dims, a->dim_sizes = x->dim_sizes))
CW__META(cw__output_memory_kinds, PJRT_Executable_OutputMemoryKinds,
         (a->num_outputs = 1, a->memory_kinds = g_memory_kinds,
          a->memory_kind_sizes = g_memory_kind_sizes))
CW__META(cw__fingerprint, PJRT_Executable_Fingerprint,
         (a->executable_fingerprint = x->fingerprint_hex, a->executable_fingerprint_size = 16))

static PJRT_Error* cw__optimized_program(PJRT_Executable_OptimizedProgram_Args* a) {
  if (!cw__exe(a->executable)) return g_inner.PJRT_Executable_OptimizedProgram(a);
  return cw__err(PJRT_Error_Code_UNIMPLEMENTED, "cwgang programs have no optimized HLO program");
}

static PJRT_Error* cw__memory_stats(PJRT_Executable_GetCompiledMemoryStats_Args* a) {
  if (!cw__exe(a->executable)) return g_inner.PJRT_Executable_GetCompiledMemoryStats(a);
  return cw__err(PJRT_Error_Code_UNIMPLEMENTED, "cwgang programs have no compiled memory stats");
}

// ---- Rounds: local sums and the rendezvous -------------------------------------------

static void cw__inner_error_free(PJRT_Error* e) {
  if (e) g_api.PJRT_Error_Destroy(&(PJRT_Error_Destroy_Args){.error = e});
}

// Awaits and destroys an inner event (NULL: nothing to wait for).
static PJRT_Error* cw__await(PJRT_Event* ev) {
  if (!ev) return NULL;
  CW__ARGS(PJRT_Event_Await_Args, w);
  w.event = ev;
  PJRT_Error* e = g_inner.PJRT_Event_Await(&w);
  CW__ARGS(PJRT_Event_Destroy_Args, d);
  d.event = ev;
  cw__inner_error_free(g_inner.PJRT_Event_Destroy(&d));
  return e;
}

// Checks device d's argument and adds its values into acc.
static PJRT_Error* cw__accumulate(const cw__exe_t* x, size_t d, PJRT_Buffer* b, float* acc,
                                  float* tmp) {
  if (!b) return cw__err(PJRT_Error_Code_INVALID_ARGUMENT, "cwgang: device %zu: no argument", d);
  CW__ARGS(PJRT_Buffer_ElementType_Args, t);
  t.buffer = b;
  CW__ARGS(PJRT_Buffer_Dimensions_Args, dm);
  dm.buffer = b;
  PJRT_Error* e = g_inner.PJRT_Buffer_ElementType(&t);
  if (!e) e = g_inner.PJRT_Buffer_Dimensions(&dm);
  if (e) return e;
  if (t.type != PJRT_Buffer_Type_F32 || dm.num_dims != 1 || dm.dims[0] != (int64_t)x->n) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang %s: device %zu: expected an f32[%u] argument, got type %d with %zu "
                   "dims (first %" PRId64 ")",
                   x->tag, d, x->n, (int)t.type, dm.num_dims, dm.num_dims ? dm.dims[0] : 0);
  }
  CW__ARGS(PJRT_Buffer_ReadyEvent_Args, r);
  r.buffer = b;
  e = g_inner.PJRT_Buffer_ReadyEvent(&r);
  if (!e) e = cw__await(r.event);
  if (e) return e;
  CW__ARGS(PJRT_Buffer_ToHostBuffer_Args, h);
  h.src = b;
  h.dst = tmp;
  h.dst_size = (size_t)x->n * sizeof(float);
  e = g_inner.PJRT_Buffer_ToHostBuffer(&h);
  if (!e) e = cw__await(h.event);
  if (e) return e;
  for (uint32_t i = 0; i < x->n; ++i) acc[i] += tmp[i];
  return NULL;
}

// The low 32 bits of a slot counter, where futex waits: the counters are
// little-endian 64-bit words in memory shared between the ranks' processes.
static uint32_t* cw__futex_word(const _Atomic uint64_t* counter) {
  return (uint32_t*)(uintptr_t)counter;
}

// Publishes a counter of `slot` and wakes the ranks waiting on it. A futex,
// not a sleep loop: the wait is what a real collective's hardware would take,
// and a 50 us nanosleep turned into hundreds of microseconds on a busy machine,
// which island_bench then counted as causeway's. The wake, a system call, only
// when a thread sleeps on the slot: both sides are sequentially consistent, so
// a sleeper that registered after this load sees the new value before it waits.
static void cw__post(cw__slot_t* slot, _Atomic uint64_t* counter, uint64_t v) {
  atomic_store(counter, v);
  if (atomic_load(&slot->sleepers) == 0) return;
  syscall(SYS_futex, cw__futex_word(counter), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

#define CW__WAIT_STOPPED (-2)

// Waits until every rank's counter (posted or done) is >= want; returns -1,
// the rank that is behind at the timeout, or CW__WAIT_STOPPED when the client
// is being destroyed.
static int cw__wait_all(const cw__client_t* c, int posted, uint64_t want) {
  int64_t deadline = cw_time_now_ms() + c->timeout_ms;
  for (int k = 0; k < c->size;) {
    cw__slot_t* s = &c->slots[k];
    _Atomic uint64_t* counter = posted ? &s->posted : &s->done;
    uint64_t v = atomic_load_explicit(counter, memory_order_acquire);
    if (v >= want) {
      k++;
      continue;
    }
    if (atomic_load(&c->stopping)) return CW__WAIT_STOPPED;
    if (cw_time_now_ms() >= deadline) return k;
    // Sleeps until the word changes (or 1 ms: the deadline is checked again),
    // registered first so that the poster wakes it (cw__post).
    atomic_fetch_add(&s->sleepers, 1);
    v = atomic_load(counter);
    if (v < want) {
      struct timespec ms = {0, 1000000};
      syscall(SYS_futex, cw__futex_word(counter), FUTEX_WAIT, (uint32_t)v, &ms, NULL, 0);
    }
    atomic_fetch_sub(&s->sleepers, 1);
  }
  return -1;
}

// Describes what every rank posted for round r, for the mismatch error.
static void cw__describe(const cw__client_t* c, uint64_t r, char* buf, size_t cap) {
  size_t len = 0;
  for (int k = 0; k < c->size && len < cap; ++k) {
    const cw__entry_t* en = &c->slots[k].ring[r % CW_GANG_RING];
    int n = en->round == r
                ? snprintf(buf + len, cap - len,
                           "%srank %d runs allreduce_sum f32[%u] %.*s (launch %" PRId64 ")",
                           k ? ", " : "", k, en->n, CW_GANG_MAX_TAG, en->tag, en->launch_id)
                : snprintf(buf + len, cap - len,
                           "%srank %d posted round %" PRIu64 " in its place", k ? ", " : "", k,
                           en->round);
    if (n < 0) break;
    len += (size_t)n;
  }
}

// Posts this rank's part of round r: its program, launch and partial sum.
// Waits only while the ring is full, that is while a rank has not finished
// reading round r - RING. Called under c->mu, in the order of Execute calls.
static PJRT_Error* cw__post_round(cw__client_t* c, const cw__exe_t* x, uint64_t r,
                                  int64_t launch_id, const float* part) {
  if (r > CW_GANG_RING) {
    int late = cw__wait_all(c, 0, r - CW_GANG_RING);
    if (late >= 0) {
      return cw__err(PJRT_Error_Code_DEADLINE_EXCEEDED,
                     "gang rendezvous %" PRIu64 ": rank %d has not finished rendezvous %" PRIu64
                     " after %d ms",
                     r, late, r - CW_GANG_RING, c->timeout_ms);
    }
    if (late == CW__WAIT_STOPPED) {
      return cw__err(PJRT_Error_Code_CANCELLED, "gang rendezvous %" PRIu64 ": client destroyed",
                     r);
    }
  }
  cw__slot_t* me = &c->slots[c->rank];
  cw__entry_t* en = &me->ring[r % CW_GANG_RING];
  en->round = r;
  en->fingerprint = x->fingerprint;
  en->launch_id = launch_id;
  en->n = x->n;
  memcpy(en->tag, x->tag, sizeof(en->tag));
  memcpy(en->data, part, (size_t)x->n * sizeof(float));
  cw__post(me, &me->posted, r);
  return NULL;
}

// Meets round r: waits until every rank has posted it, checks that all run
// the same program and launch, and writes the sum over all ranks to `sum`.
// Marks the round read also after a failure, so the others are not left
// waiting on this rank.
static PJRT_Error* cw__meet(cw__client_t* c, const cw__exe_t* x, uint64_t r, int64_t launch_id,
                            float* sum) {
  PJRT_Error* e = NULL;
  int late = cw__wait_all(c, 1, r);
  if (late >= 0) {
    e = cw__err(PJRT_Error_Code_DEADLINE_EXCEEDED,
                "gang rendezvous %" PRIu64 ": rank %d has not arrived after %d ms", r, late,
                c->timeout_ms);
  } else if (late == CW__WAIT_STOPPED) {
    e = cw__err(PJRT_Error_Code_CANCELLED, "gang rendezvous %" PRIu64 ": client destroyed", r);
  }
  for (int k = 0; !e && k < c->size; ++k) {
    const cw__entry_t* en = &c->slots[k].ring[r % CW_GANG_RING];
    if (en->round != r || en->fingerprint != x->fingerprint || en->launch_id != launch_id ||
        en->n != x->n) {
      char what[2048];
      cw__describe(c, r, what, sizeof(what));
      e = cw__err(PJRT_Error_Code_FAILED_PRECONDITION,
                  "gang order violated at rendezvous %" PRIu64 ": %s", r, what);
    }
  }
  if (!e) {
    memset(sum, 0, (size_t)x->n * sizeof(float));
    for (int k = 0; k < c->size; ++k) {
      const float* part = c->slots[k].ring[r % CW_GANG_RING].data;
      for (uint32_t i = 0; i < x->n; ++i) sum[i] += part[i];
    }
  }
  cw__post(&c->slots[c->rank], &c->slots[c->rank].done, r);
  fprintf(c->log, "%" PRIu64 " %" PRId64 " %s %s\n", r, launch_id, x->tag, e ? "error" : "ok");
  fflush(c->log);
  return e;
}

// ---- The executor: rounds met off the caller's thread ------------------------------------

// One posted round waiting to be met: its outputs exist and are written
// (or fail) once it is.
typedef struct cw__job_s {
  cw__exe_t* x;  // a reference
  uint64_t round;
  int64_t launch_id;
  struct cw__job_s* next;
  PJRT_AsyncHostToDeviceTransferManager* managers[];  // one per device
} cw__job_t;

// Writes `sum` into every output, or fails them all with `e` (consumed).
static void cw__job_finish(cw__client_t* c, cw__job_t* j, PJRT_Error* e, const float* sum) {
  PJRT_Error_Code code = PJRT_Error_Code_INTERNAL;
  const char* msg = "";
  size_t msg_size = 0;
  if (e) {
    PJRT_Error_GetCode_Args gc = {.struct_size = sizeof(gc), .error = e};
    cw__inner_error_free(g_api.PJRT_Error_GetCode(&gc));
    code = gc.code;
    PJRT_Error_Message_Args m = {.struct_size = sizeof(m), .error = e};
    g_api.PJRT_Error_Message(&m);
    msg = m.message;
    msg_size = m.message_size;
  }
  for (size_t d = 0; d < c->num_devices; ++d) {
    if (e) {
      CW__ARGS(PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args, se);
      se.transfer_manager = j->managers[d];
      se.error_code = code;
      se.error_message = msg;
      se.error_message_size = msg_size;
      cw__inner_error_free(g_inner.PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&se));
    } else {
      CW__ARGS(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, t);
      t.transfer_manager = j->managers[d];
      t.data = sum;
      t.transfer_size = (int64_t)j->x->n * (int64_t)sizeof(float);
      t.is_last_transfer = true;
      PJRT_Error* te = g_inner.PJRT_AsyncHostToDeviceTransferManager_TransferData(&t);
      if (!te) te = cw__await(t.done_with_h2d_transfer);  // `sum` is read until then
      cw__inner_error_free(te);
    }
    CW__ARGS(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args, md);
    md.transfer_manager = j->managers[d];
    cw__inner_error_free(g_inner.PJRT_AsyncHostToDeviceTransferManager_Destroy(&md));
  }
  if (e) g_api.PJRT_Error_Destroy(&(PJRT_Error_Destroy_Args){.error = e});
}

static void* cw__executor(void* arg) {
  cw__client_t* c = arg;
  // Named apart from the worker's own threads, so that profiles and
  // island_bench's accounting can tell the stand-in's rendezvous from causeway.
  pthread_setname_np(pthread_self(), "cw-gang");
  for (;;) {
    pthread_mutex_lock(&c->queue_mu);
    while (!c->head && !atomic_load(&c->stopping)) pthread_cond_wait(&c->queue_cv, &c->queue_mu);
    cw__job_t* j = c->head;
    if (j && !(c->head = j->next)) c->tail = NULL;
    pthread_mutex_unlock(&c->queue_mu);
    if (!j) break;  // stopping, and nothing left
    PJRT_Error* e = cw__meet(c, j->x, j->round, j->launch_id, c->sum);
    cw__job_finish(c, j, e, c->sum);
    cw__exe_release(j->x);
    free(j);
  }
  return NULL;
}

static PJRT_Error* cw__executor_start(cw__client_t* c) {
  if (!(c->sum = malloc(CW_GANG_MAX_N * sizeof(float)))) return (PJRT_Error*)&g_oom_error;
  int rc = pthread_create(&c->thread, NULL, cw__executor, c);
  if (rc) {
    return cw__err(PJRT_Error_Code_RESOURCE_EXHAUSTED,
                   "cw_gangplugin: starting the executor thread: %s", strerror(rc));
  }
  c->has_thread = true;
  return NULL;
}

// Rounds still waiting for another rank fail with CANCELLED. An Execute in
// flight finishes first (one waiting for ring space fails). Not from the
// executor thread, i.e. not from a callback of an output's event.
static void cw__executor_stop(cw__client_t* c) {
  if (!c->has_thread) return;
  pthread_mutex_lock(&c->queue_mu);
  atomic_store(&c->stopping, true);
  pthread_cond_broadcast(&c->queue_cv);
  pthread_mutex_unlock(&c->queue_mu);
  pthread_mutex_lock(&c->mu);  // no Execute posts or queues after this
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  c->has_thread = false;
}

// ---- Execute ----------------------------------------------------------------------

// Device d's output, made now and written when its round is met: a buffer
// of the inner plugin behind a host-to-device transfer manager.
static PJRT_Error* cw__output(const cw__exe_t* x, size_t d,
                              PJRT_AsyncHostToDeviceTransferManager** out_manager,
                              PJRT_Buffer** out, PJRT_Event** out_event) {
  const cw__client_t* c = x->client;
  *out = NULL;
  if (out_event) *out_event = NULL;
  PJRT_ShapeSpec spec;
  memset(&spec, 0, sizeof(spec));
  spec.struct_size = sizeof(spec);
  spec.dims = x->dims;
  spec.num_dims = 1;
  spec.element_type = PJRT_Buffer_Type_F32;
  CW__ARGS(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, h);
  h.client = c->inner;
  h.shape_specs = &spec;
  h.num_shape_specs = 1;
  h.memory = c->memories[d];
  PJRT_Error* e = g_inner.PJRT_Client_CreateBuffersForAsyncHostToDevice(&h);
  if (e) return e;
  *out_manager = h.transfer_manager;
  CW__ARGS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, rb);
  rb.transfer_manager = h.transfer_manager;
  e = g_inner.PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&rb);
  if (e) return e;
  *out = rb.buffer_out;
  if (!out_event) return NULL;
  CW__ARGS(PJRT_Buffer_ReadyEvent_Args, r);
  r.buffer = rb.buffer_out;
  e = g_inner.PJRT_Buffer_ReadyEvent(&r);
  *out_event = r.event;
  return e;
}

// Undoes what cw__execute made before it failed: outputs, events, managers.
static void cw__outputs_free(PJRT_LoadedExecutable_Execute_Args* a, cw__job_t* j, size_t n) {
  for (size_t d = 0; d < n; ++d) {
    CW__ARGS(PJRT_Buffer_Destroy_Args, bd);
    bd.buffer = a->output_lists[d][0];
    if (bd.buffer) cw__inner_error_free(g_inner.PJRT_Buffer_Destroy(&bd));
    a->output_lists[d][0] = NULL;
    if (a->device_complete_events && a->device_complete_events[d]) {
      CW__ARGS(PJRT_Event_Destroy_Args, ed);
      ed.event = a->device_complete_events[d];
      cw__inner_error_free(g_inner.PJRT_Event_Destroy(&ed));
      a->device_complete_events[d] = NULL;
    }
    if (j->managers[d]) {
      CW__ARGS(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args, md);
      md.transfer_manager = j->managers[d];
      cw__inner_error_free(g_inner.PJRT_AsyncHostToDeviceTransferManager_Destroy(&md));
    }
  }
}

// Returns as a device does: the local sum and this rank's post happen now,
// in call order; the meeting with the other ranks happens on the executor
// thread, and the outputs (and their events) are ready once it is done.
static PJRT_Error* cw__execute(PJRT_LoadedExecutable_Execute_Args* a) {
  cw__exe_t* x = cw__exe(a->executable);
  if (!x) return g_inner.PJRT_LoadedExecutable_Execute(a);
  cw__client_t* c = x->client;
  if (a->execute_device) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang %s: runs on all devices, not on one execute_device", x->tag);
  }
  if (a->num_devices != c->num_devices || a->num_args != 1) {
    return cw__err(PJRT_Error_Code_INVALID_ARGUMENT,
                   "cwgang %s: expected %zu devices with 1 argument each, got %zu devices with "
                   "%zu arguments",
                   x->tag, c->num_devices, a->num_devices, a->num_args);
  }
  float* acc = calloc(2 * (size_t)x->n, sizeof(float));
  cw__job_t* j = calloc(1, sizeof(*j) + c->num_devices * sizeof(j->managers[0]));
  if (!acc || !j) {
    free(acc);
    free(j);
    return (PJRT_Error*)&g_oom_error;
  }
  PJRT_Error* e = NULL;
  for (size_t d = 0; !e && d < c->num_devices; ++d) {
    e = cw__accumulate(x, d, a->argument_lists[d][0], acc, acc + x->n);
  }
  size_t made = 0;
  for (; !e && made < c->num_devices; ++made) {
    PJRT_Event** ev = a->device_complete_events ? &a->device_complete_events[made] : NULL;
    e = cw__output(x, made, &j->managers[made], &a->output_lists[made][0], ev);
  }
  if (e) {
    // Partial outputs go: the caller gets an error and nothing to free.
    cw__outputs_free(a, j, made);
    free(acc);
    free(j);
    return e;
  }
  j->x = x;
  j->launch_id = a->options ? a->options->launch_id : 0;
  pthread_mutex_lock(&c->mu);
  j->round = ++c->round;
  e = cw__post_round(c, x, j->round, j->launch_id, acc);
  if (e) c->round--;  // not posted: the next Execute takes this round
  if (!e) {
    pthread_mutex_lock(&c->queue_mu);
    if (atomic_load(&c->stopping)) {
      e = cw__err(PJRT_Error_Code_CANCELLED,
                  "gang rendezvous %" PRIu64 ": client destroyed", j->round);
    } else {
      atomic_fetch_add(&x->refs, 1);
      if (c->tail) c->tail->next = j;
      else c->head = j;
      c->tail = j;
      pthread_cond_signal(&c->queue_cv);
    }
    pthread_mutex_unlock(&c->queue_mu);
  }
  pthread_mutex_unlock(&c->mu);
  free(acc);
  if (e) {
    cw__outputs_free(a, j, c->num_devices);
    free(j);
  }
  return e;
}

// ---- Loading ----------------------------------------------------------------------

static PJRT_Error* cw__init_failed(PJRT_Plugin_Initialize_Args* a) {
  return cw__err(PJRT_Error_Code_FAILED_PRECONDITION, "%s", g_load_error);
}

static PJRT_Error* cw__create_failed(PJRT_Client_Create_Args* a) {
  return cw__err(PJRT_Error_Code_FAILED_PRECONDITION, "%s", g_load_error);
}

static void cw__load(void) {
  const char* path = getenv("CW_GANG_INNER_PLUGIN");
  if (!path || !*path) path = getenv("CAUSEWAY_PJRT_PLUGIN");
  const PJRT_Api* inner = NULL;
  if (!path || !*path) {
    snprintf(g_load_error, sizeof(g_load_error),
             "cw_gangplugin: no inner plugin (set CW_GANG_INNER_PLUGIN or CAUSEWAY_PJRT_PLUGIN)");
  } else {
    // Stays loaded for the life of the process, as the inner plugin expects.
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CW_PJRT_GetPjrtApi_Fn get =
        lib ? (CW_PJRT_GetPjrtApi_Fn)(uintptr_t)dlsym(lib, CW_PJRT_GET_API_SYMBOL) : NULL;
    // Naming this library itself (CAUSEWAY_PJRT_PLUGIN often does) would recurse.
    if (get == GetPjrtApi) {
      snprintf(g_load_error, sizeof(g_load_error),
               "cw_gangplugin: the inner plugin %s is cw_gangplugin itself; set "
               "CW_GANG_INNER_PLUGIN to the vendor plugin",
               path);
      get = NULL;
    }
    inner = get ? get() : NULL;
    if (!inner && !g_load_error[0]) {
      snprintf(g_load_error, sizeof(g_load_error), "cw_gangplugin: cannot load inner plugin %s: %s",
               path, lib ? "no usable GetPjrtApi" : dlerror());
    }
  }
  if (inner) {
    size_t n = inner->struct_size < sizeof(g_inner) ? inner->struct_size : sizeof(g_inner);
    memcpy(&g_inner, inner, n);
    g_api = g_inner;
    g_api.struct_size = n;
  } else {
    // A table that loads, so the caller's first call reports why not.
    g_api.struct_size = sizeof(g_api);
    g_api.pjrt_api_version.struct_size = sizeof(g_api.pjrt_api_version);
    g_api.pjrt_api_version.major_version = CW_PJRT_API_MAJOR;
    g_api.pjrt_api_version.minor_version = CW_PJRT_API_MINOR;
    g_api.PJRT_Plugin_Initialize = cw__init_failed;
    g_api.PJRT_Client_Create = cw__create_failed;
  }
  g_api.PJRT_Error_Destroy = cw__error_destroy;
  g_api.PJRT_Error_Message = cw__error_message;
  g_api.PJRT_Error_GetCode = cw__error_get_code;
  if (!inner) return;
  g_api.PJRT_Client_Create = cw__client_create;
  g_api.PJRT_Client_Destroy = cw__client_destroy;
  g_api.PJRT_Client_ProcessIndex = cw__client_process_index;
  g_api.PJRT_Client_Compile = cw__client_compile;
  g_api.PJRT_Executable_DeserializeAndLoad = cw__deserialize;
  g_api.PJRT_Executable_Serialize = cw__serialize;
  g_api.PJRT_LoadedExecutable_Destroy = cw__loaded_destroy;
  g_api.PJRT_LoadedExecutable_GetExecutable = cw__get_executable;
  g_api.PJRT_LoadedExecutable_AddressableDevices = cw__addressable_devices;
  g_api.PJRT_LoadedExecutable_Execute = cw__execute;
  g_api.PJRT_Executable_Destroy = cw__executable_destroy;
  g_api.PJRT_Executable_Name = cw__name;
  g_api.PJRT_Executable_NumOutputs = cw__num_outputs;
  g_api.PJRT_Executable_NumReplicas = cw__num_replicas;
  g_api.PJRT_Executable_NumPartitions = cw__num_partitions;
  g_api.PJRT_Executable_OutputElementTypes = cw__output_types;
  g_api.PJRT_Executable_OutputDimensions = cw__output_dims;
  g_api.PJRT_Executable_OutputMemoryKinds = cw__output_memory_kinds;
  g_api.PJRT_Executable_Fingerprint = cw__fingerprint;
  g_api.PJRT_Executable_OptimizedProgram = cw__optimized_program;
  // Each slot the worker asks of an executable answers for ours: one
  // forwarded as is would hand the inner plugin a pointer it did not make.
  g_api.PJRT_Executable_GetCompiledMemoryStats = cw__memory_stats;
}

__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cw__load);
  return &g_api;
}

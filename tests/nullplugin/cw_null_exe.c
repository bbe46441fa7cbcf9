// The null plugin's executables: "cwnull" programs (see cw_nullplugin.c),
// and "mlir" ones through CW_NULL_COMPILER (cw_null_compiler.c), which carry
// the optimized HLO the compiler gave for them.
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_array.h"
#include "cw_nullplugin.h"
#include "cw_xla_options.h"

// One object is both the loaded executable and its PJRT_Executable
// (GetExecutable hands it out with one more reference).
typedef struct cw__exe_s {
  cw_null_client_t* client;
  _Atomic int refs;
  _Atomic bool deleted;
  bool checksum;
  size_t num_outputs;
  PJRT_Buffer_Type types[CW_NULL_MAX_OUTPUTS];
  size_t dim_sizes[CW_NULL_MAX_OUTPUTS];
  int64_t dims[CW_NULL_MAX_OUTPUTS * CW_NULL_MAX_RANK];  // concatenated, as the ABI has them
  size_t num_dims;
  const char* kinds[CW_NULL_MAX_OUTPUTS];
  size_t kind_sizes[CW_NULL_MAX_OUTPUTS];
  int64_t num_replicas, num_partitions;
  size_t num_devices;
  PJRT_Device** devices;  // addressable devices, in assignment order
  PJRT_LogicalDeviceIds* logical;  // each device's replica and partition
  char* code;             // the program text
  size_t code_size;
  char* hlo;  // the optimized program of an "mlir" one, else NULL
  size_t hlo_size;
  char hlo_format[32];
  char fingerprint[17];
  char name[32];
} cw__exe_t;

#define CW__EXE(p) ((cw__exe_t*)(p))

static uint64_t cw__fnv1a(uint64_t h, const unsigned char* s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    h = (h ^ s[i]) * 1099511628211ull;
  return h;
}
#define CW__FNV_BASIS 14695981039346656037ull

static void cw__exe_fingerprint(cw__exe_t* x, uint64_t fingerprint) {
  snprintf(x->fingerprint, sizeof(x->fingerprint), "%016" PRIx64, fingerprint);
  snprintf(x->name, sizeof(x->name), "cwnull_%.8s", x->fingerprint);
}

static void cw__exe_release(cw__exe_t* x) {
  if (!x || atomic_fetch_sub(&x->refs, 1) != 1) return;
  free(x->devices);
  free(x->logical);
  free(x->code);
  free(x->hlo);
  free(x);
}

// HLO's short names of the types programs may declare.
static const struct {
  const char* name;
  PJRT_Buffer_Type type;
} g_types[] = {
    {"pred", PJRT_Buffer_Type_PRED}, {"s8", PJRT_Buffer_Type_S8},
    {"s16", PJRT_Buffer_Type_S16},   {"s32", PJRT_Buffer_Type_S32},
    {"s64", PJRT_Buffer_Type_S64},   {"u8", PJRT_Buffer_Type_U8},
    {"u16", PJRT_Buffer_Type_U16},   {"u32", PJRT_Buffer_Type_U32},
    {"u64", PJRT_Buffer_Type_U64},   {"f16", PJRT_Buffer_Type_F16},
    {"bf16", PJRT_Buffer_Type_BF16}, {"f32", PJRT_Buffer_Type_F32},
    {"f64", PJRT_Buffer_Type_F64},   {"c64", PJRT_Buffer_Type_C64},
    {"c128", PJRT_Buffer_Type_C128},
};

const char* cw_null_type_name(PJRT_Buffer_Type t) {
  for (size_t i = 0; i < sizeof(g_types) / sizeof(g_types[0]); ++i) {
    if (g_types[i].type == t) return g_types[i].name;
  }
  return NULL;
}

static int cw__type_of(const char* name, size_t n) {
  for (size_t i = 0; i < sizeof(g_types) / sizeof(g_types[0]); ++i) {
    if (strlen(g_types[i].name) == n && !strncmp(g_types[i].name, name, n)) {
      return (int)g_types[i].type;
    }
  }
  return -1;
}

// Parses "TYPE[d,...] ... [zeros|checksum]" into x.
static PJRT_Error* cw__parse(cw__exe_t* x, const char* code, size_t size) {
  size_t i = 0;
  while (i < size) {
    while (i < size && (code[i] == ' ' || code[i] == '\n' || code[i] == '\t'))
      ++i;
    if (i == size) break;
    size_t start = i;
    while (i < size && code[i] != '[' && code[i] != ' ' && code[i] != '\n')
      ++i;
    size_t n = i - start;
    if (i == size || code[i] != '[') {
      if (n == 8 && !memcmp(code + start, "checksum", 8))
        x->checksum = true;
      else if (!(n == 5 && !memcmp(code + start, "zeros", 5))) {
        return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                           "cwnull program: '%.*s' at offset %zu is neither "
                           "TYPE[DIMS] nor zeros or "
                           "checksum",
                           (int)(n > 40 ? 40 : n), code + start, start);
      }
      continue;
    }
    int t = cw__type_of(code + start, n);
    if (t < 0) {
      return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                         "cwnull program: unknown element type '%.*s' at offset %zu",
                         (int)(n > 40 ? 40 : n), code + start, start);
    }
    if (x->num_outputs == CW_NULL_MAX_OUTPUTS) {
      return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cwnull program: more than %d outputs",
                         CW_NULL_MAX_OUTPUTS);
    }
    size_t o = x->num_outputs++;
    x->types[o] = (PJRT_Buffer_Type)t;
    int64_t* dims = x->dims + x->num_dims;
    ++i;  // '['
    while (i < size && code[i] != ']') {
      if (x->dim_sizes[o] == CW_NULL_MAX_RANK) {
        return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                           "cwnull program: output %zu has more "
                           "than %d dimensions",
                           o, CW_NULL_MAX_RANK);
      }
      int64_t v = 0;
      size_t digits = 0;
      while (i < size && code[i] >= '0' && code[i] <= '9' && digits < 12) {
        v = v * 10 + (code[i++] - '0');
        ++digits;
      }
      if (!digits || (i < size && code[i] != ',' && code[i] != ']')) {
        return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                           "cwnull program: bad dimension of output %zu at offset %zu", o, i);
      }
      dims[x->dim_sizes[o]++] = v;
      if (i < size && code[i] == ',') ++i;
    }
    if (i == size) {
      return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cwnull program: output %zu lacks ']'",
                         o);
    }
    ++i;  // ']'
    uint64_t bytes = 0;
    cw_status_t st = cw_array_extent(t, dims, x->dim_sizes[o], NULL, 0, &bytes);
    if (!st && bytes > ((uint64_t)1 << 34)) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "%" PRIu64 " bytes is above 16 GiB", bytes);
    }
    if (st) {
      PJRT_Error* e = cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                                  "cwnull program: output %zu: %s", o, cw_status_message(st));
      cw_status_free(st);
      return e;
    }
    x->num_dims += x->dim_sizes[o];
  }
  return NULL;
}

// Builds an executable for `code` on devices[0..num_devices) of c.
static PJRT_Error* cw__exe_create(cw_null_client_t* c, const char* code, size_t size,
                                  const int64_t* ids, size_t num_ids, int64_t replicas,
                                  int64_t partitions, PJRT_LoadedExecutable** out) {
  cw__exe_t* x = calloc(1, sizeof(*x));
  if (!x) return CW_NULL_OOM;
  x->refs = 1;
  x->client = c;
  PJRT_Error* e = cw__parse(x, code, size);
  if (!e && !(x->code = malloc(size + 1))) e = CW_NULL_OOM;
  if (!e && !(x->devices = calloc(num_ids ? num_ids : 1, sizeof(*x->devices)))) e = CW_NULL_OOM;
  if (!e && !(x->logical = calloc(num_ids ? num_ids : 1, sizeof(*x->logical)))) e = CW_NULL_OOM;
  for (size_t i = 0; !e && i < num_ids; ++i) {
    if (ids[i] < 0 || (size_t)ids[i] >= c->num_devices) {
      e = cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                      "cw_nullplugin: device %" PRId64 " is not one of the client's %zu", ids[i],
                      c->num_devices);
    } else {
      x->devices[i] = c->devices[ids[i]];
      x->logical[i].replica = (int)((int64_t)i % replicas);  // partition-major
      x->logical[i].partition = (int)((int64_t)i / replicas);
    }
  }
  if (e) {
    cw__exe_release(x);
    return e;
  }
  memcpy(x->code, code, size);
  x->code[size] = '\0';
  x->code_size = size;
  x->num_devices = num_ids;
  x->num_replicas = replicas;
  x->num_partitions = partitions;
  for (size_t o = 0; o < x->num_outputs; ++o) {
    x->kinds[o] = cw_null_memory_kind;
    x->kind_sizes[o] = strlen(cw_null_memory_kind);
  }
  cw__exe_fingerprint(x, cw__fnv1a(CW__FNV_BASIS, (const unsigned char*)code, size));
  *out = (PJRT_LoadedExecutable*)x;
  return NULL;
}

// Gives x the optimized program of an "mlir" one (taking hlo) and its
// fingerprint, as compiled or deserialized.
static void cw__exe_attach(PJRT_LoadedExecutable* exe, char* hlo, size_t hlo_size,
                           const char* format, uint64_t fingerprint) {
  cw__exe_t* x = CW__EXE(exe);
  x->hlo = hlo;
  x->hlo_size = hlo_size;
  snprintf(x->hlo_format, sizeof x->hlo_format, "%s", format);
  cw__exe_fingerprint(x, fingerprint);
}

// The fingerprint of an "mlir" program: its bytes and its compile options.
static uint64_t cw__mlir_fingerprint(const PJRT_Client_Compile_Args* a) {
  uint64_t h = cw__fnv1a(CW__FNV_BASIS, (const unsigned char*)a->program->code,
                         a->program->code_size);
  return cw__fnv1a(h, (const unsigned char*)a->compile_options, a->compile_options_size);
}

static PJRT_Error* cw__compile_mlir(PJRT_Client_Compile_Args* a, const int64_t* ids, size_t n,
                                    int64_t replicas, int64_t partitions) {
  cw_null_client_t* c = CW_NULL_CLIENT(a->client);
  cw_null_compiled_t* got = malloc(sizeof(*got));
  if (!got) return CW_NULL_OOM;
  PJRT_Error* e = cw_null_compiler_compile(c, a, got);
  if (!e) {
    e = cw__exe_create(c, got->text, strlen(got->text), ids, n, replicas, partitions,
                       &a->executable);
  }
  if (!e) {
    cw__exe_attach(a->executable, got->hlo, got->hlo_size, got->hlo_format,
                   cw__mlir_fingerprint(a));
  } else {
    free(got->hlo);
  }
  free(got);
  return e;
}

// Compile options give the devices: the assignment when there is one, else
// the first replicas x partitions devices.
static PJRT_Error* cw__compile(PJRT_Client_Compile_Args* a) {
  const PJRT_Program* pr = a->program;
  bool mlir = pr && pr->format_size == 4 && !memcmp(pr->format, "mlir", 4);
  if (!pr || (!mlir && (pr->format_size != strlen(CW_NULL_FORMAT) ||
                        memcmp(pr->format, CW_NULL_FORMAT, pr->format_size)))) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cw_nullplugin compiles only programs in format '" CW_NULL_FORMAT
                       "' (or 'mlir' through CW_NULL_COMPILER), not '%.*s'",
                       pr ? (int)(pr->format_size > 40 ? 40 : pr->format_size) : 0,
                       pr && pr->format ? pr->format : "");
  }
  cw_null_client_t* c = CW_NULL_CLIENT(a->client);
  cw_xla_options_info_t* info = malloc(sizeof(*info));
  if (!info) return CW_NULL_OOM;
  cw_status_t st = cw_xla_options_check((const uint8_t*)a->compile_options, a->compile_options_size,
                                        (int64_t)c->num_devices, info);
  PJRT_Error* e = NULL;
  if (st) {
    e = cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT, "cw_nullplugin: compile options: %s",
                    cw_status_message(st));
    cw_status_free(st);
  } else {
    int64_t replicas = info->num_replicas > 0 ? info->num_replicas : 1;
    int64_t partitions = info->num_partitions > 0 ? info->num_partitions : 1;
    size_t n = info->num_assigned;
    if (!n) {
      n = (size_t)(replicas * partitions);
      for (size_t i = 0; i < n && i < CW_XLA_MAX_ASSIGNED_DEVICES; ++i)
        info->assigned[i] = (int64_t)i;
    }
    if (mlir) {
      e = cw__compile_mlir(a, info->assigned, n, replicas, partitions);
    } else {
      e = cw__exe_create(c, pr->code ? pr->code : "", pr->code_size, info->assigned, n, replicas,
                         partitions, &a->executable);
    }
  }
  free(info);
  return e;
}

// Serialized form: magic, "R P N T H FORMAT FINGERPRINT id id ...\n", then
// the program text (T bytes) and the optimized program (H bytes, format "-"
// when there is none).
static void cw__serialized_free(PJRT_SerializedExecutable* s) {
  free(s);
}

static PJRT_Error* cw__serialize(PJRT_Executable_Serialize_Args* a) {
  const cw__exe_t* x = CW__EXE(a->executable);
  size_t cap = strlen(CW_NULL_MAGIC) + 160 + x->num_devices * 12 + x->code_size + x->hlo_size;
  char* b = malloc(cap);
  if (!b) return CW_NULL_OOM;
  int n = snprintf(b, cap, CW_NULL_MAGIC "%" PRId64 " %" PRId64 " %zu %zu %zu %s %s",
                   x->num_replicas, x->num_partitions, x->num_devices, x->code_size,
                   x->hlo_size, x->hlo ? x->hlo_format : "-", x->fingerprint);
  for (size_t i = 0; i < x->num_devices; ++i) {
    n += snprintf(b + n, cap - (size_t)n, " %d", CW_NULL_DEV(x->devices[i])->id);
  }
  b[n++] = '\n';
  memcpy(b + n, x->code, x->code_size);
  if (x->hlo_size) memcpy(b + n + x->code_size, x->hlo, x->hlo_size);
  a->serialized_bytes = b;
  a->serialized_bytes_size = (size_t)n + x->code_size + x->hlo_size;
  a->serialized_executable = (PJRT_SerializedExecutable*)b;
  a->serialized_executable_deleter = cw__serialized_free;
  return NULL;
}

// The next space-separated token of *p as a non-negative integer in `base`
// (-1 if there is none).
static long long cw__token(char** p, int base) {
  char* end = NULL;
  while (**p == ' ') ++*p;
  if (**p < '0' || **p > 'f') return -1;
  errno = 0;
  long long v = strtoll(*p, &end, base);
  if (end == *p || errno || v < 0 || (*end && *end != ' ')) return -1;
  *p = end;
  return v;
}

#define CW__HEAD_MAX (160 + 12 * CW_NULL_MAX_DEVICES)

static PJRT_Error* cw__deserialize(PJRT_Executable_DeserializeAndLoad_Args* a) {
  const char* s = a->serialized_executable;
  size_t size = a->serialized_executable_size;
  size_t m = strlen(CW_NULL_MAGIC);
  const char* nl = size > m ? memchr(s + m, '\n', size - m) : NULL;
  if (size < m || memcmp(s, CW_NULL_MAGIC, m) || !nl || nl - s > CW__HEAD_MAX) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: not a serialized cwnull executable");
  }
  char* head = malloc(CW__HEAD_MAX + 1);
  int64_t* ids = malloc(sizeof(*ids) * CW_NULL_MAX_DEVICES);
  if (!head || !ids) {
    free(head);
    free(ids);
    return CW_NULL_OOM;
  }
  memcpy(head, s + m, (size_t)(nl - s) - m);
  head[(nl - s) - m] = '\0';
  char* p = head;
  long long r = cw__token(&p, 10), q = cw__token(&p, 10), n = cw__token(&p, 10);
  long long t = cw__token(&p, 10), h = cw__token(&p, 10);
  char format[32] = "";
  size_t body = size - (size_t)(nl + 1 - s);
  while (*p == ' ') ++p;
  size_t flen = strcspn(p, " ");
  if (flen && flen < sizeof format) memcpy(format, p, flen);
  p += flen;
  long long fp_hi = -1, fp_lo = -1;
  while (*p == ' ') ++p;
  if (strcspn(p, " ") == 16) {  // in two halves: strtoll stops at 2^63
    char half[9] = {0};
    memcpy(half, p, 8);
    char* hp = half;
    fp_hi = cw__token(&hp, 16);
    memcpy(half, p + 8, 8);
    hp = half;
    fp_lo = cw__token(&hp, 16);
    p += 16;
  }
  if (r < 1 || q < 1 || n < 0 || n > CW_NULL_MAX_DEVICES || t < 0 || h < 0 || !*format ||
      fp_hi < 0 || fp_lo < 0 || (unsigned long long)t + (unsigned long long)h != body) {
    n = -1;
  }
  for (long long i = 0; i < n; ++i) {
    if ((ids[i] = cw__token(&p, 10)) < 0) n = -1;
  }
  PJRT_Error* e = NULL;
  char* hlo = NULL;
  if (n < 0 || *p) {
    e = cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                    "cw_nullplugin: bad header in a serialized cwnull executable");
  } else if (h > 0 && !(hlo = malloc((size_t)h))) {
    e = CW_NULL_OOM;
  } else {
    e = cw__exe_create(CW_NULL_CLIENT(a->client), nl + 1, (size_t)t, ids, (size_t)n, r, q,
                       &a->loaded_executable);
  }
  if (!e) {
    if (hlo) memcpy(hlo, nl + 1 + t, (size_t)h);
    cw__exe_attach(a->loaded_executable, hlo, (size_t)h, strcmp(format, "-") ? format : "",
                   ((uint64_t)fp_hi << 32) | (uint64_t)fp_lo);
    if (!hlo) CW__EXE(a->loaded_executable)->hlo_size = 0;
  } else {
    free(hlo);
  }
  free(head);
  free(ids);
  return e;
}

static PJRT_Error* cw__loaded_destroy(PJRT_LoadedExecutable_Destroy_Args* a) {
  cw__exe_release(CW__EXE(a->executable));
  return NULL;
}
static PJRT_Error* cw__executable_destroy(PJRT_Executable_Destroy_Args* a) {
  cw__exe_release(CW__EXE(a->executable));
  return NULL;
}
static PJRT_Error* cw__get_executable(PJRT_LoadedExecutable_GetExecutable_Args* a) {
  atomic_fetch_add(&CW__EXE(a->loaded_executable)->refs, 1);
  a->executable = (PJRT_Executable*)a->loaded_executable;
  return NULL;
}
static PJRT_Error* cw__exe_devices(PJRT_LoadedExecutable_AddressableDevices_Args* a) {
  a->addressable_devices = CW__EXE(a->executable)->devices;
  a->num_addressable_devices = CW__EXE(a->executable)->num_devices;
  return NULL;
}

#define CW__META(fn, Slot, body)                 \
  static PJRT_Error* fn(Slot##_Args* a) {        \
    const cw__exe_t* x = CW__EXE(a->executable); \
    body;                                        \
    return NULL;                                 \
  }

CW__META(cw__name, PJRT_Executable_Name,
         (a->executable_name = x->name, a->executable_name_size = strlen(x->name)))
CW__META(cw__num_outputs, PJRT_Executable_NumOutputs, a->num_outputs = x->num_outputs)
CW__META(cw__num_replicas, PJRT_Executable_NumReplicas, a->num_replicas = (size_t)x->num_replicas)
CW__META(cw__num_partitions, PJRT_Executable_NumPartitions,
         a->num_partitions = (size_t)x->num_partitions)
CW__META(cw__output_types, PJRT_Executable_OutputElementTypes,
         (a->output_types = (PJRT_Buffer_Type*)x->types, a->num_output_types = x->num_outputs))
CW__META(cw__output_memory_kinds, PJRT_Executable_OutputMemoryKinds,
         (a->num_outputs = x->num_outputs, a->memory_kinds = x->kinds,
          a->memory_kind_sizes = x->kind_sizes))
CW__META(cw__fingerprint, PJRT_Executable_Fingerprint,
         (a->executable_fingerprint = x->fingerprint, a->executable_fingerprint_size = 16))

static PJRT_Error* cw__output_dims(PJRT_Executable_OutputDimensions_Args* a) {
  const cw__exe_t* x = CW__EXE(a->executable);
  a->num_outputs = x->num_outputs;
  a->dims = x->dims;
  a->dim_sizes = x->dim_sizes;
  return NULL;
}

// The compiler's optimized HLO of an "mlir" program: JAX reads shardings and
// layouts from it. Two calls: code == NULL asks for the size.
static PJRT_Error* cw__optimized_program(PJRT_Executable_OptimizedProgram_Args* a) {
  const cw__exe_t* x = CW__EXE(a->executable);
  PJRT_Program* p = a->program;
  if (!x->hlo) {
    return cw_null_err(PJRT_Error_Code_UNIMPLEMENTED,
                       "cwnull programs have no optimized HLO program");
  }
  if (p->code) {
    if (p->code_size < x->hlo_size) {
      return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                         "cw_nullplugin: OptimizedProgram: buffer of %zu bytes, need %zu",
                         p->code_size, x->hlo_size);
    }
    memcpy(p->code, x->hlo, x->hlo_size);
  }
  p->code_size = x->hlo_size;
  p->format = x->hlo_format;
  p->format_size = strlen(x->hlo_format);
  return NULL;
}

CW__META(cw__code_size, PJRT_Executable_SizeOfGeneratedCodeInBytes,
         a->size_in_bytes = (int64_t)x->code_size)
CW__META(cw__is_deleted, PJRT_LoadedExecutable_IsDeleted, a->is_deleted = atomic_load(&x->deleted))
CW__META(cw__loaded_fingerprint, PJRT_LoadedExecutable_Fingerprint,
         (a->executable_fingerprint = x->fingerprint, a->executable_fingerprint_size = 16))

static PJRT_Error* cw__logical_ids(PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args* a) {
  a->addressable_device_logical_ids = CW__EXE(a->executable)->logical;
  a->num_addressable_device_logical_ids = CW__EXE(a->executable)->num_devices;
  return NULL;
}

static PJRT_Error* cw__delete(PJRT_LoadedExecutable_Delete_Args* a) {
  atomic_store(&CW__EXE(a->executable)->deleted, true);
  return NULL;
}

static void cw__no_assignment(PJRT_DeviceAssignmentSerialized* da) {
  (void)da;
}

// Empty (allowed): JAX keeps the assignment it compiled with.
static PJRT_Error* cw__device_assignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args* a) {
  a->serialized_bytes = "";
  a->serialized_bytes_size = 0;
  a->serialized_device_assignment = NULL;
  a->serialized_device_assignment_deleter = cw__no_assignment;  // called regardless
  return NULL;
}

// Frees the outputs made so far: every output of devices before `d`, and
// device d's first `o`.
static void cw__outputs_free(PJRT_LoadedExecutable_Execute_Args* a, size_t d, size_t o,
                             size_t num_outputs) {
  for (size_t k = 0; k < o; ++k) cw_null_buffer_unref(CW_NULL_BUF(a->output_lists[d][k]));
  for (size_t dd = 0; dd < d; ++dd) {
    for (size_t k = 0; k < num_outputs; ++k) {
      cw_null_buffer_unref(CW_NULL_BUF(a->output_lists[dd][k]));
    }
  }
}

static PJRT_Error* cw__execute(PJRT_LoadedExecutable_Execute_Args* a) {
  const cw__exe_t* x = CW__EXE(a->executable);
  if (atomic_load(&x->deleted)) {
    return cw_null_err(PJRT_Error_Code_FAILED_PRECONDITION, "cw_nullplugin: %s was deleted",
                       x->name);
  }
  size_t want = a->execute_device ? 1 : x->num_devices;
  if (a->num_devices != want) {
    return cw_null_err(PJRT_Error_Code_INVALID_ARGUMENT,
                       "cw_nullplugin: %s runs on %zu devices, asked for %zu", x->name, want,
                       a->num_devices);
  }
  for (size_t d = 0; d < a->num_devices; ++d) {
    cw_null_device_t* dev = CW_NULL_DEV(a->execute_device ? a->execute_device : x->devices[d]);
    uint64_t sum = CW__FNV_BASIS;
    for (size_t i = 0; i < a->num_args; ++i) {
      const cw_null_buffer_t* in = CW_NULL_BUF(a->argument_lists[d][i]);
      PJRT_Error* e = cw_null_buffer_wait(in);  // an argument still being written
      if (e) {
        cw__outputs_free(a, d, 0, x->num_outputs);
        return e;
      }
      if (x->checksum) sum = cw__fnv1a(sum, in->data, in->size);
    }
    unsigned char word[8];
    for (int k = 0; k < 8; ++k)
      word[k] = (unsigned char)(sum >> (8 * k));
    const int64_t* dims = x->dims;
    for (size_t o = 0; o < x->num_outputs; dims += x->dim_sizes[o++]) {
      cw_null_buffer_t* b = NULL;
      PJRT_Error* e = cw_null_buffer_create(dev, x->types[o], dims, x->dim_sizes[o], &b);
      if (e) {
        cw__outputs_free(a, d, o, x->num_outputs);
        return e;
      }
      for (uint64_t at = 0; x->checksum && at < b->size; at += 8) {
        memcpy(b->data + at, word, b->size - at < 8 ? b->size - at : 8);
      }
      a->output_lists[d][o] = (PJRT_Buffer*)b;
    }
    if (a->device_complete_events) a->device_complete_events[d] = CW_NULL_READY;
  }
  return NULL;
}

void cw_null_exe_fill(PJRT_Api* api) {
  api->PJRT_Client_Compile = cw__compile;
  api->PJRT_Executable_Destroy = cw__executable_destroy;
  api->PJRT_Executable_Name = cw__name;
  api->PJRT_Executable_NumReplicas = cw__num_replicas;
  api->PJRT_Executable_NumPartitions = cw__num_partitions;
  api->PJRT_Executable_NumOutputs = cw__num_outputs;
  api->PJRT_Executable_OptimizedProgram = cw__optimized_program;
  api->PJRT_Executable_Serialize = cw__serialize;
  api->PJRT_Executable_OutputElementTypes = cw__output_types;
  api->PJRT_Executable_OutputDimensions = cw__output_dims;
  api->PJRT_Executable_OutputMemoryKinds = cw__output_memory_kinds;
  api->PJRT_Executable_Fingerprint = cw__fingerprint;
  api->PJRT_Executable_DeserializeAndLoad = cw__deserialize;
  api->PJRT_LoadedExecutable_Destroy = cw__loaded_destroy;
  api->PJRT_LoadedExecutable_GetExecutable = cw__get_executable;
  api->PJRT_LoadedExecutable_AddressableDevices = cw__exe_devices;
  api->PJRT_LoadedExecutable_Execute = cw__execute;
  api->PJRT_Executable_SizeOfGeneratedCodeInBytes = cw__code_size;
  api->PJRT_LoadedExecutable_Delete = cw__delete;
  api->PJRT_LoadedExecutable_AddressableDeviceLogicalIds = cw__logical_ids;
  api->PJRT_LoadedExecutable_IsDeleted = cw__is_deleted;
  api->PJRT_LoadedExecutable_Fingerprint = cw__loaded_fingerprint;
  api->PJRT_LoadedExecutable_GetDeviceAssignment = cw__device_assignment;
}

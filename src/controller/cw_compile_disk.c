#include "cw_compile_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cw_dirs.h"
#include "cw_log.h"
#include "cw_reader.h"

#define CW__SUFFIX ".cwx"
#define CW__TMP_PREFIX ".tmp-"

cw_status_t cw_compile_disk_digest(const void* data, size_t size,
                                   uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]) {
  unsigned int n = 0;
  if (EVP_Digest(data, size, out, &n, EVP_sha256(), NULL) != 1 ||
      n != CW_COMPILE_DISK_DIGEST_SIZE) {
    return cw_make_status(CW_INTERNAL, "SHA-256 failed (OpenSSL)");
  }
  return cw_ok_status();
}

cw_status_t cw_compile_disk_header_encode(const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                          const void* payload, size_t size,
                                          uint8_t out[CW_COMPILE_DISK_HEADER_SIZE]) {
  cw_put_u32le(out, CW_COMPILE_DISK_MAGIC);
  cw_put_u32le(out + 4, CW_COMPILE_DISK_VERSION);
  memcpy(out + 8, key, CW_COMPILE_DISK_DIGEST_SIZE);
  cw_put_u64le(out + 40, (uint64_t)size);
  return cw_compile_disk_digest(payload, size, out + 48);
}

cw_status_t cw_compile_disk_header_check(const uint8_t* data, size_t size, uint64_t file_size,
                                         const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE]) {
  cw_reader_t r;
  cw_reader_initialize(&r, data, size);
  uint32_t magic = 0, version = 0;
  uint64_t len = 0;
  const uint8_t* file_key = NULL;
  if (!cw_reader_u32le(&r, &magic) || !cw_reader_u32le(&r, &version) ||
      !cw_reader_bytes(&r, CW_COMPILE_DISK_DIGEST_SIZE, &file_key) ||
      !cw_reader_u64le(&r, &len) || cw_reader_remaining(&r) < CW_COMPILE_DISK_DIGEST_SIZE ||
      file_size < CW_COMPILE_DISK_HEADER_SIZE) {
    return cw_make_status(CW_DATA_LOSS, "truncated header (%llu of %d bytes)",
                          (unsigned long long)(file_size < size ? file_size : size),
                          CW_COMPILE_DISK_HEADER_SIZE);
  }
  if (magic != CW_COMPILE_DISK_MAGIC) {
    return cw_make_status(CW_DATA_LOSS, "not a causeway compile cache file (magic 0x%08x)",
                          magic);
  }
  if (version != CW_COMPILE_DISK_VERSION) {
    return cw_make_status(CW_DATA_LOSS, "format version %u, this controller reads %u", version,
                          CW_COMPILE_DISK_VERSION);
  }
  if (CRYPTO_memcmp(file_key, key, CW_COMPILE_DISK_DIGEST_SIZE) != 0) {
    return cw_make_status(CW_DATA_LOSS, "the file holds another key");
  }
  // Compared before any use of `len`: a peer-written length never sizes anything.
  if (len != file_size - CW_COMPILE_DISK_HEADER_SIZE) {
    return cw_make_status(CW_DATA_LOSS, "payload length %llu, but %llu bytes follow the header",
                          (unsigned long long)len,
                          (unsigned long long)(file_size - CW_COMPILE_DISK_HEADER_SIZE));
  }
  return cw_ok_status();
}

cw_status_t cw_compile_disk_decode(const uint8_t* data, size_t size,
                                   const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                   size_t* out_payload_len) {
  *out_payload_len = 0;
  CW_RETURN_IF_ERROR(cw_compile_disk_header_check(data, size, size, key), "");
  size_t len = size - CW_COMPILE_DISK_HEADER_SIZE;
  const uint8_t* payload = data + CW_COMPILE_DISK_HEADER_SIZE;
  uint8_t got[CW_COMPILE_DISK_DIGEST_SIZE];
  CW_RETURN_IF_ERROR(cw_compile_disk_digest(payload, len, got), "checksum");
  if (CRYPTO_memcmp(got, data + 48, sizeof(got)) != 0) {
    return cw_make_status(CW_DATA_LOSS, "payload checksum mismatch");
  }
  *out_payload_len = len;
  return cw_ok_status();
}

bool cw_compile_disk_name_key(const char* name, uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]) {
  if (strlen(name) != 2 * CW_COMPILE_DISK_DIGEST_SIZE + strlen(CW__SUFFIX) ||
      strcmp(name + 2 * CW_COMPILE_DISK_DIGEST_SIZE, CW__SUFFIX) != 0) {
    return false;
  }
  for (int i = 0; i < 2 * CW_COMPILE_DISK_DIGEST_SIZE; ++i) {
    char c = name[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;  // the writer spells digests in lowercase
    if (i % 2 == 0) out[i / 2] = (uint8_t)(v << 4);
    else out[i / 2] |= (uint8_t)v;
  }
  return true;
}

cw_status_t cw_compile_disk_path(const char* dir, const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                 char** out_path) {
  *out_path = NULL;
  char hex[2 * CW_COMPILE_DISK_DIGEST_SIZE + 1];
  for (int i = 0; i < CW_COMPILE_DISK_DIGEST_SIZE; ++i) snprintf(hex + 2 * i, 3, "%02x", key[i]);
  if (asprintf(out_path, "%s/%s" CW__SUFFIX, dir, hex) < 0) {
    *out_path = NULL;
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  return cw_ok_status();
}

cw_status_t cw_compile_disk_prepare_dir(const char* dir) {
  if (!dir[0]) return cw_make_status(CW_INVALID_ARGUMENT, "empty compile cache directory");
  CW_RETURN_IF_ERROR(cw_dirs_make(dir), "compile cache");  // a directory now
  struct stat sb;
  if (stat(dir, &sb) == 0 && (sb.st_mode & 022)) {
    CW_LOGW("compile cache directory %s is writable by group or others (mode %03o): another "
            "user could plant executables; chmod 700 it", dir, (unsigned)(sb.st_mode & 0777));
  }
  return cw_ok_status();
}

static cw_status_t cw__read_all(int fd, const char* path, uint8_t* buf, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cw_make_status(CW_UNAVAILABLE, "read %s: %s", path, strerror(errno));
    if (n == 0) return cw_make_status(CW_DATA_LOSS, "%s shrank while being read", path);
    got += (size_t)n;
  }
  return cw_ok_status();
}

cw_status_t cw_compile_disk_read(const char* dir, const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                 uint64_t max_size, uint8_t** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  char* path = NULL;
  CW_RETURN_IF_ERROR(cw_compile_disk_path(dir, key, &path), "");
  // O_NONBLOCK: a FIFO put where an entry goes must not hold a pool thread
  // (and the compile, and shutdown) in open; a regular file ignores it.
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    cw_status_t s = err == ENOENT ? cw_make_status(CW_NOT_FOUND, "%s: no entry", path)
                                  : cw_make_status(CW_UNAVAILABLE, "open %s: %s", path,
                                                   strerror(err));
    free(path);
    return s;
  }
  struct stat sb;
  cw_status_t s = cw_ok_status();
  uint8_t* buf = NULL;
  if (fstat(fd, &sb) != 0) {
    s = cw_make_status(CW_UNAVAILABLE, "stat %s: %s", path, strerror(errno));
  } else if (!S_ISREG(sb.st_mode)) {
    s = cw_make_status(CW_DATA_LOSS, "%s is not a regular file", path);
  } else if ((uint64_t)sb.st_size > max_size + CW_COMPILE_DISK_HEADER_SIZE) {
    s = cw_make_status(CW_DATA_LOSS, "%s holds %lld bytes, over the bound of %llu", path,
                       (long long)sb.st_size, (unsigned long long)max_size);
  } else {
    buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
    if (!buf) s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory reading %s", path);
  }
  if (!s) s = cw__read_all(fd, path, buf, (size_t)sb.st_size);
  close(fd);
  size_t len = 0;
  if (!s) {
    s = cw_compile_disk_decode(buf, (size_t)sb.st_size, key, &len);
    if (s) s = cw_status_annotate(s, "%s", path);
  }
  if (s) {
    free(buf);
    if (cw_status_code(s) == CW_DATA_LOSS) unlink(path);  // never trusted, never read again
    free(path);
    return s;
  }
  memmove(buf, buf + CW_COMPILE_DISK_HEADER_SIZE, len);
  utimensat(AT_FDCWD, path, NULL, 0);  // recently used: evicted last
  free(path);
  *out_bytes = buf;
  *out_size = len;
  return cw_ok_status();
}

static cw_status_t cw__write_all(int fd, const char* path, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return cw_make_status(CW_UNAVAILABLE, "write %s: %s", path, strerror(errno));
    p += w;
    n -= (size_t)w;
  }
  return cw_ok_status();
}

cw_status_t cw_compile_disk_write(const char* dir, const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                  const void* payload, size_t size) {
  uint8_t header[CW_COMPILE_DISK_HEADER_SIZE];
  CW_RETURN_IF_ERROR(cw_compile_disk_header_encode(key, payload, size, header), "");
  char* path = NULL;
  CW_RETURN_IF_ERROR(cw_compile_disk_path(dir, key, &path), "");
  char* tmp = NULL;
  if (asprintf(&tmp, "%s/" CW__TMP_PREFIX "XXXXXX", dir) < 0) {
    free(path);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  int fd = mkstemp(tmp);  // 0600, O_EXCL
  cw_status_t s = fd < 0 ? cw_make_status(CW_UNAVAILABLE, "create %s: %s", tmp, strerror(errno))
                         : cw_ok_status();
  if (!s) s = cw__write_all(fd, tmp, header, sizeof(header));
  if (!s) s = cw__write_all(fd, tmp, payload, size);
  if (fd >= 0 && close(fd) != 0 && !s) {
    s = cw_make_status(CW_UNAVAILABLE, "close %s: %s", tmp, strerror(errno));
  }
  if (!s && rename(tmp, path) != 0) {
    s = cw_make_status(CW_UNAVAILABLE, "rename %s to %s: %s", tmp, path, strerror(errno));
  }
  if (s && fd >= 0) unlink(tmp);
  free(tmp);
  free(path);
  return s;
}

typedef struct cw__file_s {
  char name[2 * CW_COMPILE_DISK_DIGEST_SIZE + sizeof(CW__SUFFIX)];
  uint64_t size;
  struct timespec mtime;
} cw__file_t;

static int cw__older_first(const void* a, const void* b) {
  const cw__file_t* x = a;
  const cw__file_t* y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

static bool cw__has_suffix(const char* name, const char* suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n > k && !strcmp(name + n - k, suffix);
}

// Removes `name` if it is still the file `sb` describes (a writer may have
// renamed a fresh entry over it since).
static bool cw__remove_if_same(int dfd, const char* name, const struct stat* sb) {
  struct stat now;
  return fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == sb->st_ino &&
         now.st_dev == sb->st_dev && unlinkat(dfd, name, 0) == 0;
}

// Reads the header of entry `name` (key `key`) and checks it; the size and
// identity of the file read are in *sb.
static cw_status_t cw__check_header(int dfd, const char* name,
                                    const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                    struct stat* sb) {
  int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return cw_make_status(CW_NOT_FOUND, "open %s: %s", name, strerror(errno));
  uint8_t header[CW_COMPILE_DISK_HEADER_SIZE];
  cw_status_t s = cw_ok_status();
  ssize_t n = 0;
  if (fstat(fd, sb) != 0) {
    s = cw_make_status(CW_UNAVAILABLE, "stat %s: %s", name, strerror(errno));
  } else if (!S_ISREG(sb->st_mode)) {
    s = cw_make_status(CW_DATA_LOSS, "%s is not a regular file", name);
  } else {
    do n = pread(fd, header, sizeof(header), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) s = cw_make_status(CW_UNAVAILABLE, "read %s: %s", name, strerror(errno));
  }
  close(fd);
  if (!s) s = cw_compile_disk_header_check(header, (size_t)n, (uint64_t)sb->st_size, key);
  return s;
}

cw_status_t cw_compile_disk_scan(const char* dir, uint64_t bound, uint64_t target,
                                 bool check_headers, const atomic_bool* stop,
                                 cw_compile_disk_scan_t* out) {
  memset(out, 0, sizeof(*out));
  if (target > bound) target = bound;
  DIR* d = opendir(dir);
  if (!d) return cw_make_status(CW_UNAVAILABLE, "open %s: %s", dir, strerror(errno));
  int dfd = dirfd(d);
  cw__file_t* files = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  cw_status_t s = cw_ok_status();
  time_t now = time(NULL);
  struct dirent* e;
  while (!s && (e = readdir(d)) != NULL) {
    if (stop && atomic_load_explicit(stop, memory_order_relaxed)) {
      s = cw_make_status(CW_CANCELLED, "scanning %s: stopped", dir);
      break;
    }
    bool tmp = !strncmp(e->d_name, CW__TMP_PREFIX, strlen(CW__TMP_PREFIX));
    if (!tmp && !cw__has_suffix(e->d_name, CW__SUFFIX)) continue;  // not ours
    struct stat sb;
    if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone since
    if (tmp) {
      // A writer that died mid-write leaves one; live writers finish in well under an hour.
      if (S_ISREG(sb.st_mode) && now - sb.st_mtim.tv_sec > 3600 &&
          unlinkat(dfd, e->d_name, 0) == 0) {
        out->temporaries++;
      }
      continue;
    }
    if (!S_ISREG(sb.st_mode)) continue;  // a directory, a link: never ours to remove
    uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
    bool valid = cw_compile_disk_name_key(e->d_name, key) &&
                 (uint64_t)sb.st_size >= CW_COMPILE_DISK_HEADER_SIZE;
    if (valid && check_headers) {
      cw_status_t hs = cw__check_header(dfd, e->d_name, key, &sb);
      valid = !hs;
      if (hs && cw_status_code(hs) != CW_DATA_LOSS) {  // gone, or unreadable: not ours to judge
        cw_status_free(hs);
        continue;
      }
      cw_status_free(hs);
    }
    if (!valid) {
      if (cw__remove_if_same(dfd, e->d_name, &sb)) out->pruned++;
      continue;
    }
    if (n == cap) {
      size_t ncap = cap ? 2 * cap : 256;
      cw__file_t* nf = realloc(files, ncap * sizeof(*nf));
      if (!nf) {
        s = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      files = nf;
      cap = ncap;
    }
    snprintf(files[n].name, sizeof(files[n].name), "%s", e->d_name);
    files[n].size = (uint64_t)sb.st_size;
    files[n].mtime = sb.st_mtim;
    total += files[n].size;
    n++;
  }
  if (!s && total > bound) {
    qsort(files, n, sizeof(*files), cw__older_first);
    for (size_t i = 0; i < n && total > target; ++i) {
      if (unlinkat(dfd, files[i].name, 0) == 0 || errno == ENOENT) {
        total -= files[i].size;
        out->evicted++;
      }
    }
  }
  free(files);
  closedir(d);
  out->entries = n - out->evicted;
  out->bytes = total;
  return s;
}

// --- Canonical compile options ----------------------------------------------------------

typedef struct cw__record_s {
  uint32_t field;
  size_t start, size;         // the whole record within its message
  size_t value_start, value_size;  // LEN records: the payload
  bool is_len;
} cw__record_t;

// Splits a message into records; false if it is not well-formed wire format.
// *out (malloc'd) holds *out_n records.
static bool cw__records(const uint8_t* data, size_t size, cw__record_t** out, size_t* out_n) {
  *out = NULL;
  *out_n = 0;
  size_t cap = 0;
  cw_reader_t r;
  cw_reader_initialize(&r, data, size);
  while (cw_reader_remaining(&r) > 0) {
    cw__record_t rec = {0};
    rec.start = r.pos;
    uint64_t tag = 0, v = 0;
    const uint8_t* p = NULL;
    if (!cw_reader_varint(&r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) goto bad;
    rec.field = (uint32_t)(tag >> 3);
    switch (tag & 7) {
      case 0: if (!cw_reader_varint(&r, &v)) goto bad; break;
      case 1: if (!cw_reader_bytes(&r, 8, &p)) goto bad; break;
      case 5: if (!cw_reader_bytes(&r, 4, &p)) goto bad; break;
      case 2:
        if (!cw_reader_varint(&r, &v) || v > cw_reader_remaining(&r)) goto bad;
        rec.value_start = r.pos;
        rec.value_size = (size_t)v;
        rec.is_len = true;
        if (!cw_reader_bytes(&r, (size_t)v, &p)) goto bad;
        break;
      default: goto bad;  // groups: not in these messages
    }
    rec.size = r.pos - rec.start;
    if (*out_n == cap) {
      cap = cap ? 2 * cap : 32;
      cw__record_t* n = realloc(*out, cap * sizeof(*n));
      if (!n) goto bad;
      *out = n;
    }
    (*out)[(*out_n)++] = rec;
  }
  return true;
bad:
  free(*out);
  *out = NULL;
  *out_n = 0;
  return false;
}

// The LEN record `field` of a message (the last one, as protobuf merges), or NULL.
static const cw__record_t* cw__find(const cw__record_t* recs, size_t n, uint32_t field) {
  const cw__record_t* found = NULL;
  for (size_t i = 0; i < n; ++i) {
    if (recs[i].field == field && recs[i].is_len) found = &recs[i];
  }
  return found;
}

static int cw__record_bytes_cmp(const void* a, const void* b, void* base_arg) {
  const uint8_t* base = base_arg;
  const cw__record_t* x = a;
  const cw__record_t* y = b;
  size_t n = x->size < y->size ? x->size : y->size;
  int c = memcmp(base + x->start, base + y->start, n);
  if (c) return c;
  return x->size < y->size ? -1 : x->size > y->size;
}

static bool cw__is_map_field(uint32_t field) { return field == 357 || field == 500; }

uint8_t* cw_compile_disk_canonical_options(const uint8_t* data, size_t size) {
  cw__record_t *top = NULL, *ebo = NULL, *dbg = NULL;
  size_t n_top = 0, n_ebo = 0, n_dbg = 0;
  uint8_t* out = NULL;
  if (!size || !cw__records(data, size, &top, &n_top)) goto done;
  const cw__record_t* e = cw__find(top, n_top, 3);
  if (!e || !cw__records(data + e->value_start, e->value_size, &ebo, &n_ebo)) goto done;
  const cw__record_t* d = cw__find(ebo, n_ebo, 3);
  if (!d) goto done;
  size_t base = e->value_start + d->value_start;  // debug options within `data`
  if (!cw__records(data + base, d->value_size, &dbg, &n_dbg)) goto done;
  out = malloc(size);
  if (!out) goto done;
  memcpy(out, data, size);
  // Other records keep their order; map entries follow them, sorted. The
  // message's length does not change, so no enclosing length does either.
  size_t pos = base;
  for (size_t i = 0; i < n_dbg; ++i) {
    if (cw__is_map_field(dbg[i].field)) continue;
    memcpy(out + pos, data + base + dbg[i].start, dbg[i].size);
    pos += dbg[i].size;
  }
  size_t k = 0;
  for (size_t i = 0; i < n_dbg; ++i) {
    if (cw__is_map_field(dbg[i].field)) dbg[k++] = dbg[i];
  }
  if (k > 1) qsort_r(dbg, k, sizeof(*dbg), cw__record_bytes_cmp, (void*)(data + base));
  for (size_t i = 0; i < k; ++i) {
    memcpy(out + pos, data + base + dbg[i].start, dbg[i].size);
    pos += dbg[i].size;
  }
done:
  free(top);
  free(ebo);
  free(dbg);
  return out;
}

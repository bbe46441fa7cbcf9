// Unit tests of the compile cache on disk (cw_compile_disk.c): the digest and
// header codec, round trip, modes, truncated / corrupted / foreign /
// other-version files refused and removed, the directory scan (what it
// prunes, the byte bound: oldest first, down to a target), entry names,
// canonical compile options.
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_compile_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_dir[256];

static void digest_of(const char* text, uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]) {
  assert_null(cw_compile_disk_digest(text, strlen(text), out));
}

static char* path_of(const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE]) {
  char* path = NULL;
  assert_null(cw_compile_disk_path(g_dir, key, &path));
  return path;
}

static void write_entry(const char* key_text, size_t size, uint8_t fill) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(key_text, key);
  uint8_t* payload = malloc(size);
  memset(payload, fill, size);
  assert_null(cw_compile_disk_write(g_dir, key, payload, size));
  free(payload);
}

// Reads `key_text`'s entry; returns the status code and frees everything.
static int read_code(const char* key_text, const char* want_words) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(key_text, key);
  uint8_t* bytes = NULL;
  size_t size = 0;
  cw_status_t s = cw_compile_disk_read(g_dir, key, 1 << 20, &bytes, &size);
  int code = cw_status_code(s);
  if (want_words && (!s || !strstr(cw_status_message(s), want_words))) {
    fail_msg("expected '%s' in: %s", want_words, s ? cw_status_message(s) : "OK");
  }
  cw_status_free(s);
  free(bytes);
  return code;
}

static void file_edit(const char* key_text, long offset, uint8_t xor_with, long truncate_to) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(key_text, key);
  char* path = path_of(key);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  if (truncate_to >= 0) assert_int_equal(ftruncate(fd, truncate_to), 0);
  if (offset >= 0) {
    uint8_t b = 0;
    assert_int_equal(pread(fd, &b, 1, offset), 1);
    b ^= xor_with;
    assert_int_equal(pwrite(fd, &b, 1, offset), 1);
  }
  close(fd);
  free(path);
}

// Moves `from`'s entry to the file name of `to`'s key.
static void rename_entry(const char* from, const char* to) {
  uint8_t k1[CW_COMPILE_DISK_DIGEST_SIZE], k2[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(from, k1);
  digest_of(to, k2);
  char* p1 = path_of(k1);
  char* p2 = path_of(k2);
  assert_int_equal(rename(p1, p2), 0);
  free(p1);
  free(p2);
}

static bool entry_exists(const char* key_text) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(key_text, key);
  char* path = path_of(key);
  bool there = access(path, F_OK) == 0;
  free(path);
  return there;
}

static int disk_setup(void** state) {
  (void)state;
  snprintf(g_dir, sizeof(g_dir), "%s/cw-disk-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_dir)) return -1;
  // A nested directory that does not exist yet.
  strncat(g_dir, "/a/b", sizeof(g_dir) - strlen(g_dir) - 1);
  return cw_status_is_ok(cw_compile_disk_prepare_dir(g_dir)) ? 0 : -1;
}

static int disk_teardown(void** state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%.*s'", (int)(strlen(g_dir) - 4), g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_disk_round_trip(void** state) {
  (void)state;
  struct stat sb;
  assert_int_equal(stat(g_dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  write_entry("round", 3000, 0x5a);
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of("round", key);
  char* path = path_of(key);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(sb.st_size, 3000 + CW_COMPILE_DISK_HEADER_SIZE);
  free(path);
  uint8_t* bytes = NULL;
  size_t size = 0;
  assert_null(cw_compile_disk_read(g_dir, key, 1 << 20, &bytes, &size));
  assert_int_equal(size, 3000);
  for (size_t i = 0; i < size; ++i) assert_int_equal(bytes[i], 0x5a);
  free(bytes);
  assert_int_equal(read_code("absent", "no entry"), CW_NOT_FOUND);
  // Over the read bound: refused.
  cw_status_t over = cw_compile_disk_read(g_dir, key, 100, &bytes, &size);
  assert_int_equal(cw_status_code(over), CW_DATA_LOSS);
  cw_status_free(over);
}

static void test_disk_bad_files_refused_and_removed(void** state) {
  (void)state;
  struct {
    const char* name;
    long offset;
    uint8_t xor_with;
    long truncate_to;
    const char* words;
  } cases[] = {
      {"truncated-payload", -1, 0, CW_COMPILE_DISK_HEADER_SIZE + 10, "payload length 500"},
      {"truncated-header", -1, 0, 20, "truncated header"},
      {"empty", -1, 0, 0, "truncated header"},
      {"corrupt-payload", CW_COMPILE_DISK_HEADER_SIZE + 7, 0x01, -1, "checksum mismatch"},
      {"corrupt-checksum", 50, 0x80, -1, "checksum mismatch"},
      {"bad-magic", 0, 0xff, -1, "not a causeway compile cache file"},
      {"other-version", 4, 0x02, -1, "format version 3"},
      {"length-field", 40, 0x01, -1, "payload length 501"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    write_entry(cases[i].name, 500, (uint8_t)i);
    file_edit(cases[i].name, cases[i].offset, cases[i].xor_with, cases[i].truncate_to);
    assert_int_equal(read_code(cases[i].name, cases[i].words), CW_DATA_LOSS);
    assert_false(entry_exists(cases[i].name));  // never read again
  }
  // A foreign file under this key's name: another key inside.
  write_entry("other", 100, 1);
  rename_entry("other", "mine");
  assert_int_equal(read_code("mine", "another key"), CW_DATA_LOSS);
  // A FIFO where an entry goes: refused at once (opening it blocked a pool
  // thread, its compile and the controller's shutdown for good).
  write_entry("fifo", 100, 1);
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of("fifo", key);
  char* path = path_of(key);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(mkfifo(path, 0600), 0);
  free(path);
  assert_int_equal(read_code("fifo", "not a regular file"), CW_DATA_LOSS);
  assert_false(entry_exists("fifo"));
}

static void set_mtime(const char* key_text, time_t t) {
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of(key_text, key);
  char* path = path_of(key);
  struct timespec ts[2] = {{t, 0}, {t, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
  free(path);
}

// Scans without header checks; *total: the bytes kept.
static void scan_to(uint64_t bound, uint64_t target, uint64_t* total) {
  cw_compile_disk_scan_t sc;
  assert_null(cw_compile_disk_scan(g_dir, bound, target, false, NULL, &sc));
  *total = sc.bytes;
}

static void test_disk_bound_evicts_oldest(void** state) {
  (void)state;
  uint64_t total = 0;
  scan_to(UINT64_MAX, UINT64_MAX, &total);
  scan_to(0, 0, &total);  // empties it
  assert_int_equal(total, 0);
  const char* names[] = {"old", "middle", "new", "newer"};
  for (int i = 0; i < 4; ++i) {
    write_entry(names[i], 1000 - CW_COMPILE_DISK_HEADER_SIZE, 9);
    set_mtime(names[i], 1000000 + i * 100);
  }
  // Under the bound: nothing goes, whatever the target.
  scan_to(4000, 0, &total);
  assert_int_equal(total, 4000);
  // A read refreshes the mtime: "old" becomes the newest.
  assert_int_equal(read_code("old", NULL), CW_OK);
  scan_to(3500, 3500, &total);
  assert_int_equal(total, 3000);
  assert_false(entry_exists("middle"));
  assert_true(entry_exists("old"));
  assert_true(entry_exists("new"));
  // Over the bound: down to the target, oldest first.
  scan_to(2999, 1000, &total);
  assert_int_equal(total, 1000);
  assert_false(entry_exists("new"));
  assert_false(entry_exists("newer"));
  assert_true(entry_exists("old"));
}

// What a start-up scan prunes: files named like entries that cannot be one
// (bad names, too short, with headers checked also a foreign magic, another
// key, a wrong length), stale temporaries; what it keeps: entries (even one
// whose payload is corrupt: that is found when it is read) and other files.
static void test_disk_scan_prunes(void** state) {
  (void)state;
  write_entry("good", 300, 1);
  write_entry("corrupt-payload", 300, 2);
  file_edit("corrupt-payload", CW_COMPILE_DISK_HEADER_SIZE + 3, 0x01, -1);
  write_entry("bad-magic", 300, 3);
  file_edit("bad-magic", 0, 0xff, -1);
  write_entry("short-payload", 300, 4);
  file_edit("short-payload", -1, 0, CW_COMPILE_DISK_HEADER_SIZE + 10);
  write_entry("tiny", 300, 5);
  file_edit("tiny", -1, 0, 12);
  write_entry("theirs", 300, 6);
  rename_entry("theirs", "renamed");  // another key's entry under this name
  char path[600];
  const char* others[] = {"NOT-HEX-AT-ALL.cwx", ".tmp-old", ".tmp-fresh", "notes.txt"};
  for (size_t i = 0; i < 4; ++i) {
    snprintf(path, sizeof(path), "%s/%s", g_dir, others[i]);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234",
          f);
    fclose(f);
  }
  snprintf(path, sizeof(path), "%s/.tmp-old", g_dir);
  struct timespec two_hours_ago[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, two_hours_ago, 0), 0);
  snprintf(path, sizeof(path), "%s/dir.cwx", g_dir);
  assert_int_equal(mkdir(path, 0700), 0);

  // Without headers: names, sizes and types only.
  cw_compile_disk_scan_t sc;
  assert_null(cw_compile_disk_scan(g_dir, UINT64_MAX, UINT64_MAX, false, NULL, &sc));
  assert_int_equal(sc.pruned, 2);  // NOT-HEX-AT-ALL.cwx, tiny (dir.cwx is left alone)
  assert_int_equal(sc.temporaries, 1);
  assert_int_equal(sc.entries, 5);
  assert_true(entry_exists("bad-magic"));
  assert_false(entry_exists("tiny"));
  // With headers.
  assert_null(cw_compile_disk_scan(g_dir, UINT64_MAX, UINT64_MAX, true, NULL, &sc));
  assert_int_equal(sc.pruned, 3);  // bad-magic, short-payload, renamed
  assert_int_equal(sc.entries, 2);
  assert_int_equal(sc.bytes, 2 * (300 + CW_COMPILE_DISK_HEADER_SIZE));
  assert_true(entry_exists("good"));
  assert_true(entry_exists("corrupt-payload"));
  assert_false(entry_exists("bad-magic"));
  assert_false(entry_exists("short-payload"));
  assert_false(entry_exists("renamed"));
  snprintf(path, sizeof(path), "%s/notes.txt", g_dir);
  assert_int_equal(access(path, F_OK), 0);  // not the cache's
  snprintf(path, sizeof(path), "%s/.tmp-fresh", g_dir);
  assert_int_equal(access(path, F_OK), 0);  // a live writer's, perhaps
  // The corrupt payload is refused when read.
  assert_int_equal(read_code("corrupt-payload", "checksum mismatch"), CW_DATA_LOSS);

  // A stop flag already set: the scan ends at once.
  atomic_bool stop = true;
  cw_status_t s = cw_compile_disk_scan(g_dir, 0, 0, true, &stop, &sc);
  assert_int_equal(cw_status_code(s), CW_CANCELLED);
  cw_status_free(s);
  assert_true(entry_exists("good"));
}

static void test_disk_name_key(void** state) {
  (void)state;
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE], got[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of("name", key);
  char* path = path_of(key);
  const char* name = strrchr(path, '/') + 1;
  assert_true(cw_compile_disk_name_key(name, got));
  assert_memory_equal(got, key, sizeof(key));
  char upper[128];
  snprintf(upper, sizeof(upper), "%s", name);
  for (char* p = upper; *p && *p != '.'; ++p) {
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  }
  bool has_letter = strcmp(upper, name) != 0;
  assert_true(!has_letter || !cw_compile_disk_name_key(upper, got));
  char shorter[128];
  snprintf(shorter, sizeof(shorter), "%s", name + 1);
  assert_false(cw_compile_disk_name_key(shorter, got));
  assert_false(cw_compile_disk_name_key("x.cwx", got));
  char other_suffix[128];
  snprintf(other_suffix, sizeof(other_suffix), "%.64s.cwy", name);
  assert_false(cw_compile_disk_name_key(other_suffix, got));
  free(path);
}

// CompileOptions{3: {4: 1, 3: DebugOptions{1: 1, 357: {k: v}...}}} by hand.
static size_t options_with(const char* const* keys, size_t n, uint8_t* out) {
  uint8_t dbg[256];
  size_t d = 0;
  dbg[d++] = 0x08;  // field 1 varint
  dbg[d++] = 0x01;
  for (size_t i = 0; i < n; ++i) {
    size_t kl = strlen(keys[i]);
    dbg[d++] = 0xaa;  // field 357, LEN
    dbg[d++] = 0x16;
    dbg[d++] = (uint8_t)(2 + kl + 4);
    dbg[d++] = 0x0a;
    dbg[d++] = (uint8_t)kl;
    memcpy(dbg + d, keys[i], kl);
    d += kl;
    memcpy(dbg + d, "\x12\x02-1", 4);
    d += 4;
  }
  size_t o = 0;
  out[o++] = 0x1a;  // CompileOptions.3
  out[o++] = (uint8_t)(2 + 2 + d);
  out[o++] = 0x20;  // ExecutableBuildOptions.4 = 1
  out[o++] = 0x01;
  out[o++] = 0x1a;  // ExecutableBuildOptions.3 = DebugOptions
  out[o++] = (uint8_t)d;
  memcpy(out + o, dbg, d);
  return o + d;
}

static void test_canonical_options(void** state) {
  (void)state;
  const char* ab[] = {"rtt_us", "gpus_per_node", "chunk_prep_us"};
  const char* ba[] = {"chunk_prep_us", "rtt_us", "gpus_per_node"};
  const char* other[] = {"chunk_prep_us", "rtt_us", "gpus_per_nodf"};
  uint8_t x[256], y[256], z[256];
  size_t nx = options_with(ab, 3, x), ny = options_with(ba, 3, y), nz = options_with(other, 3, z);
  assert_int_equal(nx, ny);
  assert_memory_not_equal(x, y, nx);  // as XLA may write them
  uint8_t* cx = cw_compile_disk_canonical_options(x, nx);
  uint8_t* cy = cw_compile_disk_canonical_options(y, ny);
  uint8_t* cz = cw_compile_disk_canonical_options(z, nz);
  assert_non_null(cx);
  assert_non_null(cy);
  assert_non_null(cz);
  assert_memory_equal(cx, cy, nx);
  assert_memory_not_equal(cx, cz, nx);
  free(cx);
  free(cy);
  free(cz);
  // Not that nesting, or not wire format: NULL (the caller uses the bytes as they are).
  assert_null(cw_compile_disk_canonical_options((const uint8_t*)"\x08\x01", 2));
  assert_null(cw_compile_disk_canonical_options((const uint8_t*)"\x1a\x7f", 2));
}

// SHA-256 as published (FIPS 180-2's "abc"), and the header codec in memory.
static void test_digest_and_header(void** state) {
  (void)state;
  static const uint8_t abc[CW_COMPILE_DISK_DIGEST_SIZE] = {
      0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
      0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
  uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of("abc", key);
  assert_memory_equal(key, abc, sizeof(abc));

  uint8_t file[CW_COMPILE_DISK_HEADER_SIZE + 5];
  memcpy(file + CW_COMPILE_DISK_HEADER_SIZE, "hello", 5);
  assert_null(cw_compile_disk_header_encode(key, file + CW_COMPILE_DISK_HEADER_SIZE, 5, file));
  assert_memory_equal(file, "CWXC", 4);
  assert_int_equal(file[4], CW_COMPILE_DISK_VERSION);
  assert_memory_equal(file + 8, key, sizeof(key));
  assert_int_equal(file[40], 5);
  size_t len = 0;
  assert_null(cw_compile_disk_decode(file, sizeof(file), key, &len));
  assert_int_equal(len, 5);
  // One byte more or less than the header says; another key.
  cw_status_t s = cw_compile_disk_decode(file, sizeof(file) - 1, key, &len);
  assert_int_equal(cw_status_code(s), CW_DATA_LOSS);
  cw_status_free(s);
  uint8_t other[CW_COMPILE_DISK_DIGEST_SIZE];
  digest_of("abd", other);
  s = cw_compile_disk_decode(file, sizeof(file), other, &len);
  assert_int_equal(cw_status_code(s), CW_DATA_LOSS);
  assert_non_null(strstr(cw_status_message(s), "another key"));
  cw_status_free(s);
  // The path names the key in hex.
  char* path = NULL;
  assert_null(cw_compile_disk_path("/d", key, &path));
  assert_string_equal(path, "/d/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.cwx");
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_digest_and_header),
      cmocka_unit_test_setup_teardown(test_disk_round_trip, disk_setup, disk_teardown),
      cmocka_unit_test_setup_teardown(test_disk_bad_files_refused_and_removed, disk_setup,
                                      disk_teardown),
      cmocka_unit_test_setup_teardown(test_disk_bound_evicts_oldest, disk_setup, disk_teardown),
      cmocka_unit_test_setup_teardown(test_disk_scan_prunes, disk_setup, disk_teardown),
      cmocka_unit_test_setup_teardown(test_disk_name_key, disk_setup, disk_teardown),
      cmocka_unit_test(test_canonical_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

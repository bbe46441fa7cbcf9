// The compile cache on disk: one file per serialized executable in a
// directory shared by controller restarts (--compile-cache-dir).
//
// File `<dir>/<hex of key digest>.cwx`, little-endian:
//   0  magic "CWXC" (u32 0x43585743)    4  format version (u32, 1)
//   8  key digest, SHA-256 of the full cache key (32 bytes)
//  40  payload length (u64)            48  SHA-256 of the payload (32 bytes)
//  80  payload: the serialized executable
// A file is trusted only if every field checks out against the key looked
// for and the file's real length; anything else (truncated, corrupted, a
// foreign key, another format version) is refused with the reason and the
// caller recompiles. Files are written to a temporary name (0600) and
// renamed, so a reader never sees half a file under the final name.
//
// These functions do blocking file I/O: the controller runs them on the
// libuv thread pool (cw_ctl_disk.c), never on its loop thread.
#ifndef CW_CONTROLLER_COMPILE_DISK_H_
#define CW_CONTROLLER_COMPILE_DISK_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_COMPILE_DISK_DIGEST_SIZE 32
#define CW_COMPILE_DISK_HEADER_SIZE 80
#define CW_COMPILE_DISK_MAGIC 0x43585743u  // "CWXC"
#define CW_COMPILE_DISK_VERSION 1u

// SHA-256 of data[0..size) (OpenSSL's EVP interface).
CW_MUST_USE cw_status_t cw_compile_disk_digest(const void* data, size_t size,
                                               uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]);

// The header for `payload` under key digest `key`.
CW_MUST_USE cw_status_t cw_compile_disk_header_encode(const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                                      const void* payload, size_t size,
                                                      uint8_t out[CW_COMPILE_DISK_HEADER_SIZE]);

// Validates a whole file's bytes (data[0..size)) as the entry for `key`:
// the header (cw_compile_disk_header_check) and the payload checksum. On
// success the payload is data[HEADER_SIZE..+*out_len). Errors are DATA_LOSS
// naming the first field that is wrong.
CW_MUST_USE cw_status_t cw_compile_disk_decode(const uint8_t* data, size_t size,
                                               const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                               size_t* out_payload_len);

// Validates the first `size` bytes of a file of `file_size` bytes as the
// header of the entry for `key`: magic, version, key, payload length equal
// to what follows the header. The payload is not read. DATA_LOSS naming the
// first field that is wrong.
CW_MUST_USE cw_status_t cw_compile_disk_header_check(const uint8_t* data, size_t size,
                                                     uint64_t file_size,
                                                     const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE]);

// The key digest an entry's file name spells ("<64 lowercase hex digits>.cwx");
// false for any other name.
bool cw_compile_disk_name_key(const char* name, uint8_t out[CW_COMPILE_DISK_DIGEST_SIZE]);

// "<dir>/<64 hex digits>.cwx", malloc'd.
CW_MUST_USE cw_status_t cw_compile_disk_path(const char* dir,
                                             const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                             char** out_path);

// Creates `dir` and its missing parents (new ones 0700). Warns when the
// directory is writable by group or others.
CW_MUST_USE cw_status_t cw_compile_disk_prepare_dir(const char* dir);

// Reads and validates the entry for `key`: NOT_FOUND when there is none (a
// miss); DATA_LOSS when the file is not a valid entry for this key (it is
// then removed so it is not read again); files over `max_size` bytes are
// refused too. On success *out_bytes (malloc'd) holds *out_size payload
// bytes and the file's mtime is refreshed (eviction is oldest first).
CW_MUST_USE cw_status_t cw_compile_disk_read(const char* dir,
                                             const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                             uint64_t max_size, uint8_t** out_bytes,
                                             size_t* out_size);

// Writes the entry for `key` atomically (temporary file, 0600, rename).
CW_MUST_USE cw_status_t cw_compile_disk_write(const char* dir,
                                              const uint8_t key[CW_COMPILE_DISK_DIGEST_SIZE],
                                              const void* payload, size_t size);

// What a scan of the directory found and removed.
typedef struct cw_compile_disk_scan_s {
  uint64_t entries;      // entries kept
  uint64_t bytes;        // their total size (headers included)
  uint64_t pruned;       // removed: not valid entries
  uint64_t evicted;      // removed: the oldest, over the bound
  uint64_t temporaries;  // removed: temporary files a dead writer left (over an hour old)
} cw_compile_disk_scan_t;

// Scans `dir` (a listing and a stat per file, no payload read). Files named
// like entries ("*.cwx") that cannot be one are removed: another name than
// a key digest, not a regular file, shorter than a header; with
// `check_headers` also those whose header does not check out
// (cw_compile_disk_header_check: each entry's first 80 bytes are read; the
// payload checksum is checked only when an entry is looked up). Files with
// other names are not the cache's and are left alone. When the entries
// total more than `bound` bytes, the oldest (by mtime, refreshed on every
// hit) are removed until at most `target` (<= bound) remain.
// `stop` (may be NULL): once it reads true the scan ends with CANCELLED.
CW_MUST_USE cw_status_t cw_compile_disk_scan(const char* dir, uint64_t bound, uint64_t target,
                                             bool check_headers, const atomic_bool* stop,
                                             cw_compile_disk_scan_t* out);

// XLA serializes DebugOptions' map fields (CompileOptionsProto field 3
// ExecutableBuildOptions, its field 3 DebugOptions, map fields 357 and 500 in
// the pinned XLA) in hash order, which differs between processes: the same
// options then have different bytes. Returns a malloc'd copy of `data` (same
// size) with those map entries in byte order, for use in cache keys only;
// NULL when `data` does not parse as that nesting (then use it as is).
uint8_t* cw_compile_disk_canonical_options(const uint8_t* data, size_t size);

#endif  // CW_CONTROLLER_COMPILE_DISK_H_

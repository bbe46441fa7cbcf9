// The raw loopback TCP baseline of the benches (cw_bench, dispatch_bench): a
// peer thread in the bench's process on a TCP_NODELAY connection, answering
// 32-byte pings and taking bulk into a buffer; what any wire protocol on
// this host can at best do.
#ifndef CW_BENCH_RAW_H_
#define CW_BENCH_RAW_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cw_raw_s {
  int client_fd;  // the measuring side
  int peer_fd;    // the peer thread's side
  pthread_t thread;
  uint8_t* dst;  // peer's receive buffer (borrowed)
  size_t dst_cap;
  bool spin;        // both ends poll instead of sleeping in read
  bool failed;      // the peer thread stopped on an error
  char error[160];  // why the last call failed
} cw_raw_t;

// Connects and starts the peer; bulk of up to dst_cap bytes lands in dst
// (NULL, 0: pings only). `spin`: both ends poll the socket without sleeping,
// so no wakeup is on the path (the quickest round trip this host has; it
// holds two cores). False: raw->error says why.
bool cw_raw_start(cw_raw_t* raw, uint8_t* dst, size_t dst_cap, bool spin);
// Stops the peer and closes both ends.
void cw_raw_stop(cw_raw_t* raw);
// One 32-byte round trip; its seconds in *out_s.
bool cw_raw_ping(cw_raw_t* raw, double* out_s);
// n bytes to the peer until its 1-byte answer; the seconds in *out_s.
bool cw_raw_bulk(cw_raw_t* raw, const uint8_t* src, size_t n, double* out_s);

#endif  // CW_BENCH_RAW_H_

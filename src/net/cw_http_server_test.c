// Unit tests of the daemons' HTTP server in process: a libuv loop on this
// thread, a plain-socket client on another. What reaches the handler, what
// the server answers by itself (405, 400, 431), HEAD without a body, the
// connection cap closing the oldest idle peer (not one sending its request), and a close with connections still
// open leaving no handle behind (the loop closes cleanly; ASan: no leak).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_http_server.h"

typedef struct fixture_s {
  uv_loop_t loop;
  uv_async_t done;
  cw_http_server_t* server;
  int port;
  int handled;  // handler calls (loop thread)
  char last_path[CW_HTTP_MAX_PATH + 1];
  // Client results (client thread; read after join).
  char replies[8][1024];
  int oldest_closed;  // the first of CW_HTTP_SERVER_MAX_CONNS + 1 idle peers saw EOF
  int newest_open;    // the last one did not
} fixture_t;

static void handle(void* user, const cw_http_request_t* r, cw_http_response_t* out) {
  fixture_t* f = user;
  f->handled++;
  snprintf(f->last_path, sizeof(f->last_path), "%s", r->path);
  if (!strcmp(r->path, "/down")) {
    out->code = 503;
    cw_http_text_printf(&out->body, "not ready\n");
  } else if (!strcmp(r->path, "/missing")) {
    cw_http_response_error(out, 404);
  } else {
    out->content_type = "text/x-test";
    cw_http_text_printf(&out->body, "hello %s\n", r->path);
  }
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  struct timeval tv = {.tv_sec = 10};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `req` (len bytes) and reads until the server closes.
static void exchange(int port, const char* req, size_t len, char* out, size_t size) {
  out[0] = 0;
  int fd = connect_to(port);
  if (fd < 0) return;
  if (write(fd, req, len) != (ssize_t)len) {
    close(fd);
    return;
  }
  size_t n = 0;
  ssize_t r;
  while (n + 1 < size && (r = read(fd, out + n, size - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(fd);
}

static void* client(void* arg) {
  fixture_t* f = arg;
  static const char* const reqs[] = {
      "GET /hello?x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
      "HEAD /hello HTTP/1.0\r\n\r\n",
      "POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
      "GET nothing\r\n\r\n",
      "GET /down HTTP/1.1\r\n\r\n",
      "GET /missing HTTP/1.1\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); ++i) {
    exchange(f->port, reqs[i], strlen(reqs[i]), f->replies[i], sizeof(f->replies[i]));
  }
  // A head that never ends within the bound (exactly the bound: nothing is
  // left unread, so the close is a FIN, not a reset).
  char big[CW_HTTP_SERVER_MAX_REQUEST];
  memcpy(big, "GET /x HTTP/1.1\r\n", 17);
  memset(big + 17, 'a', sizeof(big) - 17);
  exchange(f->port, big, sizeof(big), f->replies[6], sizeof(f->replies[6]));
  // A request on its way (part of its head sent) and idle peers past the
  // cap: the oldest idle one is closed, the newest kept, and the one on its
  // way is answered once its head is whole.
  int slow = connect_to(f->port);
  static const char slow_head[] = "GET /slow HTTP/1.1\r\n";
  if (write(slow, slow_head, strlen(slow_head)) != (ssize_t)strlen(slow_head)) {
    close(slow);
    slow = -1;
  }
  usleep(20 * 1000);
  int fds[CW_HTTP_SERVER_MAX_CONNS + 1];
  for (int i = 0; i <= CW_HTTP_SERVER_MAX_CONNS; ++i) {
    fds[i] = connect_to(f->port);
    usleep(2000);  // accepted in order
  }
  char ch;
  f->oldest_closed = fds[0] >= 0 && read(fds[0], &ch, 1) == 0;
  struct timeval tv = {.tv_usec = 200 * 1000};
  setsockopt(fds[CW_HTTP_SERVER_MAX_CONNS], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  f->newest_open = read(fds[CW_HTTP_SERVER_MAX_CONNS], &ch, 1) < 0;
  if (slow >= 0 && write(slow, "\r\n", 2) == 2) {
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof(f->replies[7]) &&
           (r = read(slow, f->replies[7] + n, sizeof(f->replies[7]) - 1 - n)) > 0) {
      n += (size_t)r;
    }
    f->replies[7][n] = 0;
  }
  if (slow >= 0) close(slow);
  // Close the server with the others still open.
  uv_async_send(&f->done);
  usleep(100 * 1000);
  for (int i = 0; i <= CW_HTTP_SERVER_MAX_CONNS; ++i) {
    if (fds[i] >= 0) close(fds[i]);
  }
  return NULL;
}

static void on_done(uv_async_t* a) {
  fixture_t* f = a->data;
  cw_http_server_close(f->server);
  f->server = NULL;
  uv_close((uv_handle_t*)&f->done, NULL);
}

static void test_server(void** state) {
  fixture_t* f = calloc(1, sizeof(*f));
  assert_int_equal(uv_loop_init(&f->loop), 0);
  uv_async_init(&f->loop, &f->done, on_done);
  f->done.data = f;
  cw_status_t s = cw_http_server_create(&f->loop, "127.0.0.1:0", handle, f, &f->server);
  assert_null(s);
  const char* addr = cw_http_server_address(f->server);
  assert_true(!strncmp(addr, "127.0.0.1:", 10));
  f->port = atoi(addr + 10);
  assert_true(f->port > 0);
  pthread_t t;
  pthread_create(&t, NULL, client, f);
  uv_run(&f->loop, UV_RUN_DEFAULT);  // until on_done closed everything
  pthread_join(t, NULL);
  assert_int_equal(uv_loop_close(&f->loop), 0);  // no handle left open

  assert_string_equal(f->replies[0],
                      "HTTP/1.1 200 OK\r\nContent-Type: text/x-test\r\nContent-Length: 13\r\n"
                      "Connection: close\r\n\r\nhello /hello\n");
  assert_string_equal(f->replies[1],
                      "HTTP/1.1 200 OK\r\nContent-Type: text/x-test\r\nContent-Length: 13\r\n"
                      "Connection: close\r\n\r\n");
  assert_non_null(strstr(f->replies[2], "HTTP/1.1 405 Method Not Allowed\r\n"));
  assert_non_null(strstr(f->replies[2], "Allow: GET, HEAD\r\n"));
  assert_non_null(strstr(f->replies[3], "HTTP/1.1 400 Bad Request\r\n"));
  assert_non_null(strstr(f->replies[4], "HTTP/1.1 503 Service Unavailable\r\n"));
  assert_non_null(strstr(f->replies[4], "\r\n\r\nnot ready\n"));
  assert_non_null(strstr(f->replies[5], "HTTP/1.1 404 Not Found\r\n"));
  assert_non_null(strstr(f->replies[5], "\r\n\r\n404 Not Found\n"));
  assert_non_null(strstr(f->replies[6], "HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  assert_non_null(strstr(f->replies[7], "\r\n\r\nhello /slow\n"));
  // Only the well-formed GET and HEAD requests reached the handler.
  assert_int_equal(f->handled, 5);
  assert_string_equal(f->last_path, "/slow");
  assert_true(f->oldest_closed);
  assert_true(f->newest_open);
  free(f);
}

static void test_bad_address(void** state) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  cw_http_server_t* server = (cw_http_server_t*)&loop;  // must be cleared
  cw_status_t s = cw_http_server_create(&loop, "no-port", handle, NULL, &server);
  assert_non_null(s);
  assert_null(server);
  cw_status_free(s);
  // A socket path: said to be one (the parser's text offered paths).
  s = cw_http_server_create(&loop, "/tmp/m.sock", handle, NULL, &server);
  assert_non_null(s);
  assert_non_null(strstr(cw_status_message(s), "listens on host:port only, not on a Unix socket"));
  assert_null(server);
  cw_status_free(s);
  // A port held by another listener: refused, and what was opened closes.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 1), 0);
  socklen_t len = sizeof(sa);
  getsockname(fd, (struct sockaddr*)&sa, &len);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
  s = cw_http_server_create(&loop, addr, handle, NULL, &server);
  assert_non_null(s);
  assert_non_null(strstr(cw_status_message(s), "cannot listen on"));
  assert_null(server);
  cw_status_free(s);
  close(fd);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_server),
      cmocka_unit_test(test_bad_address),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

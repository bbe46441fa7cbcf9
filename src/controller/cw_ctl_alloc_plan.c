// Device allocation as a pure function: see cw_ctl_alloc_plan.h.
#include "cw_ctl_alloc_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool cw__alloc_named(const cw_alloc_request_t* r, const char* name) {
  if (!r->num_workers) return true;
  for (size_t i = 0; i < r->num_workers; ++i) {
    if (r->workers[i] && name && !strcmp(r->workers[i], name)) return true;
  }
  return false;
}

static bool cw__alloc_platform_ok(const cw_alloc_request_t* r, const char* platform) {
  return !r->platform || !r->platform[0] || (platform && !strcasecmp(r->platform, platform));
}

// Devices of worker `w` a request may take now.
static uint32_t cw__alloc_usable(const cw_alloc_worker_t* w, bool share) {
  uint32_t n = 0;
  for (uint32_t d = 0; d < w->num_devices; ++d) {
    n += w->use[d] == CW_ALLOC_FREE || (share && w->use[d] == CW_ALLOC_SHARED);
  }
  return n;
}

// Appends `count` usable devices of worker `wi` to out: for sharing, devices
// other sharers hold first (free ones stay free for exclusive requests).
static size_t cw__alloc_take(const cw_alloc_worker_t* workers, uint32_t wi, bool share,
                             uint32_t count, cw_alloc_device_t* out, size_t used) {
  const cw_alloc_worker_t* w = &workers[wi];
  uint32_t taken = 0;
  for (int pass = share ? 0 : 1; pass < 2 && taken < count; ++pass) {
    uint8_t want = pass == 0 ? CW_ALLOC_SHARED : CW_ALLOC_FREE;
    for (uint32_t d = 0; d < w->num_devices && taken < count; ++d) {
      if (w->use[d] != want) continue;
      out[used + taken].worker = wi;
      out[used + taken].local = d;
      taken++;
    }
  }
  // Local ids ascending within the worker: the session's ids follow them.
  cw_alloc_device_t* part = out + used;
  for (uint32_t i = 1; i < taken; ++i) {
    cw_alloc_device_t x = part[i];
    uint32_t j = i;
    for (; j > 0 && part[j - 1].local > x.local; --j) part[j] = part[j - 1];
    part[j] = x;
  }
  return used + taken;
}

// The island of worker k: its own index, or its island's first member's.
static uint32_t cw__alloc_group(const cw_alloc_worker_t* workers, size_t num_workers, size_t k) {
  return workers[k].grouped && workers[k].island < num_workers ? workers[k].island : (uint32_t)k;
}

bool cw_alloc_matches(const cw_alloc_request_t* r, const cw_alloc_worker_t* w) {
  return cw__alloc_named(r, w->name) && cw__alloc_platform_ok(r, w->platform);
}

// Appends `count` usable devices of island g: its matching members in
// worker order, each giving what it can.
static size_t cw__alloc_take_island(const cw_alloc_worker_t* workers, size_t num_workers,
                                    const cw_alloc_request_t* r, uint32_t g, uint32_t count,
                                    cw_alloc_device_t* out, size_t used) {
  for (size_t k = 0; k < num_workers && count; ++k) {
    if (cw__alloc_group(workers, num_workers, k) != g || !cw_alloc_matches(r, &workers[k]) ||
        !workers[k].alive) {
      continue;
    }
    uint32_t have = cw__alloc_usable(&workers[k], r->share);
    uint32_t c = have < count ? have : count;
    used = cw__alloc_take(workers, (uint32_t)k, r->share, c, out, used);
    count -= c;
  }
  return used;
}

static void cw__alloc_append(char* buf, size_t cap, size_t* used, const char* fmt,
                             const char* arg) {
  if (*used >= cap - 1) return;
  int n = snprintf(buf + *used, cap - *used, fmt, arg);
  if (n > 0) *used += (size_t)n < cap - *used ? (size_t)n : cap - *used - 1;
}

cw_status_t cw_alloc_plan(const cw_alloc_worker_t* workers, size_t num_workers,
                          const cw_alloc_request_t* r, cw_alloc_device_t* out, bool* out_wait,
                          uint32_t* out_usable, uint32_t* out_capacity) {
  *out_wait = false;
  *out_usable = 0;
  *out_capacity = 0;
  if (r->num_devices == 0) return cw_make_status(CW_INVALID_ARGUMENT, "asks for 0 devices");
  // Names and platform must exist at all.
  for (size_t i = 0; i < r->num_workers; ++i) {
    bool known = false;
    for (size_t k = 0; k < num_workers && !known; ++k) {
      known = r->workers[i] && workers[k].name && !strcmp(r->workers[i], workers[k].name);
    }
    if (known) continue;
    char names[512];
    size_t used = 0;
    names[0] = '\0';
    for (size_t k = 0; k < num_workers; ++k) {
      cw__alloc_append(names, sizeof(names), &used, used ? ", %s" : "%s", workers[k].name);
    }
    return cw_make_status(CW_INVALID_ARGUMENT, "unknown worker '%s' (workers: %s)",
                          r->workers[i] ? r->workers[i] : "", used ? names : "none");
  }
  if (r->platform && r->platform[0]) {
    bool known = false;
    char platforms[256];
    size_t used = 0;
    platforms[0] = '\0';
    for (size_t k = 0; k < num_workers; ++k) {
      known = known || cw__alloc_platform_ok(r, workers[k].platform);
      if (workers[k].platform && !strstr(platforms, workers[k].platform)) {
        cw__alloc_append(platforms, sizeof(platforms), &used, used ? ", %s" : "%s",
                         workers[k].platform);
      }
    }
    if (!known) {
      return cw_make_status(CW_INVALID_ARGUMENT, "no worker has platform '%s' (platforms: %s)",
                            r->platform, used ? platforms : "none");
    }
  }
  uint32_t min_island = r->min_island ? r->min_island : 1;
  uint32_t m = min_island < r->num_devices ? min_island : r->num_devices;
  uint32_t* avail = calloc(num_workers + 1, sizeof(*avail));
  uint32_t* order = calloc(num_workers + 1, sizeof(*order));
  uint64_t* size = calloc(num_workers + 1, sizeof(*size));  // matching devices per island
  if (!avail || !order || !size) {
    free(avail);
    free(order);
    free(size);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t k = 0; k < num_workers; ++k) {
    if (!cw_alloc_matches(r, &workers[k])) continue;
    uint32_t g = cw__alloc_group(workers, num_workers, k);
    size[g] += workers[k].num_devices;
    if (workers[k].alive) avail[g] += cw__alloc_usable(&workers[k], r->share);
  }
  uint64_t capacity = 0, largest = 0, usable = 0;
  size_t n = 0;
  for (size_t g = 0; g < num_workers; ++g) {
    if (size[g] > largest) largest = size[g];
    if (size[g] < m) continue;
    capacity += size[g];
    if (avail[g] < m) continue;
    usable += avail[g];
    order[n++] = (uint32_t)g;
  }
  free(size);
  *out_capacity = capacity > UINT32_MAX ? UINT32_MAX : (uint32_t)capacity;
  *out_usable = usable > UINT32_MAX ? UINT32_MAX : (uint32_t)usable;
  if (capacity < r->num_devices) {
    free(avail);
    free(order);
    if (largest && largest < m) {
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "asks for islands of at least %u devices; "
                            "the largest matching island has %llu", m,
                            (unsigned long long)largest);
    }
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "asks for %u devices; the matching workers "
                          "have %llu in all", r->num_devices, (unsigned long long)capacity);
  }
  if (usable < r->num_devices) {
    *out_wait = true;
    free(avail);
    free(order);
    return cw_ok_status();
  }
  // One island when possible: the best fit.
  size_t best = num_workers;
  for (size_t i = 0; i < n; ++i) {
    uint32_t k = order[i];
    if (avail[k] >= r->num_devices && (best == num_workers || avail[k] < avail[best])) best = k;
  }
  if (best < num_workers) {
    (void)cw__alloc_take_island(workers, num_workers, r, (uint32_t)best, r->num_devices, out, 0);
  } else {
    // The fewest islands: the largest first (stable by index), then put the
    // chosen ones back in worker order.
    for (size_t i = 1; i < n; ++i) {
      uint32_t x = order[i];
      size_t j = i;
      for (; j > 0 && avail[order[j - 1]] < avail[x]; --j) order[j] = order[j - 1];
      order[j] = x;
    }
    uint32_t left = r->num_devices;
    size_t chosen = 0;
    while (left && chosen < n) {
      uint32_t k = order[chosen++];
      left -= avail[k] < left ? avail[k] : left;
    }
    for (size_t i = 1; i < chosen; ++i) {
      uint32_t x = order[i];
      size_t j = i;
      for (; j > 0 && order[j - 1] > x; --j) order[j] = order[j - 1];
      order[j] = x;
    }
    // Take in worker order; the largest islands give all they have, so
    // compute each one's share from the descending pass.
    left = r->num_devices;
    uint32_t* share = calloc(num_workers + 1, sizeof(*share));
    if (!share) {
      free(avail);
      free(order);
      return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < chosen; ++i) share[order[i]] = avail[order[i]];
    // Trim the smallest chosen island(s) to what is still needed.
    uint64_t total = 0;
    for (size_t i = 0; i < chosen; ++i) total += share[order[i]];
    while (total > r->num_devices) {
      size_t smallest = chosen;
      for (size_t i = 0; i < chosen; ++i) {
        uint32_t k = order[i];
        if (share[k] && (smallest == chosen || share[k] < share[order[smallest]])) smallest = i;
      }
      uint32_t k = order[smallest];
      uint64_t cut = total - r->num_devices;
      uint32_t c = cut < share[k] ? (uint32_t)cut : share[k];
      share[k] -= c;
      total -= c;
    }
    size_t used = 0;
    for (size_t i = 0; i < chosen; ++i) {
      uint32_t k = order[i];
      if (share[k]) used = cw__alloc_take_island(workers, num_workers, r, k, share[k], out, used);
    }
    free(share);
  }
  free(avail);
  free(order);
  return cw_ok_status();
}

bool cw_alloc_reachable(const cw_alloc_worker_t* workers, size_t num_workers,
                        const cw_alloc_request_t* r) {
  size_t nd = 0;
  for (size_t k = 0; k < num_workers; ++k) nd += workers[k].num_devices;
  cw_alloc_worker_t* idle = calloc(num_workers + 1, sizeof(*idle));
  uint8_t* free_use = calloc(nd + 1, 1);  // CW_ALLOC_FREE everywhere
  cw_alloc_device_t* out = calloc((size_t)r->num_devices + 1, sizeof(*out));
  bool reachable = true;  // without memory: as before, it holds the queue
  if (idle && free_use && out) {
    for (size_t k = 0; k < num_workers; ++k) {
      idle[k] = workers[k];
      idle[k].use = free_use;
    }
    bool wait = false;
    uint32_t usable = 0, capacity = 0;
    cw_status_t st = cw_alloc_plan(idle, num_workers, r, out, &wait, &usable, &capacity);
    reachable = !st && !wait;
    cw_status_free(st);
  }
  free(idle);
  free(free_use);
  free(out);
  return reachable;
}

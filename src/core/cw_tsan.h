// Happens-before edges ThreadSanitizer cannot see. A vendor PJRT plugin is
// not built with TSan: when we register a callback with it and it calls us
// back on its own thread, the locks in between are invisible, and TSan
// reports what we wrote before registering as raced by what the callback
// reads. The PJRT C API promises that order; these name it for TSan, on the
// registration's record. Nothing outside a TSan build (-DCW_TSAN=ON).
#ifndef CW_CORE_TSAN_H_
#define CW_CORE_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define CW__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CW__TSAN 1
#endif
#endif

#ifdef CW__TSAN
#include <sanitizer/tsan_interface.h>
// Before handing `p` to another library's thread: what this thread wrote so far...
#define CW_TSAN_RELEASE(p) __tsan_release((void*)(p))
// ...is seen by the thread that takes `p` back in its callback.
#define CW_TSAN_ACQUIRE(p) __tsan_acquire((void*)(p))
#else
#define CW_TSAN_RELEASE(p) ((void)(p))
#define CW_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif  // CW_CORE_TSAN_H_

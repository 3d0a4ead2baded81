// alloc_hook.cpp — the replacements of the global operator new and delete behind
// alloc_hook.h: every variant (plain, array, nothrow, aligned, sized delete) allocates
// with malloc / posix_memalign, counts the live blocks, and, when the hook is armed on
// the calling thread, fails the chosen allocation. A real failure of malloc follows the
// standard: call the new-handler, or throw std::bad_alloc when there is none.
#include "alloc_hook.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace alloc_hook {
namespace {

thread_local bool tArmed = false;
thread_local bool tFailAllAfter = false;
thread_local bool tFailed = false;
thread_local uint64_t tCount = 0;
thread_local uint64_t tFailAt = 0;
std::atomic<uint64_t> gLive{0};

// True if this allocation is the one to fail.
bool injectFailure() {
  if (!tArmed) return false;
  ++tCount;
  if (tFailAllAfter ? tCount < tFailAt : tCount != tFailAt) return false;
  tFailed = true;
  return true;
}

void* obtain(std::size_t n, std::size_t align, bool nothrow) {
  if (injectFailure()) {
    if (nothrow) return nullptr;
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
      p = std::malloc(n);
    } else if (posix_memalign(&p, align, n) != 0) {
      p = nullptr;
    }
    if (p) {
      gLive.fetch_add(1, std::memory_order_relaxed);
      return p;
    }
    std::new_handler handler = std::get_new_handler();
    if (!handler) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (nothrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
  }
}

void release(void* p) noexcept {
  if (!p) return;
  gLive.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

void arm(uint64_t n, bool andAllAfter) {
  tCount = 0;
  tFailAt = n;
  tFailAllAfter = andAllAfter;
  tFailed = false;
  tArmed = true;
}

uint64_t disarm() {
  tArmed = false;
  return tCount;
}

bool failed() { return tFailed; }

uint64_t liveBlocks() { return gLive.load(std::memory_order_relaxed); }

}  // namespace alloc_hook

using alloc_hook::obtain;
using alloc_hook::release;

void* operator new(std::size_t n) { return obtain(n, 0, false); }
void* operator new[](std::size_t n) { return obtain(n, 0, false); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return obtain(n, 0, true); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return obtain(n, 0, true); }
void* operator new(std::size_t n, std::align_val_t a) {
  return obtain(n, static_cast<std::size_t>(a), false);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return obtain(n, static_cast<std::size_t>(a), false);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return obtain(n, static_cast<std::size_t>(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return obtain(n, static_cast<std::size_t>(a), true);
}

void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }

// alloc_hook.h — a test hook on every C++ allocation of the process (alloc_hook.cpp
// replaces the global operator new and delete, all their variants).
//
// Armed, it counts the operator new calls of the arming thread and makes the N-th one
// fail as if memory had run out (std::bad_alloc, or nullptr for the nothrow forms):
// only that one, or that one and every one after it (memory that stays exhausted). It
// also counts the blocks alive, so a test can see that what a failed run allocated was
// all given back.
#pragma once
#include <cstdint>

namespace alloc_hook {

// From now on, the n-th operator new of this thread fails (n >= 1; counting restarts),
// and with `andAllAfter` every later one too.
void arm(uint64_t n, bool andAllAfter = false);
// Stops counting and failing. Returns how many allocations were counted while armed.
uint64_t disarm();
// Whether the armed failure happened (since the last arm).
bool failed();
// Blocks obtained from operator new and not yet deleted (all threads).
uint64_t liveBlocks();

// Arms for the lifetime of a scope: the result of the run is only looked at after it.
class Armed {
 public:
  explicit Armed(uint64_t n) { arm(n); }
  ~Armed() { disarm(); }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;
};

}  // namespace alloc_hook

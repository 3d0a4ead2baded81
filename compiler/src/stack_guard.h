// stack_guard.h — bounds the C++ stack the compiler's recursive passes may use.
//
// The expander, code generator and reverse transform recurse along the nesting of
// the source (never along data). Instead of a fixed depth, which means different
// things with and without sanitizers, they measure the stack they have used since
// the top-level entry and stop with a clean "nested too deeply" error past a budget
// well inside the 8 MB of a default thread stack.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dlam {

class StackGuard {
 public:
  static constexpr size_t kBudget = size_t(2) << 20;

  StackGuard() : base_(here()) {}
  explicit StackGuard(uintptr_t base) : base_(base) {}
  uintptr_t base() const { return base_; }
  bool exceeded() const {
    uintptr_t now = here();
    return now < base_ && base_ - now > kBudget;
  }

 private:
  static uintptr_t here() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }
  uintptr_t base_;
};

}  // namespace dlam

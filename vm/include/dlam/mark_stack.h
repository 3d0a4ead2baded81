// mark_stack.h — the collector's work list of grey objects (vm/src/heap.cpp): a stack
// whose push is one compare and one store, inline at every marking site. (The
// std::vector it replaces had its push_back called out of line there, some twenty
// instructions a push, a few percent of programs that allocate much.) It grows by
// doubling, with operator new, and throws std::bad_alloc when it cannot, as the
// collector expects.
#pragma once
#include <cstddef>

namespace dlam {

struct Obj;

class MarkStack {
 public:
  MarkStack() = default;
  MarkStack(const MarkStack&) = delete;
  MarkStack& operator=(const MarkStack&) = delete;
  ~MarkStack() { delete[] base_; }

  [[gnu::always_inline]] void push(Obj* o) {
    if (top_ == end_) [[unlikely]]
      grow(0);
    *top_++ = o;
  }
  bool empty() const { return top_ == base_; }
  Obj* pop() { return *--top_; }
  // Room for n objects without growing.
  void reserve(size_t n) {
    if (static_cast<size_t>(end_ - base_) < n) grow(n);
  }

 private:
  [[gnu::noinline]] void grow(size_t atLeast);

  Obj** base_ = nullptr;
  Obj** top_ = nullptr;
  Obj** end_ = nullptr;
};

}  // namespace dlam

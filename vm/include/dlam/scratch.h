// scratch.h — a short array for argument lists built in C++: on the C++ stack for
// the usual handful of elements, on the heap past that.
#pragma once
#include <cstddef>
#include <vector>

namespace dlam {

template <class T, size_t N = 8>
class Scratch {
 public:
  explicit Scratch(size_t n) {
    if (n > N) {
      big_.resize(n);
      data_ = big_.data();
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  T small_[N];
  std::vector<T> big_;
  T* data_ = small_;
};

}  // namespace dlam

// mapped_array.h — MappedArray<T>, the growable array behind the VM's register stack and
// frame stack: its memory is mapped from the kernel and grows with mremap (Linux), which
// moves pages rather than copying them. So a recursion a million frames deep costs the memory
// it touches: no old copy alongside the new one while growing (std::vector's peak is the
// old array plus the new), and no fill of the capacity not used yet (the kernel's pages
// are zero until written). T must be trivially copyable, with all-zero bytes a valid T
// (a Value of all zero bits is the number 0).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

namespace dlam {

// Without mremap: a new mapping of newBytes holding the first usedBytes of the old one
// (oldBytes long, or none), which is unmapped; MAP_FAILED (the old one kept) if refused.
inline void* remapByCopy(void* old, size_t oldBytes, size_t usedBytes, size_t newBytes) {
  void* p = mmap(nullptr, newBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || !old) return p;
  std::memcpy(p, old, usedBytes);
  munmap(old, oldBytes);
  return p;
}

template <class T>
class MappedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  MappedArray() = default;
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  ~MappedArray() {
    if (data_) munmap(data_, capacity_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  void push_back(const T& v) {
    if (size_ == capacity_) reserve(size_ + 1);
    data_[size_++] = v;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  // Elements past the old size keep what they held (zero if never written).
  void resize(size_t n) {
    reserve(n);
    size_ = n;
  }
  // Room for at least n elements, doubling; throws std::bad_alloc when the kernel refuses.
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t want = capacity_ * 2 > n ? capacity_ * 2 : n;
    if (want > SIZE_MAX / sizeof(T) - page) throw std::bad_alloc();
    size_t bytes = (want * sizeof(T) + page - 1) / page * page;
#ifdef __linux__
    void* p =
        data_ ? mremap(data_, capacity_ * sizeof(T), bytes, MREMAP_MAYMOVE)
              : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#else
    void* p = remapByCopy(data_, capacity_ * sizeof(T), size_ * sizeof(T), bytes);
#endif
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    capacity_ = bytes / sizeof(T);
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace dlam

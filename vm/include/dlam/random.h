// random.h — the VM's pseudo-random generator: xoshiro256** (Blackman and Vigna, 2018),
// seeded through splitmix64, so one 64-bit seed gives the same sequence on every machine.
//
// Each VM owns one generator (VM::random); nothing is shared between VMs. The
// derived draws are fixed algorithms too, written down here and in docs/language.md:
//   real     (next() >> 11) * 2^-53, uniform in [0, 1)
//   integer  in [0, n): the top bits of next() by rejection (no modulo bias)
//   normal   Marsaglia's polar method on two reals mapped to (-1, 1); the second
//            deviate of each pair is kept for the next call
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>

namespace dlam {

class Random {
 public:
  explicit Random(uint64_t s) { seed(s); }
  // Seeded from the clock, mixed with salt (the VM's address: VMs made in the same
  // nanosecond still differ).
  static Random fromClock(const void* salt) {
    auto t = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return Random(static_cast<uint64_t>(t) ^ reinterpret_cast<uintptr_t>(salt));
  }

  void seed(uint64_t seed) {
    for (uint64_t& w : s_) w = splitmix64(seed);
    hasSpare_ = false;
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  double real() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n) for 1 <= n <= 2^53: the smallest mask covering n - 1, and
  // draws above it rejected (each draw is kept with probability > 1/2).
  uint64_t below(uint64_t n) {
    uint64_t mask = n - 1;
    for (int sh = 1; sh < 64; sh <<= 1) mask |= mask >> sh;
    for (;;) {
      uint64_t x = next() >> 11 & mask;
      if (x < n) return x;
    }
  }

  double normal() {
    if (hasSpare_) {
      hasSpare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2 * real() - 1;
      v = 2 * real() - 1;
      s = u * u + v * v;
    } while (s >= 1 || s == 0);
    double k = std::sqrt(-2 * std::log(s) / s);
    spare_ = v * k;
    hasSpare_ = true;
    return u * k;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
  double spare_ = 0;
  bool hasSpare_ = false;
};

}  // namespace dlam

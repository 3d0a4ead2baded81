// failure_points.h — which allocations the allocation-failure sweeps fail
// (tests/reliability/cpp_allocation_failure_test.cpp for C++ allocations,
// tests/unit/reliability_test.cpp for the GC heap's hook).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace dlam::test {

// DLAM_RELIABILITY_EXHAUSTIVE=1: every failure point (slow; not in CI).
inline bool exhaustive() {
  const char* v = std::getenv("DLAM_RELIABILITY_EXHAUSTIVE");
  return v && *v && *v != '0';
}

// 1..dense one by one, then about `spread` more points with an odd stride (so they do
// not all fall on the same phase of a loop), ending at `total`; all of them when there
// are no more than dense + spread, or when exhaustive. total 0: unknown, up to 2,000,000
// (the caller stops at the first run that needs no failure).
inline std::vector<uint64_t> failurePoints(uint64_t dense, uint64_t spread, uint64_t total) {
  uint64_t end = total ? total : 2000000;
  std::vector<uint64_t> ns;
  if (exhaustive() || (total && total <= dense + spread)) {
    for (uint64_t n = 1; n <= end; ++n) ns.push_back(n);
    return ns;
  }
  for (uint64_t n = 1; n <= dense; ++n) ns.push_back(n);
  uint64_t stride = total ? std::max<uint64_t>(1, (total - dense + spread - 1) / spread) | 1 : 37;
  for (uint64_t n = dense + stride; n <= end; n += stride) ns.push_back(n);
  if (total && ns.back() != total) ns.push_back(total);
  return ns;
}

}  // namespace dlam::test

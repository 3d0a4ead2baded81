// mapped_array_test.cpp — MappedArray (vm/include/dlam/mapped_array.h), the memory of the
// VM's register and frame stacks: what it keeps across growth, what new elements hold,
// how it grows, and that a refusal is std::bad_alloc.
#include "dlam/mapped_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

namespace {

using dlam::MappedArray;

struct Frame {
  void* p;
  uint32_t a;
  uint8_t b;
};

TEST(MappedArray, KeepsItsElementsAcrossGrowthAndNewOnesAreZero) {
  MappedArray<uint64_t> a;
  EXPECT_TRUE(a.empty());
  for (uint64_t i = 0; i < 3000000; ++i) a.push_back(i * 7 + 1);  // many growths, each a move
  ASSERT_EQ(a.size(), 3000000u);
  for (uint64_t i = 0; i < 3000000; i += 999) ASSERT_EQ(a[i], i * 7 + 1);
  EXPECT_EQ(a.back(), 2999999u * 7 + 1);
  // Growing by resize: the old elements stay, the new ones (never written) are zero.
  a.resize(10000000);
  EXPECT_EQ(a[2999999], 2999999u * 7 + 1);
  EXPECT_EQ(a[3000000], 0u);
  EXPECT_EQ(a[9999999], 0u);
  // Shrinking keeps the memory: growing again shows what was there.
  a.resize(10);
  EXPECT_EQ(a.size(), 10u);
  a.resize(20);
  EXPECT_EQ(a[15], 15u * 7 + 1);
  a.pop_back();
  EXPECT_EQ(a.size(), 19u);
  a.clear();
  EXPECT_TRUE(a.empty());
}

TEST(MappedArray, HoldsStructsAndIteratesLikeAVector) {
  MappedArray<Frame> f;
  for (uint32_t i = 0; i < 100000; ++i) f.push_back(Frame{&f, i, static_cast<uint8_t>(i)});
  uint64_t sum = 0;
  for (const Frame& x : f) sum += x.a;
  EXPECT_EQ(sum, 100000ull * 99999 / 2);
  EXPECT_EQ(f[77777].b, static_cast<uint8_t>(77777));
  EXPECT_EQ(f.end() - f.begin(), 100000);
}

TEST(MappedArray, ASizeTheKernelCannotMapIsBadAlloc) {
  MappedArray<uint64_t> a;
  a.push_back(5);
  EXPECT_THROW(a.reserve(SIZE_MAX / 4), std::bad_alloc);  // past what a size_t can count in bytes
  EXPECT_THROW(a.reserve(uint64_t(1) << 50), std::bad_alloc);  // 8 PB: past the address space
  EXPECT_EQ(a[0], 5u);                                         // and the array is as it was
  EXPECT_EQ(a.size(), 1u);
}

// The growth used where there is no mremap: the used bytes move to a new mapping, the
// rest reads as zero, the old mapping is gone.
TEST(MappedArray, GrowthByCopyKeepsTheUsedPart) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* old = dlam::remapByCopy(nullptr, 0, 0, 2 * page);
  ASSERT_NE(old, MAP_FAILED);
  auto* words = static_cast<uint64_t*>(old);
  for (size_t i = 0; i < 2 * page / 8; ++i) words[i] = i + 1;
  void* grown = dlam::remapByCopy(old, 2 * page, page, 8 * page);  // the first page is in use
  ASSERT_NE(grown, MAP_FAILED);
  auto* g = static_cast<uint64_t*>(grown);
  EXPECT_EQ(g[0], 1u);
  EXPECT_EQ(g[page / 8 - 1], page / 8);
  EXPECT_EQ(g[page / 8], 0u);  // past the used part: fresh zero pages
  EXPECT_EQ(g[8 * page / 8 - 1], 0u);
  munmap(grown, 8 * page);
  EXPECT_EQ(dlam::remapByCopy(nullptr, 0, 0, size_t(1) << 62), MAP_FAILED);
}

}  // namespace

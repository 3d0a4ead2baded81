// arena_test.cpp — the VM's object arena (dlam/arena.h) on its own, and the heap
// accounting of the VM built on it: slots of every size class and large blocks, a sweep
// that frees the unmarked and keeps the marked (and their marks), pages untouched since
// the last sweep left as they are, freed slots reused, emptied pages given back,
// footprints and compiled code counted in the live bytes, the heap limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "dlam/arena.h"
#include "dlam/compiler.h"
#include "dlam/error.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Arena;
using dlam::Obj;
using dlam::ObjType;
using dlam::Value;
using dlam::VM;

// What the arena's sweeps freed since the last take() (Arena::swept() adds up).
struct SweptSince {
  explicit SweptSince(const Arena& arena) : a(arena), last(arena.swept()) {}
  Arena::Freed take() {
    const Arena::Freed& now = a.swept();
    Arena::Freed d{now.bytes - last.bytes, now.objects - last.objects,
                   now.pagesSkipped - last.pagesSkipped, now.pagesEmptied - last.pagesEmptied};
    last = now;
    return d;
  }
  const Arena& a;
  Arena::Freed last;
};

// An arena object as the VM makes one: a header (type, mark 0), then `bytes - 8` bytes
// of a pattern that tells objects apart.
struct Made {
  char* p;
  size_t bytes;
  uint8_t fill;
};

Made make(Arena& a, size_t bytes, uint8_t fill) {
  auto* p = static_cast<char*>(a.allocate(bytes));
  EXPECT_NE(p, nullptr);
  uint64_t header = static_cast<uint8_t>(ObjType::Vector);
  std::memcpy(p, &header, sizeof header);
  std::memset(p + 8, fill, bytes - 8);
  return {p, bytes, fill};
}

bool intact(const Made& m) {
  if (static_cast<Obj*>(static_cast<void*>(m.p))->type != ObjType::Vector) return false;
  for (size_t i = 8; i < m.bytes; ++i)
    if (static_cast<uint8_t>(m.p[i]) != m.fill) return false;
  return true;
}

// n objects of `bytes` bytes filled with `fill`, made one after another.
std::vector<Made> makeMany(Arena& a, int n, size_t bytes, uint8_t fill) {
  std::vector<Made> made;
  for (int i = 0; i < n; ++i) made.push_back(make(a, bytes, fill));
  return made;
}

Obj* obj(const Made& m) { return static_cast<Obj*>(static_cast<void*>(m.p)); }
// Marks as the collector does.
void mark(Arena& a, const Made& m) { a.mark(obj(m), Arena::footprint(m.bytes)); }

// The objects in the arena. (A page with nothing marked is emptied without a walk, so
// what a sweep freed is counted from what is left.)
uint64_t objects(Arena& a) {
  uint64_t n = 0;
  a.forEachObject([&](Obj*) { ++n; });
  return n;
}

// The page of a small object: pages are aligned to their size.
uintptr_t pageOf(const Made& m) {
  return reinterpret_cast<uintptr_t>(m.p) & ~uintptr_t(Arena::kPageBytes - 1);
}

// Marks the objects made[i] for which keep(i) holds, adding them to `survivors`.
template <class Keep>
void markSurvivors(Arena& a, const std::vector<Made>& made, std::set<char*>& survivors, Keep keep) {
  for (size_t i = 0; i < made.size(); ++i)
    if (keep(i)) {
      mark(a, made[i]);
      survivors.insert(made[i].p);
    }
}

// Whether every object of `made` that is a survivor still has its contents.
bool survivorsIntact(const std::vector<Made>& made, const std::set<char*>& survivors) {
  for (const Made& m : made)
    if (survivors.count(m.p) && !intact(m)) return false;
  return true;
}

// Makes n objects of `bytes` bytes, adding their slots to `taken`: none may be a survivor
// or a slot taken before.
void takeSlots(Arena& a, uint64_t n, size_t bytes, const std::set<char*>& survivors,
               std::set<char*>& taken) {
  for (uint64_t i = 0; i < n; ++i) {
    char* p = make(a, bytes, 10).p;
    EXPECT_FALSE(survivors.count(p));
    EXPECT_TRUE(taken.insert(p).second);
  }
}

TEST(Arena, EverySizeIsAlignedDistinctAndCountedByItsFootprint) {
  Arena a;
  std::vector<Made> made;
  uint64_t largeFootprints = 0, large = 0;
  for (size_t bytes = 9; bytes <= 3000; bytes += 7) {
    made.push_back(make(a, bytes, static_cast<uint8_t>(bytes)));
    if (bytes > Arena::kMaxSmall) largeFootprints += Arena::footprint(bytes), ++large;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(made.back().p) % 8, 0u) << bytes;
  }
  // Slots are 16 bytes at least, then every multiple of 8.
  EXPECT_EQ(Arena::footprint(9), 16u);
  EXPECT_EQ(Arena::footprint(17), 24u);
  EXPECT_EQ(Arena::footprint(24), 24u);
  EXPECT_EQ(Arena::footprint(32), 32u);
  EXPECT_EQ(Arena::footprint(33), 40u);
  EXPECT_EQ(Arena::footprint(512), 512u);
  EXPECT_GT(Arena::footprint(513), 528u);  // a large block: its header too
  for (const Made& m : made) EXPECT_TRUE(intact(m)) << m.bytes;
  EXPECT_GT(a.largeObjects(), 0u);
  EXPECT_GE(a.pages(), Arena::kClasses);  // every size class has its page

  // All marked: nothing freed, marks kept.
  for (const Made& m : made) mark(a, m);
  Arena::Freed none = a.sweep();
  EXPECT_EQ(none.objects, 0u);
  EXPECT_EQ(none.bytes, 0u);
  for (const Made& m : made) {
    EXPECT_TRUE(intact(m)) << m.bytes;
    EXPECT_TRUE(a.isMarked(obj(m)));
  }
  // Again: still nothing.
  EXPECT_EQ(a.sweep().objects, 0u);
  // None marked: everything freed; the pages are emptied without a walk, the large
  // blocks counted by footprint.
  a.unmarkAll();
  for (const Made& m : made) EXPECT_FALSE(a.isMarked(obj(m)));
  EXPECT_EQ(objects(a), made.size());
  uint64_t pages = a.pages();
  Arena::Freed all = a.sweep();
  EXPECT_EQ(objects(a), 0u);
  EXPECT_EQ(all.objects, large);
  EXPECT_EQ(all.bytes, largeFootprints);
  EXPECT_EQ(all.pagesEmptied, pages);
  EXPECT_EQ(a.pages(), Arena::kClasses);  // one kept per class
  EXPECT_EQ(a.largeObjects(), 0u);
  EXPECT_EQ(a.heldBytes(), a.pages() * Arena::kPageBytes);
  // A second sweep finds nothing more.
  EXPECT_EQ(a.sweep().objects, 0u);
}

TEST(Arena, FreedSlotsAreReused) {
  Arena a;
  std::vector<Made> made = makeMany(a, 5000, 32, 1);
  uint64_t pages = a.pages();
  // Every hundredth survives (so every page keeps an object).
  std::set<char*> survivors;
  markSurvivors(a, made, survivors, [](size_t i) { return i % 100 == 0; });
  EXPECT_EQ(a.sweep().objects, 5000u - survivors.size());
  // The freed slots take the new objects: no new page.
  for (size_t i = 0; i < 5000 - survivors.size(); ++i)
    EXPECT_FALSE(survivors.count(make(a, 32, 2).p));
  EXPECT_EQ(a.pages(), pages);
  for (size_t i = 0; i < made.size(); i += 100) EXPECT_TRUE(intact(made[i]));
}

// A refill carves a few KiB of a page and hands out its slots by bumping a pointer, so
// a slot is written once, by its object. The carved slots not handed out yet become
// free slots only when a walk of the pages comes first (forEachObject, a sweep).
TEST(Arena, CarvedSlotsNotHandedOutYetAreFreeSlotsToAWalk) {
  Arena a;
  std::vector<Made> made = makeMany(a, 3, 48, 1);
  EXPECT_EQ(made[1].p, made[0].p + 48);
  EXPECT_EQ(made[2].p, made[1].p + 48);
#ifdef DLAM_ARENA_ASAN
  EXPECT_NE(__asan_region_is_poisoned(made[2].p + 48, 48), nullptr);
#endif
  EXPECT_EQ(objects(a), 3u);
  for (const Made& m : made) mark(a, m);
  EXPECT_EQ(a.sweep().objects, 0u);
  EXPECT_EQ(objects(a), 3u);
  // The slots after the third are free, first on the list (in address order), and the
  // rest of the page fills before another page is taken.
  Made next = make(a, 48, 2);
  EXPECT_EQ(next.p, made[2].p + 48);
  Made last = next;
  for (;;) {
    Made m = make(a, 48, 3);
    if (a.pages() > 1) break;
    EXPECT_EQ(m.p, last.p + 48);
    last = m;
  }
  EXPECT_LT(pageOf(last) + Arena::kPageBytes - reinterpret_cast<uintptr_t>(last.p + 48), 48u);
  for (const Made& m : made) EXPECT_TRUE(intact(m));
  EXPECT_TRUE(intact(next));
}

// A slot is written once, by its object: carving a page does not write into the slots
// it has not handed out yet. (An emptied page keeps the bytes of its dead until then.)
TEST(Arena, CarvingWritesNoSlotBeforeHandingItOut) {
  Arena a;
  std::vector<Made> made = makeMany(a, 3, 48, 1);
  a.unmarkAll();
  a.sweep();  // nothing marked: the page is emptied without a walk, and carved again
  ASSERT_EQ(a.pages(), 1u);
  Made again = make(a, 48, 2);
  EXPECT_EQ(again.p, made[0].p);
#ifdef DLAM_ARENA_ASAN
  EXPECT_NE(__asan_region_is_poisoned(made[1].p, 48), nullptr);
#else
  EXPECT_TRUE(intact(made[1]));  // carved, not handed out: untouched
  EXPECT_TRUE(intact(made[2]));
#endif
  EXPECT_EQ(make(a, 48, 3).p, made[1].p);
  EXPECT_EQ(objects(a), 2u);
}

TEST(Arena, SurvivorsKeepTheirContentsWhileNewObjectsFillTheGaps) {
  Arena a;
  std::vector<Made> live;
  for (int round = 0; round < 6; ++round) {
    std::vector<Made> all = live;
    for (int i = 0; i < 20000; ++i) {
      size_t bytes = 16 + (i * 37 + round * 11) % 600;
      all.push_back(make(a, bytes, static_cast<uint8_t>(i + round)));
    }
    live.clear();
    for (size_t i = 0; i < all.size(); ++i)
      if ((i * 2654435761u >> 7) % 3 == 0) live.push_back(all[i]);
    a.unmarkAll();
    for (const Made& m : live) mark(a, m);
    EXPECT_EQ(objects(a), all.size());
    a.sweep();
    EXPECT_EQ(objects(a), live.size());
    for (const Made& m : live)
      ASSERT_TRUE(intact(m)) << "round " << round << ", " << m.bytes << " bytes";
  }
}

TEST(Arena, EmptiedPagesGoBackToTheAllocator) {
  Arena a;
  std::vector<Made> made = makeMany(a, 100000, 32, 3);
  uint64_t full = a.pages();
  EXPECT_GE(full, 100000 * 32 / Arena::kPageBytes);
  // One object in ten thousand survives: its pages stay, the others go (one kept spare).
  for (size_t i = 0; i < made.size(); i += 10000) mark(a, made[i]);
  a.sweep();
  EXPECT_LE(a.pages(), 10u + 1u);
  EXPECT_GE(a.pages(), 10u);
  for (size_t i = 0; i < made.size(); i += 10000) EXPECT_TRUE(intact(made[i]));
  // Nothing survives: one page is kept for the next allocations.
  a.unmarkAll();
  a.sweep();
  EXPECT_EQ(a.pages(), 1u);
  EXPECT_EQ(a.heldBytes(), Arena::kPageBytes);
  // Allocating again starts from the kept page.
  make(a, 32, 4);
  EXPECT_EQ(a.pages(), 1u);
}

// Marks stay from sweep to sweep (the collector is generational), so a page in which
// nothing was allocated since the last sweep is not walked again: its free slots go back
// on the free list as they were. The free list must come out whole all the same.
TEST(Arena, PagesUntouchedSinceTheLastSweepAreSkippedAndTheirFreeSlotsKept) {
  Arena a;
  std::vector<Made> made = makeMany(a, 20000, 48, 7);
  uint64_t pages = a.pages();
  ASSERT_GE(pages, 10u);
  // Every third survives: every page walked, two thirds of the slots free.
  std::set<char*> survivors;
  markSurvivors(a, made, survivors, [](size_t i) { return i % 3 == 0; });
  Arena::Freed f1 = a.sweep();
  EXPECT_EQ(f1.objects, made.size() - survivors.size());
  EXPECT_EQ(f1.pagesSkipped, 0u);
  uint64_t freeSlots = f1.objects;
  // Nothing allocated: every page is skipped, nothing freed.
  Arena::Freed f2 = a.sweep();
  EXPECT_EQ(f2.objects, 0u);
  EXPECT_EQ(f2.pagesSkipped, pages);
  // A few new objects (unmarked: garbage) land in the first page(s) of the free list:
  // only those pages are walked, and the new objects freed.
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(survivors.count(make(a, 48, 8).p));
  Arena::Freed f3 = a.sweep();
  EXPECT_EQ(f3.objects, 100u);
  EXPECT_GE(f3.pagesSkipped, pages - 2);
  EXPECT_LT(f3.pagesSkipped, pages);
  // Some new objects survive this time (marked, like the old ones).
  std::vector<Made> young = makeMany(a, 3000, 48, 9);
  markSurvivors(a, young, survivors, [](size_t i) { return i % 2 == 0; });
  Arena::Freed f4 = a.sweep();
  EXPECT_EQ(f4.objects, young.size() / 2);
  freeSlots -= (young.size() + 1) / 2;
  // The free list holds every free slot exactly once, and no survivor: taking them all
  // needs no new page and never returns a live object or the same slot twice.
  std::set<char*> taken;
  takeSlots(a, freeSlots, 48, survivors, taken);
  EXPECT_EQ(a.pages(), pages);
  // The next one comes from slots never used (the newest page's rest, or a new page).
  char* next = make(a, 48, 11).p;
  EXPECT_FALSE(survivors.count(next) || taken.count(next));
  for (size_t i = 0; i < made.size(); i += 3) ASSERT_TRUE(intact(made[i]));
  for (size_t i = 0; i < young.size(); i += 2) ASSERT_TRUE(intact(young[i]));
  // After unmarkAll no page is skipped, and the unmarked are freed (here all: their
  // pages are emptied).
  a.unmarkAll();
  EXPECT_EQ(objects(a), survivors.size() + taken.size() + 1);
  Arena::Freed f5 = a.sweep();
  EXPECT_EQ(f5.pagesSkipped, 0u);
  EXPECT_GE(f5.pagesEmptied, pages);
  EXPECT_EQ(objects(a), 0u);
}

// A minor collection's sweep is lazy: the dead are freed only when the allocator needs
// their slots, page by page. What the lazy sweeps free is counted, every slot is handed
// out once, and no survivor is.
TEST(Arena, ALazySweepFreesPageByPageAsTheAllocatorNeedsSlots) {
  Arena a;
  SweptSince swept(a);
  std::vector<Made> made = makeMany(a, 20000, 32, 5);
  uint64_t pages = a.pages();
  ASSERT_GE(pages, 9u);
  // Every fourth survives, and the first 500 made (at the start of the oldest page,
  // which the lazy sweep reaches last: it goes from the newest page to the oldest).
  std::set<char*> survivors;
  markSurvivors(a, made, survivors, [](size_t i) { return i % 4 == 0 || i < 500; });
  Arena::Freed large = a.sweepLazily();
  EXPECT_EQ(large.objects, 0u);
  // Nothing is freed yet: the dead keep their contents until their page is swept.
  EXPECT_EQ(swept.take().objects, 0u);
  EXPECT_TRUE(intact(made[made.size() - 3]));
  // One allocation sweeps one page (the newest) and takes its first free slot.
  char* first = make(a, 32, 6).p;
  EXPECT_FALSE(survivors.count(first));
  Arena::Freed one = swept.take();
  EXPECT_GT(one.objects, 0u);
  EXPECT_LT(one.objects, 2100u);
  EXPECT_FALSE(intact(made[made.size() - 3]));  // freed: its page was swept
  EXPECT_TRUE(intact(made[501]));               // dead, but its page (the oldest) is not swept yet
  // Taking every dead slot sweeps every page, needs no new one, and never hands out a
  // survivor or a slot twice.
  uint64_t dead = made.size() - survivors.size();
  std::set<char*> taken{first};
  takeSlots(a, dead - 1, 32, survivors, taken);
  EXPECT_EQ(one.objects + swept.take().objects, dead);
  EXPECT_EQ(a.pages(), pages);
  EXPECT_TRUE(survivorsIntact(made, survivors));
  // unmarkAll (a full collection begins) cancels what is left of a lazy sweep: the
  // survivors, unmarked now, are not taken for dead by the allocator.
  a.sweepLazily();
  a.unmarkAll();
  std::set<char*> fresh;
  for (int i = 0; i < 3000; ++i) {
    char* p = make(a, 32, 8).p;
    EXPECT_FALSE(survivors.count(p) || taken.count(p));
    fresh.insert(p);
  }
  EXPECT_TRUE(survivorsIntact(made, survivors));
  // Nothing is marked now: a lazy sweep empties every page, without walking one.
  EXPECT_EQ(objects(a), survivors.size() + taken.size() + fresh.size());
  uint64_t held = a.pages();
  a.sweepLazily();
  Made last = make(a, 32, 9);
  Arena::Freed emptied = swept.take();
  EXPECT_EQ(emptied.pagesEmptied, held);
  EXPECT_EQ(emptied.objects, 0u);
  EXPECT_EQ(objects(a), 1u);
  EXPECT_EQ(a.pages(), held);
  // And a full sweep then frees the one made since.
  a.sweep();
  EXPECT_EQ(objects(a), 0u);
  EXPECT_NE(last.p, nullptr);
}

// A page whose carved slots all hold marked objects (the tape of a gradient that
// survived its first collection) has nothing to free: neither sweep walks it. The
// allocator then takes its slots from elsewhere, never a survivor's.
TEST(Arena, PagesWhoseSlotsAllLiveAreNotWalked) {
  for (bool lazy : {false, true}) {
    Arena a;
    SweptSince swept(a);
    std::vector<Made> made = makeMany(a, 20000, 48, 3);
    uint64_t pages = a.pages();
    ASSERT_GE(pages, 10u);
    std::set<char*> survivors;
    markSurvivors(a, made, survivors, [](size_t) { return true; });
    Arena::Freed f = lazy ? a.sweepLazily() : a.sweep();
    // More than the free slots of the page being carved: the allocator goes through
    // every page (the lazy sweep's turn comes then), then carves new ones.
    std::set<char*> taken;
    takeSlots(a, 5000, 48, survivors, taken);
    if (lazy) f = swept.take();
    EXPECT_EQ(f.objects, 0u);
    // All but the page being carved, whose slots not handed out yet are free slots.
    EXPECT_GE(f.pagesSkipped, pages - 1) << (lazy ? "lazy" : "full");
    EXPECT_GT(a.pages(), pages);
    EXPECT_TRUE(survivorsIntact(made, survivors));
  }
}

TEST(Arena, LargeObjectsAreFreedOneByOne) {
  Arena a;
  std::vector<Made> made;
  for (int i = 0; i < 10; ++i) made.push_back(make(a, 1000 + 1000 * i, static_cast<uint8_t>(i)));
  EXPECT_EQ(a.largeObjects(), 10u);
  EXPECT_EQ(a.pages(), 0u);
  uint64_t freedBytes = 0;
  for (int i = 0; i < 10; ++i) {
    if (i % 3 == 0)
      mark(a, made[i]);
    else
      freedBytes += Arena::footprint(made[i].bytes);
  }
  Arena::Freed f = a.sweep();
  EXPECT_EQ(f.objects, 6u);
  EXPECT_EQ(f.bytes, freedBytes);
  EXPECT_EQ(a.largeObjects(), 4u);
  for (int i = 0; i < 10; i += 3) EXPECT_TRUE(intact(made[i]));
}

// unmarkAll moves the epoch on instead of clearing marks; after 255 epochs they start
// over, and a mark left from the first time round must not count as a mark again.
TEST(Arena, AMarkFromAnEarlierRoundOfEpochsIsNoMark) {
  Arena a;
  Made stale = make(a, 48, 1), kept = make(a, 48, 2);
  mark(a, stale);
  mark(a, kept);
  uint8_t first = a.epoch();
  std::set<uint8_t> seen;
  // No sweep in between (as after collections that failed): stale keeps its first mark.
  for (int i = 0; i < 3 * dlam::kMaxEpoch; ++i) {
    a.unmarkAll();
    mark(a, kept);
    EXPECT_FALSE(a.isMarked(obj(stale))) << i << " epoch " << int(a.epoch());
    EXPECT_TRUE(a.isMarked(obj(kept))) << i;
    seen.insert(a.epoch());
  }
  EXPECT_EQ(seen.size(), size_t(dlam::kMaxEpoch));  // every epoch was used, the first one again
  EXPECT_TRUE(seen.count(first));
  a.sweep();
  EXPECT_NE(obj(stale)->type, ObjType::Vector);  // freed
  EXPECT_TRUE(intact(kept));
  EXPECT_EQ(objects(a), 1u);
  a.unmarkAll();
  a.sweep();
  EXPECT_EQ(objects(a), 0u);
}

// A page in which nothing is marked holds only the dead: the sweeps empty it without
// walking it (its slots are carved anew), the lazy sweep as the allocator reaches it and
// the full one at once (keeping one empty page per size class, giving the others back).
// Pages with a survivor are walked as before. Each page finds its count of marks from
// an object's address, so this also checks that pages are aligned to their size.
TEST(Arena, PagesWithNothingMarkedAreEmptiedWithoutAWalk) {
  Arena a;
  SweptSince swept(a);
  std::vector<Made> made = makeMany(a, 20000, 32, 1);
  uint64_t pages = a.pages();
  ASSERT_GE(pages, 9u);
  // Survivors only among the first 4000 made: in the first pages.
  std::set<char*> survivors;
  markSurvivors(a, made, survivors, [](size_t i) { return i < 4000 && i % 7 == 0; });
  std::set<uintptr_t> livePages;
  for (const Made& m : made)
    if (survivors.count(m.p)) livePages.insert(pageOf(m));
  uint64_t deadInLivePages = 0;
  for (const Made& m : made) deadInLivePages += livePages.count(pageOf(m)) && !survivors.count(m.p);
  ASSERT_LT(livePages.size() + 3, pages);
  // The lazy sweep: taking every dead slot needs no new page, never hands out a survivor
  // or a slot twice, and walks only the pages with survivors.
  a.sweepLazily();
  std::set<char*> taken;
  takeSlots(a, made.size() - survivors.size(), 32, survivors, taken);
  EXPECT_EQ(a.pages(), pages);
  Arena::Freed lazy = swept.take();
  EXPECT_EQ(lazy.pagesEmptied, pages - livePages.size());
  EXPECT_EQ(lazy.objects, deadInLivePages);
  EXPECT_TRUE(survivorsIntact(made, survivors));
  // The full sweep: only the survivors marked again; the pages without one are emptied,
  // all but one given back.
  a.unmarkAll();
  for (const Made& m : made)
    if (survivors.count(m.p)) mark(a, m);
  Arena::Freed full = a.sweep();
  EXPECT_EQ(full.pagesEmptied, pages - livePages.size());
  EXPECT_EQ(a.pages(), livePages.size() + 1);
  EXPECT_EQ(objects(a), survivors.size());
  EXPECT_TRUE(survivorsIntact(made, survivors));
  // The kept page is carved next, before any new page.
  makeMany(a, 1000, 32, 3);
  EXPECT_EQ(objects(a), survivors.size() + 1000);
  EXPECT_LE(a.pages(), livePages.size() + 1);
}

TEST(Arena, AnImpossibleSizeIsNull) {
  Arena a;
  EXPECT_EQ(a.allocate(size_t(1) << 62), nullptr);
  EXPECT_EQ(a.allocate(SIZE_MAX - 8), nullptr);
  EXPECT_EQ(a.largeObjects(), 0u);
}

#ifdef DLAM_ARENA_ASAN
// Under AddressSanitizer a freed slot's body is poisoned (a use of a collected object is
// reported), and unpoisoned when the slot is allocated again.
TEST(Arena, FreedSlotsArePoisonedUnderAsan) {
  Arena a;
  Made live = make(a, 64, 5);
  Made dead = make(a, 64, 6);
  EXPECT_EQ(__asan_region_is_poisoned(dead.p, 64), nullptr);
  mark(a, live);
  a.sweep();
  EXPECT_NE(__asan_region_is_poisoned(dead.p, 64), nullptr);
  EXPECT_EQ(__asan_region_is_poisoned(live.p, 64), nullptr);
  char* again = static_cast<char*>(a.allocate(64));
  EXPECT_EQ(again, dead.p);
  EXPECT_EQ(__asan_region_is_poisoned(again, 64), nullptr);
}
#endif

// ---- the VM's accounting ------------------------------------------------------------------

dlam::Config config(uint64_t heapLimitMb) {
  dlam::Config cfg;
  cfg.heapLimitMb = heapLimitMb;
  cfg.sandbox = true;
  return cfg;
}

uint64_t liveAfterCollection(VM& vm) {
  vm.collectGarbage();
  return vm.gcStats().liveBytes;
}

TEST(VmHeap, LiveBytesAreFootprints) {
  VM vm(config(64));
  uint64_t before = vm.gcStats().liveBytes;
  uint64_t objects = vm.gcStats().liveObjects;
  Value p = vm.cons(Value::number(1), Value::nil());
  EXPECT_EQ(vm.gcStats().liveBytes - before, Arena::footprint(sizeof(dlam::Pair)));
  Value s = vm.makeString("abc");  // 8 + 3 + 1 bytes: a 16-byte slot
  EXPECT_EQ(vm.gcStats().liveBytes - before, Arena::footprint(sizeof(dlam::Pair)) + 16);
  // a large block: header, memo, rank (and a reserved word), then 1000 doubles
  dlam::Vector* v = vm.makeVector(1000);
  EXPECT_EQ(offsetof(dlam::Vector, items), 24u);
  EXPECT_EQ(vm.gcStats().liveBytes - before,
            Arena::footprint(sizeof(dlam::Pair)) + 16 + Arena::footprint(24 + 8000));
  EXPECT_EQ(vm.gcStats().liveObjects, objects + 3);
  EXPECT_EQ(vm.gcStats().largeObjects, 1u);
  (void)p;
  (void)s;
  (void)v;
  // Unrooted: the collection takes them all back.
  EXPECT_EQ(liveAfterCollection(vm), before);
  EXPECT_EQ(vm.gcStats().liveObjects, objects);
  EXPECT_EQ(vm.gcStats().largeObjects, 0u);
}

TEST(VmHeap, GarbageGivesItsPagesBack) {
  VM vm(config(256));
  dlam::openStdlib(vm);
  uint64_t live0 = liveAfterCollection(vm);
  uint64_t pages0 = vm.gcStats().pages;
  dlam::evalSource(vm, "(define l (iota 200000)) (define m (map (lambda (x) (* 2 x)) l))",
                   "<test>");
  uint64_t live1 = liveAfterCollection(vm);
  dlam::GcStats s1 = vm.gcStats();
  EXPECT_GE(live1 - live0, 400000u * sizeof(dlam::Pair));
  EXPECT_GE(s1.pages - pages0, 400000u * sizeof(dlam::Pair) / Arena::kPageBytes);
  EXPECT_GE(s1.heldBytes, live1 - live0);  // (live bytes also count compiled code's C++ memory)
  EXPECT_EQ(dlam::evalSource(vm, "(define l 0) (define m 0) 1", "<test>").asNumber(), 1);
  uint64_t live2 = liveAfterCollection(vm);
  dlam::GcStats s2 = vm.gcStats();
  EXPECT_LE(live2, live0 + 1024);
  EXPECT_LE(s2.pages, pages0 + 2);
  EXPECT_LT(s2.heldBytes, s1.heldBytes - 400000u * sizeof(dlam::Pair) + 2 * Arena::kPageBytes);
}

TEST(VmHeap, CompiledCodeIsCountedAndUncountedExactly) {
  VM vm(config(64));
  dlam::openStdlib(vm);
  std::string body = "(define (big x) (list";
  for (int i = 0; i < 3000; ++i) body += " (+ x " + std::to_string(i) + ")";
  body += "))";
  dlam::evalSource(vm, body, "<test>");
  uint64_t with1 = liveAfterCollection(vm);
  Value big = vm.global("big");
  ASSERT_TRUE(dlam::isClosure(big));
  const dlam::Proto* p = dlam::asClosure(big)->proto;
  uint64_t codeBytes = p->code.size() * (sizeof(dlam::Instr) + sizeof(dlam::SrcLoc));
  EXPECT_GE(p->ownedBytes, codeBytes);
  EXPECT_GT(p->code.size(), 3000u);
  dlam::evalSource(vm, "(define big 0)", "<test>");
  uint64_t without1 = liveAfterCollection(vm);
  EXPECT_GE(with1 - without1, codeBytes);
  // The same again: the same numbers (nothing is lost or counted twice).
  dlam::evalSource(vm, body, "<test>");
  EXPECT_EQ(liveAfterCollection(vm), with1);
  dlam::evalSource(vm, "(define big 0)", "<test>");
  EXPECT_EQ(liveAfterCollection(vm), without1);
}

TEST(VmHeap, HeapLimitStopsAllocationAndTheVmGoesOn) {
  VM vm(config(8));
  dlam::openStdlib(vm);
  try {
    dlam::evalSource(vm, "(define l (iota 1000000))", "<test>");
    ADD_FAILURE() << "10^6 pairs fit in 8 MB";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.kind, dlam::ErrorKind::Limit);
    EXPECT_NE(e.message.find("heap limit"), std::string::npos) << e.message;
  }
  vm.recover();
  EXPECT_LT(vm.gcStats().liveBytes, uint64_t(8) << 20);
  EXPECT_EQ(dlam::evalSource(vm, "(length (iota 10000))", "<test>").asNumber(), 10000);
}

TEST(VmHeap, HeapLimitCoversCompiledCode) {
  // Code that needs more memory than the limit, in few heap objects (100 protos): the
  // limit stops the compilation. (3 MB: the standard library with its arrays section
  // takes just over 2.)
  VM vm(config(3));
  dlam::openStdlib(vm);
  vm.collectGarbage();
  const uint64_t library = vm.gcStats().liveBytes;  // the standard library's code
  std::string body = "(define fs (list";
  for (int f = 0; f < 100; ++f) {
    body += " (lambda (x) (list";
    for (int i = 0; i < 2000; ++i) body += " (* x " + std::to_string(i % 7) + ")";
    body += "))";
  }
  body += "))";
  try {
    dlam::evalSource(vm, body, "<test>");
    ADD_FAILURE() << "the code of 2 10^5 products fits in 3 MB";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.kind, dlam::ErrorKind::Limit) << e.format();
    EXPECT_NE(e.message.find("heap limit"), std::string::npos) << e.message;
  }
  vm.recover();
  // What the failed compilation held is given back (the library stays).
  EXPECT_LT(vm.gcStats().liveBytes, library + (uint64_t(256) << 10));
  EXPECT_EQ(dlam::evalSource(vm, "(+ 1 2)", "<test>").asNumber(), 3);
}

}  // namespace

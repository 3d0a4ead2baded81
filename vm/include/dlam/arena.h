// arena.h — the memory one VM's objects live in: pages of equal slots, and large blocks.
//
// The arena is bound to no thread (a mimalloc heap is bound to the thread that made
// it), so a VM may move from thread to thread: its pages are cut, in address order,
// from chunks it maps from the kernel itself (mapChunk; a chunk's pages are not touched
// until carved), and its large blocks come from mimalloc's thread-safe mi_malloc and go
// back with mi_free. (Pages from mi_malloc cost twice their size: mimalloc's 64 KiB
// blocks are not aligned to 64 KiB, so each page took a block of 128 KiB, and mimalloc
// wrote its free list into the blocks around it.) Objects of up to kMaxSmall
// bytes are rounded up to a multiple of 8 (16 at least) and take a slot in a page of
// that size class; each class threads a free list through its free slots, so
// allocating is popping a list (no locks, no atomics). When it is empty, the class's
// carving page gives the next few KiB of its never-used slots (so memory is touched as
// it is needed), handed out by bumping a pointer, so that each is written once, by its
// object; a walk of the pages (a sweep, forEachObject, unmarkAll's) first makes the ones
// not handed out yet free slots. When that page is used up, a page a sweep emptied, or
// a new one, becomes the carving page. A free slot's header has the type kFreeType,
// which no object has, so the sweeper, which walks pages, can tell free slots from
// objects: objects need no link field. Larger objects are mi_malloc'ed one by one
// behind a header that links them. Nothing moves. The arena knows only the Obj header
// and its mark byte: finalising objects that own C++ members is the VM's job
// (heap.cpp), before a sweep.
// Marks are sticky (the VM's collector is generational): a sweep frees the unmarked
// and leaves the marks, which only unmarkAll clears. A mark is an epoch (kMaxEpoch):
// an object is marked if its mark byte holds the arena's epoch, so unmarkAll clears
// all marks by moving the epoch on, without writing to any object (every 255th time
// it does write a 0 into every mark byte, as the epochs start over). So a page in
// which nothing was allocated since the last sweep has nothing to free until unmarkAll
// runs: the next sweeps do not walk it (after a minor collection, most pages hold only
// old objects).
// A minor collection's sweep is lazy (sweepLazily): each page is swept when the
// allocator next needs slots of its class, so the slots it frees are handed out while
// the sweep has them in the cache, instead of the whole nursery being walked at once
// and touched again, cold, when allocated.
// Pages are aligned to their size, so an object's page is its address rounded down: the
// collector marks through mark(), which counts the marked objects of each page, and a
// sweep that meets a page with none marked empties it without walking its slots (after
// a collection, most of the nursery's pages hold only the dead).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dlam/object.h"

#if defined(__SANITIZE_ADDRESS__)
#define DLAM_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DLAM_ARENA_ASAN 1
#endif
#endif
#ifdef DLAM_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace dlam {

class Arena {
 public:
  static constexpr size_t kGranule = 8;
  static constexpr size_t kMinSlot = 16;  // a free slot holds its header and a link
  static constexpr size_t kMaxSmall = 512;
  // Class c has slots of slotSize(c) = 16 + 8 c bytes.
  static constexpr size_t kClasses = (kMaxSmall - kMinSlot) / kGranule + 1;
  static constexpr size_t classOf(size_t bytes) {
    return ((bytes > kMinSlot ? bytes : kMinSlot) - kMinSlot + kGranule - 1) / kGranule;
  }
  static constexpr size_t slotSize(size_t c) { return kMinSlot + c * kGranule; }
  static constexpr size_t kPageBytes = size_t(64) << 10;
  // The type in the header of a free slot (no ObjType has this value).
  static constexpr ObjType kFreeType = static_cast<ObjType>(0xff);

  Arena() = default;
  // Unmaps every chunk, gives every large block back to mimalloc (objects must be
  // finalised first).
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // The bytes an object of `bytes` bytes takes: its slot, or its block and block header.
  static constexpr uint64_t footprint(size_t bytes) {
    return bytes <= kMaxSmall ? slotSize(classOf(bytes)) : roundUp(bytes) + kLargeHeader;
  }

  // Memory for an object of `bytes` (> 0) bytes, 8-aligned; nullptr if there is none.
  void* allocate(size_t bytes) {
    if (bytes <= kMaxSmall) [[likely]] {
      size_t c = classOf(bytes);
      if (char* s = free_[c]) [[likely]] {
#ifdef DLAM_ARENA_ASAN
        ASAN_UNPOISON_MEMORY_REGION(s, slotSize(c));
#endif
        std::memcpy(&free_[c], s + sizeof(uint64_t), sizeof(char*));
        return s;
      }
      if (char* s = bump_[c]; s != bumpEnd_[c]) [[likely]] {
        bump_[c] = s + slotSize(c);
#ifdef DLAM_ARENA_ASAN
        ASAN_UNPOISON_MEMORY_REGION(s, slotSize(c));
#endif
        return s;
      }
      return refill(c);
    }
    return allocateLarge(bytes);
  }

  // What a sweep freed in the pages it walked and in large blocks: the bytes (footprints)
  // and the number of objects. A page with nothing marked is emptied without a walk, so
  // its dead are not counted here (the collector counts from the marks).
  struct Freed {
    uint64_t bytes = 0;
    uint64_t objects = 0;
    uint64_t pagesSkipped = 0;  // pages left as they were (nothing allocated in them since)
    uint64_t pagesEmptied = 0;  // pages with nothing marked, emptied (or given back) unwalked
  };
  // Frees every object whose mark byte is 0; the marks of the others stay. Pages left
  // with no object go back to the kernel but their headers (releasePage), except one
  // per size class, kept for reuse.
  // A page with objects in which nothing was allocated since the last sweep is not
  // walked (it can have changed only through unmarkAll, which makes it walked again).
  Freed sweep();
  // The sweep of a minor collection, done lazily: only the large blocks are swept now
  // (what they freed is returned); the pages are swept one at a time when the allocator
  // needs slots of their class (see refill), and what they free adds up in swept().
  // Until then a page keeps its dead objects (unmarked, so nothing
  // mistakes them for live), and the next sweep or sweepLazily starts over.
  Freed sweepLazily();
  // What every sweep has freed and passed over since the arena was made: the full
  // sweeps, the large blocks, and the pages swept lazily (VM::gcStats reports it).
  const Freed& swept() const { return swept_; }
  // Clears every object's mark, freeing nothing (before a full collection, and after
  // a collection that failed). Pages left to sweep lazily wait for the next sweep.
  void unmarkAll();
  // The epoch that marks objects now: the collector marks an object by storing it.
  uint8_t epoch() const { return epoch_; }
  bool isMarked(const Obj* o) const { return o->marked == epoch_; }
  // Marks an unmarked object whose footprint is `footprint`, counting it in its page.
  void mark(Obj* o, uint64_t footprint) {
    o->marked = epoch_;
    if (footprint <= kMaxSmall) ++pageOf(o)->marks;
  }

  // Calls f(Obj*) for every object (for checks; the order is unspecified). The carved
  // slots not handed out yet become free slots first (see retireBumps).
  template <class F>
  void forEachObject(F f) {
    retireBumps();
    for (Page* head : pages_)
      for (Page* p = head; p; p = p->next) {
        char* s = reinterpret_cast<char*>(p) + kPageHeader;
        for (uint32_t i = 0; i < p->carved; ++i, s += p->slotSize)
          if (static_cast<ObjType>(static_cast<uint8_t>(s[offsetof(Obj, type)])) != kFreeType)
            f(reinterpret_cast<Obj*>(s));
      }
    for (Large* l = large_; l; l = l->next)
      f(reinterpret_cast<Obj*>(reinterpret_cast<char*>(l) + kLargeHeader));
  }

  uint64_t pages() const { return pageCount_; }          // small-object pages held
  uint64_t largeObjects() const { return largeCount_; }  // large blocks held
  uint64_t largeBytes() const { return largeBytes_; }    // their footprints
  // The memory held: every page in use and every large block.
  uint64_t heldBytes() const { return pageCount_ * kPageBytes + largeBytes_; }

 private:
  struct alignas(16) Page {
    Page* next;
    uint32_t slotSize;
    uint32_t slots;
    uint32_t carved;  // slots carved so far (the first ones); only the carving page has more
    // What the last sweep left (see unchanged()): the carved slots, the first and last of
    // the page's free slots (a run on the free list, in address order).
    uint32_t sweptCarved;
    uint32_t marks;  // its objects marked with the epoch now (by mark()): 0 if all are dead
    bool settled;    // swept, and unmarkAll has not run since
    bool kept;       // a spare page whose memory was kept (releasePage)
    char* firstFree;
    char* lastFree;
    Page* nextEmpty;  // on empties_
  };
  // A region mapped from the kernel that pages are cut from, in order (see mapChunk).
  struct Chunk {
    Chunk* next;
    char* base;
    size_t bytes;
  };
  static constexpr size_t kChunkPages = 16;       // the first chunk: 1 MiB
  static constexpr size_t kMaxChunkPages = 1024;  // 64 MiB
  static constexpr size_t kSparesKept = 16;       // spare pages whose memory is kept, at least
  struct Large {
    Large* next;
    uint64_t footprint;
  };
  static constexpr size_t kPageHeader = sizeof(Page);
  static constexpr size_t kLargeHeader = sizeof(Large);
  static constexpr size_t kCarveBytes = 4096;  // the slots a refill carves (then bumped through)
  static_assert(kPageHeader % kGranule == 0 && kLargeHeader % kGranule == 0);

  static constexpr uint64_t roundUp(size_t bytes) {
    return (static_cast<uint64_t>(bytes) + kGranule - 1) & ~uint64_t(kGranule - 1);
  }
  void* refill(size_t c);
  void retireBumps();
  void sweepPage(Page* p, char*& head, Freed& freed);
  static void settle(Page* p, char* firstFree);
  Freed sweepLarge();
  void* allocateLarge(size_t bytes);
  Page* newPage();
  bool mapChunk();
  void releasePage(Page* p);
  static Page* pageOf(const Obj* o) {
    return reinterpret_cast<Page*>(reinterpret_cast<uintptr_t>(o) & ~uintptr_t(kPageBytes - 1));
  }
  void empty(Page* p, size_t c);
  static bool unchanged(const Page* p);

  char* free_[kClasses] = {};     // per class: the first free slot (its next at offset 8)
  Page* pages_[kClasses] = {};    // per class: every page, newest first
  Page* unswept_[kClasses] = {};  // per class: the next page to sweep lazily (a suffix of pages_)
  Page* carving_[kClasses] = {};  // per class: the page whose never-used slots refill hands out
  Page* empties_[kClasses] =
      {};  // per class: pages emptied by a sweep, to carve next (via nextEmpty)
  // Per class: the carved slots of the carving page not handed out yet, [bump_, bumpEnd_).
  char* bump_[kClasses] = {};
  char* bumpEnd_[kClasses] = {};
  Freed swept_;        // see swept()
  uint8_t epoch_ = 1;  // 1 to kMaxEpoch
  Large* large_ = nullptr;
  Chunk* chunks_ = nullptr;  // every chunk mapped, newest first
  size_t chunkCount_ = 0;
  char* chunkNext_ = nullptr;  // the chunk being cut: its next page, and its end
  char* chunkEnd_ = nullptr;
  Page* spares_ = nullptr;  // pages given back by sweeps, to be used again first
  size_t spareCount_ = 0;   // of them, those whose memory was kept (see releasePage)
  uint64_t pageCount_ = 0;
  uint64_t largeCount_ = 0;
  uint64_t largeBytes_ = 0;
};

}  // namespace dlam

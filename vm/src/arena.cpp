// arena.cpp — the slow paths of the arena (arena.h): new pages, large blocks, the sweep.
//
// A page is kPageBytes cut from a chunk the arena mapped (mapChunk), aligned to its size:
// a Page header, then slots of one size. Its first `carved` slots are each an object or a
// free slot (header kFreeType, next free slot at offset 8), except, in the carving page,
// those the allocator has not bumped through yet, which every walk of the pages first
// makes free slots (retireBumps); the other slots have never been touched. The sweep
// walks each page's carved slots backwards, pushing the free and the dead ones on the
// class's free list, so the list runs forwards through memory, page after page. A page
// with no marked object (Page::marks, counted by Arena::mark) is not walked: it is
// emptied (no slot carved), to be carved again or, beyond one per class at a full sweep,
// given back. Nor is a page whose carved slots are all marked (marks == carved, a page of
// a tape that survived its first collection): it has nothing to free. Marks stay set (the
// collector is generational), so a page in which nothing was allocated since the last
// sweep holds the same marked objects and free slots as then: the sweep links its free
// slots in again without walking it, unless unmarkAll ran in between. Under
// AddressSanitizer the body of every free slot (past its header and link), of every
// emptied page and of the slots not bumped through yet is poisoned, so a use of a
// collected object is reported.
#include "dlam/arena.h"

#include <mimalloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#if defined(__SANITIZE_THREAD__)
#define DLAM_ARENA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DLAM_ARENA_TSAN 1
#endif
#endif

namespace dlam {

namespace {

// Under ThreadSanitizer the memory comes from malloc, which TSan intercepts: it cannot
// see the synchronisation inside mimalloc, so a block that mimalloc hands from one
// thread's VM to another's would look like a data race.
inline void* systemAllocate(size_t bytes) {
#ifdef DLAM_ARENA_TSAN
  return std::malloc(bytes);
#else
  return mi_malloc(bytes);
#endif
}

inline void systemFree(void* p) {
#ifdef DLAM_ARENA_TSAN
  std::free(p);
#else
  mi_free(p);
#endif
}

constexpr uint64_t kFreeHeader = static_cast<uint8_t>(Arena::kFreeType);
constexpr size_t kLinkEnd = 2 * sizeof(uint64_t);  // header and link: never poisoned

inline void setFree(char* slot, char* next) {
  std::memcpy(slot, &kFreeHeader, sizeof kFreeHeader);
  std::memcpy(slot + sizeof(uint64_t), &next, sizeof next);
}

inline void poison(void* p, size_t size) {
#ifdef DLAM_ARENA_ASAN
  ASAN_POISON_MEMORY_REGION(p, size);
#else
  (void)p;
  (void)size;
#endif
}

inline void poisonBody(char* slot, size_t size) {
  if (size > kLinkEnd) poison(slot + kLinkEnd, size - kLinkEnd);
}

inline void unpoison(void* p, size_t size) {
#ifdef DLAM_ARENA_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#else
  (void)p;
  (void)size;
#endif
}

}  // namespace

Arena::~Arena() {
  // The pages are unmapped with their chunks (the pages given back are parts of them).
  while (Chunk* k = chunks_) {
    chunks_ = k->next;
    unpoison(k->base, k->bytes);
    munmap(k->base, k->bytes);
    std::free(k);
  }
  while (Large* l = large_) {
    large_ = l->next;
    systemFree(l);
  }
}

// A new page: a spare one (given back by a sweep), else the next of the chunk being cut,
// else the first of a new chunk; nullptr if the kernel refuses.
Arena::Page* Arena::newPage() {
  if (Page* p = spares_) {
    spares_ = p->next;
    if (p->kept) --spareCount_;
    return p;
  }
  if (chunkNext_ == chunkEnd_ && !mapChunk()) return nullptr;
  auto* p = reinterpret_cast<Page*>(chunkNext_);
  chunkNext_ += kPageBytes;
  return p;
}

// Maps the next chunk of pages, aligned to kPageBytes: kChunkPages pages the first time,
// twice as many each time after, up to kMaxChunkPages. Its pages are the kernel's zero
// pages until written: only what is carved is ever touched.
bool Arena::mapChunk() {
  size_t pages = std::min(kMaxChunkPages, kChunkPages << std::min<size_t>(chunkCount_, 16));
  size_t bytes = pages * kPageBytes;
  auto* k = static_cast<Chunk*>(std::malloc(sizeof(Chunk)));
  if (!k) return false;
  // Over-mapped by a page less 4 KiB, the unaligned ends cut off: the mapping stays one
  // region of the kernel's (mmap gives 4 KiB alignment).
  size_t slack = kPageBytes - 4096;
  void* m =
      mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::free(k);
    return false;
  }
  auto* raw = static_cast<char*>(m);
  auto* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kPageBytes - 1) &
                                       ~uintptr_t(kPageBytes - 1));
  if (base != raw) munmap(raw, size_t(base - raw));
  if (size_t tail = size_t(raw + bytes + slack - (base + bytes))) munmap(base + bytes, tail);
  k->base = base;
  k->bytes = bytes;
  k->next = chunks_;
  chunks_ = k;
  ++chunkCount_;
  chunkNext_ = base;
  chunkEnd_ = base + bytes;
  return true;
}

// A page a full sweep gives back becomes a spare, taken first by newPage. Up to
// kSparesKept spares, or as many as there are pages in use if more, keep their memory
// (a program that frees pages at a sweep soon needs them again); beyond those, the
// kernel may take a spare's memory back but for its first 4 KiB (the header, which
// links it among the spares): MADV_FREE, which leaves the memory in place until the
// system needs it, so that reusing it soon costs no page fault. (With MADV_DONTNEED,
// which drops it at once, binary-trees faulted 2550 times instead of 1993 when every
// spare went back, and bench/dlam/strings.dlam 4189 instead of 3187 when as many as
// the pages in use were kept.)
void Arena::releasePage(Page* p) {
  unpoison(p, kPageBytes);
  p->kept = spareCount_ < std::max<uint64_t>(kSparesKept, pageCount_);
  if (p->kept) {
    ++spareCount_;
  } else {
    char* body = reinterpret_cast<char*>(p) + 4096;
#ifdef MADV_FREE
    if (madvise(body, kPageBytes - 4096, MADV_FREE) != 0)
#endif
      madvise(body, kPageBytes - 4096, MADV_DONTNEED);
  }
  p->next = spares_;
  spares_ = p;
}

void* Arena::refill(size_t c) {
  // The free list is empty. Pages the last collection left to sweep come first, one at
  // a time: a page is swept just before its slots are handed out, so the allocation
  // finds them in the cache the sweep brought them into. A page in which nothing lives
  // is not walked: it is emptied, to be carved anew.
  while (Page* p = unswept_[c]) {
    unswept_[c] = p->next;
    char* head = nullptr;
    if (p->marks == 0) {
      empty(p, c);
      ++swept_.pagesEmptied;
      continue;
    }
    if (p->marks == p->carved) {  // every slot carved holds a live object: nothing to walk for
      settle(p, nullptr);
      ++swept_.pagesSkipped;
      continue;
    }
    if (unchanged(p)) {
      ++swept_.pagesSkipped;
      if (!p->lastFree) continue;  // full of old objects
      char* end = nullptr;
      std::memcpy(p->lastFree + sizeof(uint64_t), &end, sizeof end);
      head = p->firstFree;
    } else {
      sweepPage(p, head, swept_);
      settle(p, head);
      if (!head) continue;
    }
    unpoison(head, p->slotSize);
    std::memcpy(&free_[c], head + sizeof(uint64_t), sizeof(char*));
    return head;
  }
  // Carve the next slots of the carving page, else of an empty page, else of a new one.
  // (Only now: a page waiting for its lazy sweep must not get new objects first.)
  Page* p = carving_[c];
  size_t size = slotSize(c);
  if (!p || p->carved == p->slots) {
    if ((p = empties_[c])) {
      empties_[c] = p->nextEmpty;
    } else {
      p = newPage();
      if (!p) return nullptr;
      p->slotSize = static_cast<uint32_t>(size);
      p->slots = static_cast<uint32_t>((kPageBytes - kPageHeader) / size);
      p->carved = 0;
      p->marks = 0;
      p->settled = false;
      p->next = pages_[c];
      pages_[c] = p;
      ++pageCount_;
    }
    carving_[c] = p;
  }
  uint32_t n = std::min<uint32_t>(p->slots - p->carved, std::max<uint32_t>(1, kCarveBytes / size));
  char* first = reinterpret_cast<char*>(p) + kPageHeader + size_t(p->carved) * size;
  p->carved += n;
  // The first slot is the result; the others are handed out by bumping a pointer, so
  // a slot is written once, by its object (a free list would be written through first).
  unpoison(first, size);
  bump_[c] = first + size;
  bumpEnd_[c] = first + size_t(n) * size;
  poison(bump_[c], size_t(n - 1) * size);
  return first;
}

// The carved slots not handed out yet become free slots, on the free list, so that a
// walk of the pages (a sweep, forEachObject) finds a header in every carved slot.
void Arena::retireBumps() {
  for (size_t c = 0; c < kClasses; ++c) {
    size_t size = slotSize(c);
    char* s = bumpEnd_[c];
    while (s != bump_[c]) {
      s -= size;
      unpoison(s, kLinkEnd);
      setFree(s, free_[c]);
      poisonBody(s, size);
      free_[c] = s;
    }
    bump_[c] = bumpEnd_[c] = nullptr;
  }
}

void* Arena::allocateLarge(size_t bytes) {
  if (bytes > SIZE_MAX - 2 * kLargeHeader) return nullptr;
  uint64_t fp = footprint(bytes);
  auto* l = static_cast<Large*>(systemAllocate(fp));
  if (!l) return nullptr;
  l->footprint = fp;
  l->next = large_;
  large_ = l;
  ++largeCount_;
  largeBytes_ += fp;
  return reinterpret_cast<char*>(l) + kLargeHeader;
}

// Whether a page can be left as the last sweep left it: its marks were not cleared since
// (so every object in it is still marked) and nothing was allocated in it (so there is
// no new object that could be dead). Allocation pops the free list from its head and
// nothing is pushed on it between sweeps, so what was allocated is a prefix of the list
// the last sweep made: if the page's first slot on that list is still free, none of its
// slots was taken. Slots are carved only when the list is empty. (A page with nothing
// marked never gets here: it is emptied instead.)
inline bool Arena::unchanged(const Page* p) {
  if (!p->settled || p->carved != p->sweptCarved) return false;
  return !p->firstFree ||
         static_cast<ObjType>(static_cast<uint8_t>(p->firstFree[offsetof(Obj, type)])) == kFreeType;
}

// Walks the carved slots of page p backwards, pushing its free slots and the unmarked
// objects (freed, counted in `freed`) on the list `head`, so that the page's slots run
// forwards on it; the page's last free slot links to the old head. (Its marked objects,
// the live ones, are p->marks.)
void Arena::sweepPage(Page* p, char*& headRef, Freed& freed) {
  // Everything the loop updates is a local: its stores into the slots (char*) could
  // alias the references and the members, which would then be reloaded every slot.
  char* head = headRef;
  char* lastFree = nullptr;
  size_t size = p->slotSize;
  char* first = reinterpret_cast<char*>(p) + kPageHeader;
  uint32_t dead = 0;
  const uint8_t epoch = epoch_;
  for (char* s = first + size_t(p->carved) * size; s != first;) {
    s -= size;
    // The type and mark bytes, read as bytes (a slot is an object or a free slot).
    auto type = static_cast<ObjType>(static_cast<uint8_t>(s[offsetof(Obj, type)]));
    if (type != kFreeType) {
      if (static_cast<uint8_t>(s[offsetof(Obj, marked)]) == epoch) continue;
      ++dead;
      setFree(s, head);
      poisonBody(s, size);
    } else {
      std::memcpy(s + sizeof(uint64_t), &head, sizeof head);
    }
    if (!lastFree) lastFree = s;
    head = s;
  }
  freed.bytes += uint64_t(dead) * size;
  freed.objects += dead;
  headRef = head;
  p->lastFree = lastFree;
}

// A page of class c in which nothing lives (marks 0) becomes as new: no slot carved, the
// whole body poisoned under AddressSanitizer. Unless it is the carving page already, it
// goes on the class's empty pages, to be carved when that one is used up.
void Arena::empty(Page* p, size_t c) {
  char* first = reinterpret_cast<char*>(p) + kPageHeader;
  poison(first, size_t(p->carved) * p->slotSize);
  p->carved = 0;
  settle(p, nullptr);
  if (p != carving_[c]) {
    p->nextEmpty = empties_[c];
    empties_[c] = p;
  }
}

// Records what a sweep of p left (see unchanged()): firstFree is the page's first slot
// on the free list, nullptr if it has none.
void Arena::settle(Page* p, char* firstFree) {
  p->settled = true;
  p->sweptCarved = p->carved;
  p->firstFree = firstFree;
  if (!firstFree) p->lastFree = nullptr;
}

Arena::Freed Arena::sweepLarge() {
  Freed freed;
  for (Large** link = &large_; Large* l = *link;) {
    char* o = reinterpret_cast<char*>(l) + kLargeHeader;
    if (isMarked(reinterpret_cast<const Obj*>(o))) {
      link = &l->next;
      continue;
    }
    *link = l->next;
    freed.bytes += l->footprint;
    ++freed.objects;
    --largeCount_;
    largeBytes_ -= l->footprint;
    systemFree(l);
  }
  return freed;
}

Arena::Freed Arena::sweepLazily() {
  retireBumps();
  for (size_t c = 0; c < kClasses; ++c) {
    free_[c] = nullptr;
    unswept_[c] = pages_[c];
    empties_[c] = nullptr;  // found again by the lazy sweep
  }
  Freed large = sweepLarge();
  swept_.bytes += large.bytes;
  swept_.objects += large.objects;
  return large;
}

Arena::Freed Arena::sweep() {
  retireBumps();
  Freed freed;
  for (size_t c = 0; c < kClasses; ++c) {
    char* head = nullptr;
    bool keptEmpty = false;
    empties_[c] = nullptr;  // found again below
    Page** link = &pages_[c];
    while (Page* p = *link) {
      if (p->marks == 0) {
        // Nothing in it lives: one such page per class is kept (emptied, to carve),
        // the others go back, without a walk.
        ++freed.pagesEmptied;
        if (keptEmpty) {
          *link = p->next;
          if (carving_[c] == p) carving_[c] = nullptr;
          releasePage(p);
          --pageCount_;
          continue;
        }
        keptEmpty = true;
        empty(p, c);
        link = &p->next;
        continue;
      }
      if (p->marks == p->carved) {
        // Every slot carved holds a live object: no free slot, nothing to free.
        settle(p, nullptr);
        ++freed.pagesSkipped;
        link = &p->next;
        continue;
      }
      if (unchanged(p)) {
        // Its free slots go on the list as they are, a run in address order.
        if (p->lastFree) {
          std::memcpy(p->lastFree + sizeof(uint64_t), &head, sizeof head);
          head = p->firstFree;
        }
        ++freed.pagesSkipped;
        link = &p->next;
        continue;
      }
      char* before = head;
      sweepPage(p, head, freed);
      settle(p, head == before ? nullptr : head);
      link = &p->next;
    }
    free_[c] = head;
    unswept_[c] = nullptr;
  }
  Freed large = sweepLarge();
  freed.bytes += large.bytes;
  freed.objects += large.objects;
  swept_.bytes += freed.bytes;
  swept_.objects += freed.objects;
  swept_.pagesSkipped += freed.pagesSkipped;
  swept_.pagesEmptied += freed.pagesEmptied;
  return freed;
}

void Arena::unmarkAll() {
  // A page left to sweep would now take its old objects for dead: it waits for the
  // next full sweep instead.
  for (Page*& p : unswept_) p = nullptr;
  for (size_t c = 0; c < kClasses; ++c)
    for (Page* p = pages_[c]; p; p = p->next) {
      p->settled = false;
      p->marks = 0;
    }
  if (epoch_ < kMaxEpoch) {
    ++epoch_;
    return;
  }
  // The epochs start over at 1: no mark byte may hold one of them from before. A free
  // slot's mark byte is 0 already (its header is kFreeType and zeros): every slot's is
  // written, without reading its type first (so the slots not bumped through yet are
  // made free slots first).
  retireBumps();
  epoch_ = 1;
  for (size_t c = 0; c < kClasses; ++c)
    for (Page* p = pages_[c]; p; p = p->next) {
      char* s = reinterpret_cast<char*>(p) + kPageHeader;
      for (uint32_t i = 0; i < p->carved; ++i, s += p->slotSize) s[offsetof(Obj, marked)] = 0;
    }
  for (Large* l = large_; l; l = l->next)
    (reinterpret_cast<char*>(l) + kLargeHeader)[offsetof(Obj, marked)] = 0;
}

}  // namespace dlam

// heap.cpp — allocation and garbage collection for one VM.
//
// Objects live in the VM's arena (dlam/arena.h), whose sweep walks its pages, so objects
// need no link field. Collection is precise, non-moving mark-and-sweep, marking with an
// explicit work list (never recursion), and runs only at safe points of the interpreter
// and between top-level forms, where every live value is in a register, a global, a
// temporary root or a handle. The bytes counted (heap limit, collection threshold,
// statistics) are the objects' footprints in the arena plus the C++ memory of compiled
// protos (their code and the IR they keep) and the syntax of the sources being compiled
// (countExternal); how far apart collections are is set by the objects' bytes alone.
//
// It is generational with sticky mark bits. Marks are not cleared by the sweep: an
// object that survived a collection stays marked ("old"); a new one is unmarked
// ("young"). A minor collection marks from the roots and from the remembered set, and
// an already marked object is not traced again, so it only walks the young survivors; its
// sweep frees the young dead, lazily (the allocator sweeps a page when it needs its
// slots: Arena::sweepLazily). The bytes and objects counted come from the marks, so they
// drop at the collection, not when the sweep gets round to the dead. For all this to be
// right, every old object that may point at a young one must be in the remembered set:
// the write barrier (VM::writeBarrier) puts it there when a store into an old object
// makes such a pointer. A full (major) collection clears every mark first (in O(pages):
// the arena's epoch moves on) and marks everything live, so it also frees the old dead.
// Collections at the allocation threshold are minor, and full when the old bytes have
// grown since the last full one by as much as lived then in small objects (at least
// kMinMajorGrowth), when the heap is past half its limit, and when asked for
// ((collect-garbage), collectGarbage(), recover()): see the end of collectGarbage.
// Large blocks (arrays of more than about 60 doubles) are not part of that allowance, nor of
// the distance between collections: an array is one object however large, so tracing it
// costs little, while array temporaries that a collection finds in registers become old
// and die soon after. Paced by all live bytes, a loop over 10^6-element arrays collected
// every ten arrays and fully when those had doubled (370 MB at the peak for 8 live);
// paced by the small objects, it collects every few arrays and frees them soon (100 MB).
// The end of a top-level gradient is where its tape dies: gradientBoundary sizes the
// nursery (the bytes between collections) to hold the next one and collects there.
// Under DLAM_GC_STRESS every safe point collects, every fourth collection is full, so that
// both kinds run everywhere, and each minor one first checks the barriers' contract over
// the whole heap (checkRememberedSet), which a missing write barrier breaks at once.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "dlam/port.h"
#include "dlam/vm.h"

namespace dlam {

namespace {
constexpr uint64_t kMinNursery = 4u << 20;   // the bytes between collections, at least
constexpr uint64_t kMaxNursery = 32u << 20;  // and, sized for gradients, at most
constexpr uint64_t kMinMajorGrowth = 1u << 18;

// The sizes of the objects whose size varies, as allocated by the make* functions below
// and counted again, from the marks, by objectFootprint (closureSize: object.h).
size_t stringSize(size_t length) { return offsetof(String, chars) + length + 1; }
size_t vectorSize(uint32_t n) { return arrayBytes(n, 1); }

// The footprint allocate() charged for an object.
uint64_t objectFootprint(const Obj* o) {
  switch (o->type) {
    case ObjType::String:
      return Arena::footprint(stringSize(o->aux));
    case ObjType::Symbol:
      return Arena::footprint(sizeof(Symbol));
    case ObjType::Pair:
      return Arena::footprint(sizeof(Pair));
    case ObjType::Closure:
      return Arena::footprint(closureSize(closureSlots(o)));
    case ObjType::Proto:
      return Arena::footprint(sizeof(Proto));
    case ObjType::Native:
    case ObjType::Foreign:
      return Arena::footprint(sizeof(Native));
    case ObjType::Rev:
      return Arena::footprint(sizeof(Rev));
    case ObjType::Attached:
      return Arena::footprint(sizeof(Attached));
    case ObjType::Vector:
      return Arena::footprint(arrayBytes(o->aux, static_cast<const Vector*>(o)->rank));
    case ObjType::ErrorObject:
      return Arena::footprint(sizeof(ErrorObject));
    case ObjType::Record:
      return Arena::footprint(recordSize(o->aux));
    case ObjType::Dict:
      return Arena::footprint(sizeof(Dict));
    case ObjType::DictNode:
      return Arena::footprint(sizeof(DictNode));
    case ObjType::Port:
      return Arena::footprint(sizeof(Port));
    case ObjType::Fwd:
      return Arena::footprint(sizeof(Fwd));
  }
  return 0;
}

// The C++ memory a Proto owns beyond its slot, with its part of the IR it keeps.
uint64_t protoBytes(const Proto& p) {
  uint64_t n = heapBytesOf(p.code) + heapBytesOf(p.constants) + heapBytesOf(p.protos) +
               heapBytesOf(p.captures) + heapBytesOf(p.locs) + heapBytesOf(p.freeVars) +
               heapBytesOf(p.name) + heapBytesOf(p.file) + p.irBytes;
  for (const auto& c : p.captures) n += heapBytesOf(c);
  for (const auto& v : p.freeVars) n += heapBytesOf(v);
  return n;
}
}  // namespace

VM::VM(const Config& config) : config_(config) {
  stack_.resize(1024);
  frames_.reserve(64);
  nursery_ = kMinNursery;
  nextGc_ = gcThreshold_ = kMinNursery;
  if (uint64_t limit = config_.heapLimitMb << 20; limit && nextGc_ > limit / 2)
    nextGc_ = gcThreshold_ = limit / 2;
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;
#endif
  output = [](std::string_view s) { fwrite(s.data(), 1, s.size(), stdout); };
  errorOutput = [](std::string_view s) {
    fflush(stdout);  // what was written before comes before
    fwrite(s.data(), 1, s.size(), stderr);
  };
}

namespace {
void finalize(Obj* o) {
  switch (o->type) {
    case ObjType::Proto:
      static_cast<Proto*>(o)->~Proto();
      break;
    case ObjType::Symbol:
      static_cast<Symbol*>(o)->~Symbol();
      break;
    case ObjType::Native:
    case ObjType::Foreign:
      static_cast<Native*>(o)->~Native();
      break;
    case ObjType::Port:
      static_cast<Port*>(o)->~Port();  // writes what is buffered, closes its file
      break;
    default:
      break;
  }
}

}  // namespace

VM::~VM() {
  // Objects that own C++ members are destroyed one by one; the rest goes with the arena.
  for (Obj* o : finalizable_) finalize(o);
}

void VM::allocationThreshold(uint64_t bytes) {
  if (failAllocationAt && ++allocationCount_ == failAllocationAt) {
    bytesAllocated_ -= bytes;
    --liveObjects_;
    limitError("out of memory");
  }
  pastThreshold(bytes);
}

// The counted bytes reached nextGc_. Past the heap limit that is an error, and the
// object of `undo` bytes that got there is uncounted (undo 0: memory that stays
// counted until collected, a compiled proto's); otherwise a collection is asked for
// at the next safe point.
void VM::pastThreshold(uint64_t undo) {
  if (bytesAllocated_ > stats_.peakBytes) stats_.peakBytes = bytesAllocated_;
  gcRequested_ = true;
  uint64_t limit = config_.heapLimitMb << 20;
  if (limit && bytesAllocated_ > limit) {
    if (undo) {
      bytesAllocated_ -= undo;
      --liveObjects_;
    }
    limitError("heap limit exceeded (" + std::to_string(config_.heapLimitMb) + " MB)");
  }
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;  // every allocation asks for a collection at the next safe point
#else
  // Until the collection runs, only the heap limit needs checking.
  nextGc_ = failAllocationAt ? 0 : (limit ? limit : UINT64_MAX);
#endif
}

void VM::noteProtoBytes(Proto* p) { noteOwnedBytes(p->ownedBytes, protoBytes(*p)); }

void VM::noteOwnedBytes(uint64_t& owned, uint64_t bytes) {
  bytesAllocated_ = bytesAllocated_ - owned + bytes;
  owned = bytes;
  if (bytesAllocated_ >= nextGc_) pastThreshold(0);
}

// The C++ memory an object owns and counts (VM::noteOwnedBytes): a proto's code and
// IR, a port's buffer; 0 for other objects.
static uint64_t ownedBytesOf(const Obj* o) {
  if (o->type == ObjType::Proto) return static_cast<const Proto*>(o)->ownedBytes;
  if (o->type == ObjType::Port) return static_cast<const Port*>(o)->ownedBytes;
  return 0;
}

Port* VM::makePort(PortKind kind) {
  void* mem = allocate(ObjType::Port, sizeof(Port));
  Obj header = *static_cast<Obj*>(mem);
  auto* p = new (mem) Port();
  static_cast<Obj&>(*p) = header;
  p->kind = kind;
  track(p);
  return p;
}

void VM::countExternal(int64_t delta) {
  externalBytes_ += static_cast<uint64_t>(delta);
  bytesAllocated_ += static_cast<uint64_t>(delta);
  if (bytesAllocated_ > stats_.peakBytes) stats_.peakBytes = bytesAllocated_;
}

void VM::outOfMemory(uint64_t bytes) {
  bytesAllocated_ -= bytes;
  --liveObjects_;
  limitError("out of memory");
}

Value VM::cons(Value car, Value cdr) { return Value::object(newPair(car, cdr)); }

Value VM::makeString(std::string_view s) {
  if (s.size() > 0xffffffffu) runtimeError("string too long");
  auto* str = static_cast<String*>(allocate(ObjType::String, stringSize(s.size())));
  str->aux = static_cast<uint32_t>(s.size());
  std::memcpy(str->chars, s.data(), s.size());
  str->chars[s.size()] = '\0';
  return Value::object(str);
}

Symbol* VM::findSymbol(std::string_view name) const {
  auto it = symbols_.find(name);
  return it == symbols_.end() ? nullptr : it->second;
}

void VM::saveBindings() {
  savedBindings_.clear();
  savedBindings_.reserve(symbols_.size());
  for (auto& [name, sym] : symbols_) savedBindings_.push_back({sym, sym->global, sym->macro});
}

void VM::restoreBindings() {
  for (auto& [name, sym] : symbols_) {
    sym->global = Value::undefined();
    sym->macro = Value::undefined();
  }
  for (const SavedBinding& b : savedBindings_) {
    setGlobal(b.symbol, b.global);
    setMacro(b.symbol, b.macro);
  }
}

Symbol* VM::intern(std::string_view name) {
  auto it = symbols_.find(name);
  if (it != symbols_.end()) return it->second;
  auto* sym = static_cast<Symbol*>(allocate(ObjType::Symbol, sizeof(Symbol)));
  new (&sym->name) std::string();  // owns nothing until tracked (each step may fail)
  sym->global = Value::undefined();
  sym->macro = Value::undefined();
  track(sym);
  sym->name.assign(name);
  symbols_.emplace(std::string_view(sym->name), sym);
  return sym;
}

Proto* VM::makeProto() {
  void* mem = allocate(ObjType::Proto, sizeof(Proto));
  Obj header = *static_cast<Obj*>(mem);
  auto* p = new (mem) Proto();
  static_cast<Obj&>(*p) = header;
  track(p);
  return p;
}

Native* VM::makeNative(const char* name, NativeFn fn, int minArgs, int maxArgs, uint16_t id) {
  void* mem = allocate(ObjType::Native, sizeof(Native));
  Obj header = *static_cast<Obj*>(mem);
  auto* n = new (mem) Native();
  static_cast<Obj&>(*n) = header;
  track(n);
  n->fn = fn;
  n->name = name;
  n->minArgs = static_cast<int16_t>(minArgs);
  n->maxArgs = static_cast<int16_t>(maxArgs);
  n->id = id;
  n->data = Value::nil();
  n->memo = Value::nil();
  if (id != 0 && id < static_cast<uint16_t>(NativeId::Count))
    builtins_[id] = n;  // the latest registration wins
  return n;
}

Native* VM::defineNative(const char* name, NativeFn fn, int minArgs, int maxArgs, uint16_t id) {
  Native* n = makeNative(name, fn, minArgs, maxArgs, id);
  setGlobal(intern(name), Value::object(n));
  return n;
}

Attached* VM::makeAttached(Value primal, Value rep) {
  auto* a = static_cast<Attached*>(allocate(ObjType::Attached, sizeof(Attached)));
  a->primal = primal;
  a->rep = rep;
  noteAttached(a);
  return a;
}

Vector* VM::makeVector(uint32_t n) {
  auto* v = static_cast<Vector*>(allocate(ObjType::Vector, vectorSize(n)));
  v->aux = n;
  v->memo = Value::nil();
  v->rank = 1;
  v->reserved = 0;
  return v;
}

Vector* VM::makeArray(uint32_t rank, const uint32_t* shape) {
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= shape[i];
  if (rank == 0 || n > kMaxArrayElements)
    runtimeError("array: " + std::to_string(n) + " elements is more than 2^30 or rank 0");
  auto* v =
      static_cast<Vector*>(allocate(ObjType::Vector, arrayBytes(static_cast<uint32_t>(n), rank)));
  v->aux = static_cast<uint32_t>(n);
  v->memo = Value::nil();
  v->rank = rank;
  v->reserved = 0;
  if (rank > 1) std::copy(shape, shape + rank, arrayShape(v));
  return v;
}

Record* VM::makeRecord(Value type, uint32_t n) {
  auto* r = static_cast<Record*>(allocate(ObjType::Record, recordSize(n)));
  r->aux = n;
  r->type = type;
  r->memo = Value::nil();
  for (uint32_t i = 0; i < n; ++i) r->fields[i] = Value::nil();
  return r;
}

Vector* VM::makeSparse(uint32_t n, uint32_t i, double x, Value next) {
  Vector* v = makeVector(kSparseItems);
  v->flags |= kSparse;
  double* it = sparseItems(v);
  it[0] = n;
  it[1] = i;
  it[2] = x;
  if (next.isObject()) {
    auto* w = static_cast<Vector*>(next.asObject());
    it[3] = sparseCount(w) + 1;
    if (!isPurelySparse(w)) v->flags |= kSparseOverDense;
  } else {
    it[3] = 1;
  }
  v->memo = next;
  return v;
}

Value VM::list(const Value* xs, size_t n) {
  Value l = Value::nil();
  for (size_t i = n; i > 0; --i) l = cons(xs[i - 1], l);
  return l;
}

// Grey objects go on the work list unchecked: whether one is already marked is
// only looked at when it comes off the list, by which time the prefetch issued
// here has usually brought its header into the cache.
[[gnu::always_inline]] inline void VM::markValue(Value v, MarkStack& work) {
  if (!v.isObject()) return;
  Obj* o = v.asObject();
  __builtin_prefetch(o, 1);
  work.push(o);
}

void MarkStack::grow(size_t atLeast) {
  size_t size = static_cast<size_t>(top_ - base_), cap = static_cast<size_t>(end_ - base_);
  size_t want = cap ? 2 * cap : 256;
  if (want < atLeast) want = atLeast;
  Obj** grown = new Obj*[want];  // (std::bad_alloc: the collection fails whole)
  for (size_t i = 0; i < size; ++i) grown[i] = base_[i];
  delete[] base_;
  base_ = grown;
  top_ = grown + size;
  end_ = grown + want;
}

// Every root set, at minor and full collections alike (a root may hold a young object).
void VM::markRoots(MarkStack& work) {
  for (uint32_t i = 0; i < stackTop_ && i < stack_.size(); ++i) markValue(stack_[i], work);
  for (const CallFrame& f : frames_)
    if (f.closure) markValue(Value::object(f.closure), work);
  for (auto& [name, sym] : symbols_) markValue(Value::object(sym), work);
  for (auto& [pub, twin] : libraryTwins_) markValue(Value::object(twin), work);
  for (const SavedBinding& b : savedBindings_) {
    markValue(b.global, work);
    markValue(b.macro, work);
  }
  for (Value v : tempRoots_) markValue(v, work);
  for (Value v : imageObjects) markValue(v, work);
  for (Value v : pendingCall_) markValue(v, work);
  markValue(raisedValue_, work);
  markValue(commandLine_, work);
  markValue(landing_, work);
  if (handlerProto_) markValue(Value::object(handlerProto_), work);
  if (continuableCall_) markValue(Value::object(continuableCall_), work);
  if (askCall_) markValue(Value::object(askCall_), work);
  for (Native* n : builtins_)
    if (n) markValue(Value::object(n), work);
  for (auto& [key, n] : liftedCache_) markValue(Value::object(n), work);
  for (auto& [key, c] : etaCache_) markValue(Value::object(c), work);
  for (auto& provider : rootProviders) {
    std::vector<Obj*> extra;
    provider(extra);
    for (Obj* o : extra) markValue(Value::object(o), work);
  }
}

[[gnu::always_inline]] inline void VM::traceChildren(Obj* o, MarkStack& work) {
  switch (o->type) {
    case ObjType::Symbol:
      markValue(static_cast<Symbol*>(o)->macro, work);
      markValue(static_cast<Symbol*>(o)->global, work);
      break;
    case ObjType::Pair: {
      auto* p = static_cast<Pair*>(o);
      markValue(p->memo, work);
      markValue(p->car, work);
      markValue(p->cdr, work);  // popped next: lists are walked without growing the list
      break;
    }
    case ObjType::Closure: {
      auto* c = static_cast<Closure*>(o);
      // Protos are few and their headers in the cache: one already marked (at a minor
      // collection, almost always) does not go through the work list.
      if (!arena_.isMarked(c->proto)) markValue(Value::object(c->proto), work);
      if (weakPass_ && c->proto->adLevel > 1 && (c->flags & (kMemoFwd | kMemoBoth))) {
        // *j of a closure of code transformed twice or more: held weakly (its
        // *j-inverse, in a record of both, strongly)
        if (c->flags & kMemoBoth) markValue(asPair(c->memo)->cdr, work);
        holdWeakly(c);
      } else {
        markValue(c->memo, work);
      }
      for (uint32_t i = 0, n = closureSlots(c); i < n; ++i) markValue(c->upvals[i], work);
      break;
    }
    case ObjType::Proto: {
      auto* p = static_cast<Proto*>(o);
      for (Value k : p->constants) markValue(k, work);
      for (Proto* child : p->protos) markValue(Value::object(child), work);
      if (p->transformed) {
        if (weakPass_ && p->adLevel > 1)
          holdWeakly(p);  // the third transform and beyond: held weakly
        else
          markValue(Value::object(p->transformed), work);
      }
      if (p->primal) markValue(Value::object(p->primal), work);
      break;
    }
    case ObjType::Native:
    case ObjType::Foreign:
      markValue(static_cast<Native*>(o)->data, work);
      markValue(static_cast<Native*>(o)->memo, work);
      break;
    case ObjType::Rev:
      markValue(static_cast<Rev*>(o)->primal, work);
      break;
    case ObjType::Attached: {
      auto* a = static_cast<Attached*>(o);
      markValue(a->primal, work);
      markValue(a->rep, work);
      break;
    }
    case ObjType::Vector:
      markValue(static_cast<Vector*>(o)->memo, work);
      break;
    case ObjType::ErrorObject:
      markValue(static_cast<ErrorObject*>(o)->message, work);
      markValue(static_cast<ErrorObject*>(o)->irritants, work);
      break;
    case ObjType::Record: {
      auto* r = static_cast<Record*>(o);
      markValue(r->type, work);
      markValue(r->memo, work);
      for (uint32_t i = 0; i < r->aux; ++i) markValue(r->fields[i], work);
      break;
    }
    case ObjType::Dict: {
      auto* d = static_cast<Dict*>(o);
      markValue(d->root, work);
      markValue(d->memo, work);
      markValue(d->zero, work);
      break;
    }
    case ObjType::DictNode: {
      auto* n = static_cast<DictNode*>(o);
      markValue(n->key, work);
      markValue(n->value, work);
      markValue(n->left, work);
      markValue(n->right, work);
      break;
    }
    case ObjType::Fwd:
      markValue(static_cast<Fwd*>(o)->primal, work);
      markValue(static_cast<Fwd*>(o)->tangent, work);
      break;
    case ObjType::String:
    case ObjType::Port:
      break;
  }
}

// The slow path of the write barrier: `holder` is old and now points at a young object.
void VM::remember(Obj* holder) {
  if (holder->flags & kRemembered) return;
  try {
    remembered_.push_back(holder);
  } catch (const std::bad_alloc&) {
    // The set cannot grow: the next collection is full, which needs no remembered set.
    majorRequested_ = true;
    return;
  }
  holder->flags |= kRemembered;
}

void VM::forgetRemembered() {
  for (Obj* o : remembered_) o->flags &= static_cast<uint16_t>(~kRemembered);
  remembered_.clear();
}

// The write barriers' contract, checked before every minor collection of the GC-stress
// build: an old object that is not in the remembered set points at old objects only. A
// store into an old object without its barrier breaks it at once, whether or not the
// young object would also be reached from a root.
void VM::checkRememberedSet() {
  MarkStack children;
  arena_.forEachObject([&](Obj* o) {
    if (!arena_.isMarked(o) || (o->flags & kRemembered)) return;
    traceChildren(o, children);
    while (!children.empty()) {
      Obj* child = children.pop();
      if (arena_.isMarked(child)) continue;
      fprintf(stderr,
              "dlam: GC check failed: an old object of type %d points at a young one of type %d "
              "and is not in the remembered set (a missing write barrier)\n",
              static_cast<int>(o->type), static_cast<int>(child->type));
      abort();
    }
  });
}

bool VM::majorDue() const {
  if (majorRequested_) return true;
#ifdef DLAM_GC_STRESS
  return stats_.collections % 4 == 3;
#else
  // Near the heap limit only a full collection finds all there is to free.
  uint64_t limit = config_.heapLimitMb << 20;
  if (limit && bytesAllocated_ > limit / 2) return true;
  // The bytes that survived the last collection are all old.
  return oldBytes_ >= majorAt_;
#endif
}

void VM::collectDue() { collectGarbage(majorDue() ? GcKind::Major : GcKind::Minor); }

// The caches of nested derivatives, held weakly by a full collection. Each level of
// transform makes code some three times the size of the last, and the transforms of the
// library's procedures live as long as the VM: k nested gradients left their code live
// for good (642 MB for k = 8). A transform of code made by two transforms or more
// (Proto::transformed of a proto whose adLevel > 1) and *j of a closure of such code (its
// memo) are not marked through these links: marked by another path (a derivative
// running, a value still holding it) they stay; otherwise the link is cleared here and
// the next *j makes them again. The first two levels (a gradient, a second derivative:
// the nested benchmarks run 4.5% slower when level 2 is made again after each full
// collection) stay cached. (A record of both memos keeps its *j-inverse, marked
// strongly; with its *j gone, the closure keeps the *j-inverse alone.) `marked` and
// `markedBytes` count the records kept.
// (Out of line: only a full collection's marking meets these, rarely.)
void VM::holdWeakly(Obj* o) { weakHolders_.push_back(o); }

void VM::weakDerivatives(uint64_t& marked, uint64_t& markedBytes) {
  for (Obj* o : weakHolders_) {
    if (o->type == ObjType::Proto) {
      auto* p = static_cast<Proto*>(o);
      if (p->transformed && !arena_.isMarked(p->transformed)) p->transformed = nullptr;
      continue;
    }
    auto* c = static_cast<Closure*>(o);
    if (c->flags & kMemoBoth) {
      Pair* record = asPair(c->memo);
      if (arena_.isMarked(record)) continue;  // (shared with a copy, already kept)
      if (record->car.isObject() && !arena_.isMarked(record->car.asObject())) {
        c->memo = record->cdr;
        c->flags = static_cast<uint16_t>((c->flags & ~kMemoBoth) | kMemoInv);
      } else {
        uint64_t footprint = Arena::footprint(sizeof(Pair));
        arena_.mark(record, footprint);
        ++marked;
        markedBytes += footprint;
      }
    } else if (c->memo.isObject() && !arena_.isMarked(c->memo.asObject())) {
      c->memo = Value::nil();
      c->flags = static_cast<uint16_t>(c->flags & ~kMemoFwd);
    }
  }
  weakHolders_.clear();
}

void VM::collectGarbage(GcKind kind) {
  if (bytesAllocated_ > stats_.peakBytes) stats_.peakBytes = bytesAllocated_;
  bool major = kind == GcKind::Major;
  MarkStack work;
  // If the mark stack cannot grow (std::bad_alloc), nothing is freed, and no mark may stay
  // behind: a later collection would take a marked object for traced and skip its
  // children. Every object is then young again, the remembered set is not needed, and
  // the next collection is full.
  struct UnmarkOnFailure {
    VM& vm;
    bool done = false;
    ~UnmarkOnFailure() {
      if (done) return;
      vm.weakPass_ = false;
      vm.weakHolders_.clear();
      vm.arena_.unmarkAll();
      vm.forgetRemembered();
      vm.majorRequested_ = true;
    }
  } unmarkOnFailure{*this};
  // VM::dense's last result is not a root: kept only until a collection, it holds
  // neither its sparse chain nor the dense copy past one.
  denseOf_[0] = denseOf_[1] = Value::nil();
  charCursor = CharCursor{};
  if (major) {
    // Everything is young again (the remembered set too): the marking finds all that lives.
    arena_.unmarkAll();
    forgetRemembered();
    weakHolders_.clear();
    weakPass_ = true;
  }
#ifdef DLAM_GC_STRESS
  if (!major) checkRememberedSet();
#endif
  work.reserve(256);
  markRoots(work);
  // The old objects that may point at young ones: their children are traced (they
  // themselves stay marked and are not traced through the work list).
  for (Obj* o : remembered_) traceChildren(o, work);
  forgetRemembered();
  // Marking is bound by cache misses on object headers. Objects popped from the
  // work list wait in a small ring while their prefetches complete; the oldest is
  // then checked, marked and scanned.
  constexpr size_t kRing = 16;
  Obj* ring[kRing];
  size_t ringHead = 0, ringCount = 0;
  uint64_t marked = 0, markedBytes = 0, markedOwned = 0;
  const uint8_t epoch = arena_.epoch();
  for (;;) {
    Obj* o;
    if (!work.empty()) {
      Obj* next = work.pop();
      if (ringCount < kRing) {
        ring[(ringHead + ringCount++) % kRing] = next;
        continue;
      }
      o = ring[ringHead];
      ring[ringHead] = next;
      ringHead = (ringHead + 1) % kRing;
    } else if (ringCount) {
      o = ring[ringHead];
      ringHead = (ringHead + 1) % kRing;
      --ringCount;
    } else {
      break;
    }
    if (o->marked == epoch) continue;  // traced by this collection, or old (minor collections)
    uint64_t footprint = objectFootprint(o);
    arena_.mark(o, footprint);
    ++marked;
    markedOwned += ownedBytesOf(o);
    markedBytes += footprint;
    traceChildren(o, work);
  }
  unmarkOnFailure.done = true;
  if (major) {
    weakPass_ = false;
    weakDerivatives(marked, markedBytes);
  }
  // Objects owning C++ members are finalised here, before their blocks are freed.
  size_t kept = 0;
  for (Obj* o : finalizable_) {
    if (arena_.isMarked(o)) {
      finalizable_[kept++] = o;
    } else {
      finalize(o);
    }
  }
  finalizable_.resize(kept);
  // The bytes and objects counted come from the marks: a full collection has marked all
  // that lives; a minor one the young survivors, and the old objects are what the last
  // collection left. The sweep's own count is not used, as a lazy sweep frees later
  // (and a full sweep then also meets objects a minor collection already uncounted).
  markedBytes += markedOwned;
  uint64_t liveBytes = major ? markedBytes : oldBytes_ + markedBytes;
  uint64_t liveObjects = major ? marked : oldObjects_ + marked;
  bytesFreed_ += bytesAllocated_ - std::min(liveBytes + externalBytes_, bytesAllocated_);
  bytesAllocated_ = liveBytes + externalBytes_;
  liveObjects_ = liveObjects;
  // A full collection sweeps every page now, giving empty ones back; a minor one
  // leaves the pages to the allocator, which sweeps each when it needs its slots.
  if (major)
    arena_.sweep();
  else
    arena_.sweepLazily();
  // Registers above the top may still point at objects just freed: clear them so
  // a new frame never sees a dangling value.
  size_t high = std::min(stackHigh_, stack_.size());
  for (size_t i = stackTop_; i < high; ++i) stack_[i] = Value::nil();
  stackHigh_ = stackTop_;
  ++stats_.collections;
  if (!major) ++stats_.minorCollections;
  stats_.markedLast = marked;
  // Everything left is old now. The policy (majorDue): a full collection is due when the
  // old bytes have grown since the last one by what lived then in small objects (or by
  // kMinMajorGrowth, for small heaps, so that dead old objects never hold much memory for
  // long): the heap doubles when it holds no large block. The next collection comes when
  // as many bytes as were live in small objects after the last full collection (at least
  // the nursery) have been allocated: right after a full collection, when the heap has
  // doubled, as before generations; after a minor one, the bytes counted also hold the old
  // objects that died, which should not make the heap grow further. Both measure the
  // objects only: the C++ memory compiled code owns (its bytecode and IR, Proto::ownedBytes)
  // counts against the limit, but is no garbage the objects' pace should scale with.
  // What a collection in the middle of a top-level gradient made old is mostly its
  // tape, garbage once it ends (a full one there: all that lives, the tape with it).
  if (tapeStart_ != UINT64_MAX)
    tapeOld_ = major ? liveBytes : tapeOld_ + markedBytes;
  else if (major)
    tapeOld_ = 0;
  if (major) {
    uint64_t objects = liveBytes - markedOwned;
    uint64_t small = objects - std::min(objects, arena_.largeBytes());
    liveAfterMajor_ = objects;
    smallAfterMajor_ = small;
    majorAt_ = markedOwned + objects + std::max<uint64_t>(small, kMinMajorGrowth);
    majorRequested_ = false;
  }
  oldBytes_ = liveBytes;
  oldObjects_ = liveObjects_;
  afterGc_ = bytesAllocated_;
  setGcThreshold();
  gcRequested_ = false;
}

// The next collection comes when as many bytes as lived in small objects after the last
// full one, or as the nursery holds if more, have been allocated since the last one.
void VM::setGcThreshold() {
  uint64_t limit = config_.heapLimitMb << 20;
  uint64_t next = afterGc_ + std::max(smallAfterMajor_, nursery_);
  // Near the limit: collect again halfway to it (at the next allocation when past it).
  if (limit && next > limit)
    next = std::max<uint64_t>(bytesAllocated_ + (limit - std::min(limit, bytesAllocated_)) / 2,
                              bytesAllocated_ + 1);
  gcThreshold_ = next;
  nextGc_ = failAllocationAt ? 0 : next;
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;
#endif
}

void VM::gradientBoundary(bool end) {
  // A gradient taken in code being differentiated belongs to the outer one's tape.
  if (!frames_.empty() && frames_.back().closure && frames_.back().closure->proto->adLevel > 0)
    return;
  if (!end) {
    // The collection the last gradient's end asked for runs before this one starts, when
    // its tape is dead. In a dlam loop a safe point between the two runs it; a host
    // calling dlam_value_and_gradient back to back has none (no code runs in between),
    // and it would run at the first safe point inside this gradient, tracing the tape
    // being built and making it old (a full collection there counts the whole heap as
    // tape: tapeOld_, which asks for another full one at the end, and so on, about one
    // collection every few calls).
    safePoint();
    tapeStart_ = bytesAllocated_ + bytesFreed_;
    return;
  }
  uint64_t total = bytesAllocated_ + bytesFreed_;
  if (tapeStart_ > total)
    return;  // (its start was inside differentiated code, or an error ended one)
  uint64_t used = total - tapeStart_;
  tapeStart_ = UINT64_MAX;
  nursery_ = std::clamp(2 * used, kMinNursery, kMaxNursery);
  setGcThreshold();
  // Tapes made old by collections in the middle of gradients (before the nursery held
  // them) are dead now, scattered through pages the allocator keeps sweeping. Here,
  // where little lives, a full collection costs least: it is asked for when they may
  // be more than an eighth of the nursery and half of what lived after the last one.
  if (tapeOld_ > std::max(nursery_ / 8, liveAfterMajor_ / 2)) {
    requestCollection(GcKind::Major);
    return;
  }
  // Else a minor one if the next gradient, as large and a quarter more, would not fit
  // in what is left (a large one: at the end of each; small ones: of one in many).
  if (bytesAllocated_ - std::min(afterGc_, bytesAllocated_) + used + used / 4 > nursery_)
    requestCollection(GcKind::Minor);
}

GcStats VM::gcStats() const {
  GcStats s = stats_;
  if (bytesAllocated_ > s.peakBytes) s.peakBytes = bytesAllocated_;
  s.liveObjects = liveObjects_;
  s.liveBytes = bytesAllocated_;
  s.totalAllocatedBytes = bytesAllocated_ + bytesFreed_;
  s.pages = arena_.pages();
  s.largeObjects = arena_.largeObjects();
  s.heldBytes = arena_.heldBytes();
  const Arena::Freed& swept = arena_.swept();
  s.sweptObjects = swept.objects;
  s.pagesEmptied = swept.pagesEmptied;
  s.pagesSkipped = swept.pagesSkipped;
  return s;
}

}  // namespace dlam

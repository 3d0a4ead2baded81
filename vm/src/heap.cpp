// heap.cpp — allocation and garbage collection for one VM.
//
// Every object comes from the VM's own mimalloc heap; the sweeper visits the heap's
// blocks (mi_heap_visit_blocks), so objects need no link field. Collection is precise mark-and-sweep, marking with an explicit work list (never
// recursion), and runs only at safe points of the interpreter and between top-level forms,
// where every live value is in a register, a global, a temporary root or a handle.
// A collection whose own C++ allocations fail (the mark stack, the list of the dead)
// leaves the heap as it was, or finishes without freeing everything: never half-marked.
#include <mimalloc.h>

#include <new>

#include "dlam/vm.h"

namespace dlam {

namespace {
constexpr uint64_t kMinGcThreshold = 1u << 20;

size_t objectSize(const Obj* o) {
  switch (o->type) {
    case ObjType::String: return offsetof(String, chars) + o->aux + 1;
    case ObjType::Symbol: return sizeof(Symbol);
    case ObjType::Pair: return sizeof(Pair);
    case ObjType::Closure: return offsetof(Closure, upvals) + sizeof(Value) * (o->aux ? o->aux : 1);
    case ObjType::Proto: return sizeof(Proto);
    case ObjType::Native: return sizeof(Native);
    case ObjType::Rev: return sizeof(Rev);
    case ObjType::Attached: return sizeof(Attached);
    case ObjType::Foreign: return sizeof(Native);
    case ObjType::Vector: return offsetof(Vector, items) + sizeof(double) * (o->aux ? o->aux : 1);
  }
  return 0;
}
}  // namespace

VM::VM(const Config& config) : config_(config) {
  heap_ = mi_heap_new();
  if (!heap_) throw std::bad_alloc();
  try {
    stack_.resize(1024);
    frames_.reserve(64);
  } catch (...) {
    mi_heap_delete(heap_);  // the destructor does not run for a constructor that throws
    throw;
  }
  nextGc_ = gcThreshold_ = kMinGcThreshold;
  if (uint64_t limit = config_.heapLimitMb << 20; limit && nextGc_ > limit / 2) nextGc_ = gcThreshold_ = limit / 2;
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;
#endif
  output = [](std::string_view s) { fwrite(s.data(), 1, s.size(), stdout); };
}

namespace {
void finalize(Obj* o) {
  switch (o->type) {
    case ObjType::Proto: static_cast<Proto*>(o)->~Proto(); break;
    case ObjType::Symbol: static_cast<Symbol*>(o)->~Symbol(); break;
    case ObjType::Native:
    case ObjType::Foreign: static_cast<Native*>(o)->~Native(); break;
    default: break;
  }
}

struct Dead {
  std::vector<Obj*> objects;
  bool full = false;  // the list could not grow: the rest of the dead wait for the next sweep
};

// The sweeper's visit of one heap block: unmark the live, collect the dead. (Nothing
// may throw through mimalloc, which is C.)
bool visitBlock(const mi_heap_t*, const mi_heap_area_t*, void* block, size_t, void* arg) {
  if (!block) return true;
  auto* o = static_cast<Obj*>(block);
  auto* dead = static_cast<Dead*>(arg);
  if (o->marked) {
    o->marked = 0;
  } else if (!dead->full) {
    try {
      dead->objects.push_back(o);
    } catch (...) {
      dead->full = true;
    }
  }
  return true;
}

bool unmarkBlock(const mi_heap_t*, const mi_heap_area_t*, void* block, size_t, void*) {
  if (block) static_cast<Obj*>(block)->marked = 0;
  return true;
}
}  // namespace

VM::~VM() {
  // Objects that own C++ members are destroyed one by one; the rest goes with the heap.
  for (Obj* o : finalizable_) finalize(o);
  mi_heap_destroy(heap_);
}

void VM::allocationThreshold(size_t bytes) {
  if (failAllocationAt && ++allocationCount_ == failAllocationAt) {
    bytesAllocated_ -= bytes;
    --liveObjects_;
    limitError("out of memory");
  }
  if (bytesAllocated_ > stats_.peakBytes) stats_.peakBytes = bytesAllocated_;
  uint64_t limit = config_.heapLimitMb << 20;
  if (limit && bytesAllocated_ > limit) {
    bytesAllocated_ -= bytes;
    --liveObjects_;
    gcRequested_ = true;
    limitError("heap limit exceeded (" + std::to_string(config_.heapLimitMb) + " MB)");
  }
  gcRequested_ = true;
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;  // every allocation asks for a collection at the next safe point
#else
  // Until the collection runs, only the heap limit needs checking.
  nextGc_ = failAllocationAt ? 0 : (limit ? limit : UINT64_MAX);
#endif
}

void VM::outOfMemory(size_t bytes) {
  bytesAllocated_ -= bytes;
  --liveObjects_;
  limitError("out of memory");
}

Value VM::cons(Value car, Value cdr) {
  auto* p = static_cast<Pair*>(allocate(ObjType::Pair, sizeof(Pair)));
  p->car = car;
  p->cdr = cdr;
  p->memo = Value::nil();
  return Value::object(p);
}

Value VM::makeString(std::string_view s) {
  if (s.size() > 0xffffffffu) runtimeError("string too long");
  auto* str = static_cast<String*>(allocate(ObjType::String, offsetof(String, chars) + s.size() + 1));
  str->aux = static_cast<uint32_t>(s.size());
  std::memcpy(str->chars, s.data(), s.size());
  str->chars[s.size()] = '\0';
  return Value::object(str);
}

Symbol* VM::intern(std::string_view name) {
  auto it = symbols_.find(std::string(name));
  if (it != symbols_.end()) return it->second;
  auto* sym = static_cast<Symbol*>(allocate(ObjType::Symbol, sizeof(Symbol)));
  new (&sym->name) std::string();  // owns nothing until tracked (each step may fail)
  sym->global = Value::undefined();
  track(sym);
  sym->name.assign(name);
  symbols_.emplace(sym->name, sym);
  return sym;
}

Closure* VM::makeClosure(Proto* proto, uint32_t nupvals) {
  auto* c = static_cast<Closure*>(
      allocate(ObjType::Closure, offsetof(Closure, upvals) + sizeof(Value) * (nupvals ? nupvals : 1)));
  c->proto = proto;
  c->memo = Value::nil();
  c->aux = nupvals;
  for (uint32_t i = 0; i < nupvals; ++i) c->upvals[i] = Value::undefined();
  return c;
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
  if (id != 0 && id < static_cast<uint16_t>(NativeId::Count)) builtins_[id] = n;  // the latest registration wins
  return n;
}

Native* VM::defineNative(const char* name, NativeFn fn, int minArgs, int maxArgs, uint16_t id) {
  Native* n = makeNative(name, fn, minArgs, maxArgs, id);
  intern(name)->global = Value::object(n);
  return n;
}

Rev* VM::makeRev(Value primal) {
  auto* r = static_cast<Rev*>(allocate(ObjType::Rev, sizeof(Rev)));
  r->primal = primal;
  return r;
}

Attached* VM::makeAttached(Value primal, Value rep) {
  auto* a = static_cast<Attached*>(allocate(ObjType::Attached, sizeof(Attached)));
  a->primal = primal;
  a->rep = rep;
  noteAttached(a);
  return a;
}

Vector* VM::makeVector(uint32_t n) {
  auto* v = static_cast<Vector*>(
      allocate(ObjType::Vector, offsetof(Vector, items) + sizeof(double) * (n ? n : 1)));
  v->aux = n;
  return v;
}

Value VM::list(const Value* xs, size_t n) {
  Value l = Value::nil();
  for (size_t i = n; i > 0; --i) l = cons(xs[i - 1], l);
  return l;
}

void VM::markValue(Value v, std::vector<Obj*>& work) {
  if (!v.isObject()) return;
  Obj* o = v.asObject();
  if (o->marked) return;
  o->marked = 1;
  if (o->type != ObjType::String && o->type != ObjType::Vector) work.push_back(o);
}

void VM::markRoots(std::vector<Obj*>& work) {
  for (uint32_t i = 0; i < stackTop_ && i < stack_.size(); ++i) markValue(stack_[i], work);
  for (const CallFrame& f : frames_)
    if (f.closure) markValue(Value::object(f.closure), work);
  for (auto& [name, sym] : symbols_) markValue(Value::object(sym), work);
  for (Value v : tempRoots_) markValue(v, work);
  for (Value v : pendingCall_) markValue(v, work);
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

void VM::collectGarbage() {
  if (bytesAllocated_ > stats_.peakBytes) stats_.peakBytes = bytesAllocated_;
  std::vector<Obj*> work;
  // If the mark stack cannot grow (std::bad_alloc), nothing is freed, and no mark may stay
  // behind: the next collection would take a marked object for traced and skip its children.
  struct UnmarkOnFailure {
    mi_heap_t* heap;
    bool done = false;
    ~UnmarkOnFailure() {
      if (!done) mi_heap_visit_blocks(heap, true, unmarkBlock, nullptr);
    }
  } unmarkOnFailure{heap_};
  work.reserve(256);
  markRoots(work);
  while (!work.empty()) {
    Obj* o = work.back();
    work.pop_back();
    switch (o->type) {
      case ObjType::Symbol: markValue(static_cast<Symbol*>(o)->global, work); break;
      case ObjType::Pair: {
        // Follow cdr chains in place: long lists do not go through the work list.
        auto* p = static_cast<Pair*>(o);
        for (;;) {
          markValue(p->car, work);
          markValue(p->memo, work);
          Value d = p->cdr;
          if (!isPair(d) || d.asObject()->marked) {
            markValue(d, work);
            break;
          }
          p = asPair(d);
          p->marked = 1;
        }
        break;
      }
      case ObjType::Closure: {
        auto* c = static_cast<Closure*>(o);
        markValue(Value::object(c->proto), work);
        markValue(c->memo, work);
        for (uint32_t i = 0; i < c->aux; ++i) markValue(c->upvals[i], work);
        break;
      }
      case ObjType::Proto: {
        auto* p = static_cast<Proto*>(o);
        for (Value k : p->constants) markValue(k, work);
        for (Proto* child : p->protos) markValue(Value::object(child), work);
        if (p->transformed) markValue(Value::object(p->transformed), work);
        if (p->primal) markValue(Value::object(p->primal), work);
        break;
      }
      case ObjType::Native:
      case ObjType::Foreign:
        markValue(static_cast<Native*>(o)->data, work);
        markValue(static_cast<Native*>(o)->memo, work);
        break;
      case ObjType::Rev: markValue(static_cast<Rev*>(o)->primal, work); break;
      case ObjType::Attached: {
        auto* a = static_cast<Attached*>(o);
        markValue(a->primal, work);
        markValue(a->rep, work);
        break;
      }
      case ObjType::String:
      case ObjType::Vector: break;
    }
  }
  unmarkOnFailure.done = true;
  // Objects owning C++ members are finalised here, before their blocks are freed.
  size_t kept = 0;
  for (Obj* o : finalizable_) {
    if (o->marked)
      finalizable_[kept++] = o;
    else
      finalize(o);
  }
  finalizable_.resize(kept);
  sweep();
  // Registers above the top may still point at objects just freed: clear them so
  // a new frame never sees a dangling value.
  size_t high = std::min(stackHigh_, stack_.size());
  for (size_t i = stackTop_; i < high; ++i) stack_[i] = Value::nil();
  stackHigh_ = stackTop_;
  ++stats_.collections;
  uint64_t limit = config_.heapLimitMb << 20;
  uint64_t next = std::max<uint64_t>(bytesAllocated_ * 2, kMinGcThreshold);
  if (limit && next > limit) next = std::max<uint64_t>(bytesAllocated_ + (limit - std::min(limit, bytesAllocated_)) / 2, bytesAllocated_ + 1);
  if (limit && next > limit) next = std::max<uint64_t>(limit - limit / 8, bytesAllocated_ + (limit - bytesAllocated_) / 2);
  gcThreshold_ = next;
  nextGc_ = failAllocationAt ? 0 : next;
#ifdef DLAM_GC_STRESS
  nextGc_ = 0;
#endif
  gcRequested_ = false;
}

void VM::sweep() {
  // Collect blocks freed from other threads first, so the visit sees only live blocks.
  mi_heap_collect(heap_, false);
  Dead dead;
  mi_heap_visit_blocks(heap_, true, visitBlock, &dead);
  for (Obj* o : dead.objects) {
    bytesAllocated_ -= objectSize(o);
    --liveObjects_;
    mi_free(o);
  }
}

GcStats VM::gcStats() const {
  GcStats s = stats_;
  if (bytesAllocated_ > s.peakBytes) s.peakBytes = bytesAllocated_;
  s.liveObjects = liveObjects_;
  s.liveBytes = bytesAllocated_;
  return s;
}

}  // namespace dlam

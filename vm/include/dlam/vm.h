// vm.h — one dlam virtual machine: heap, globals, the interpreter, errors.
//
// A VM owns everything it allocates (its own arena, built on mimalloc's thread-safe
// allocator and bound to no thread); there is no global state, so any number of VMs may
// live in one process, and a VM may move between threads, used by one at a time.
// Natives (stdlib/, embed/) use this interface to allocate, call back into dlam
// code and raise errors. Garbage is collected only at safe points of the
// interpreter loop, so a native may hold Values in C++ locals while it runs, as
// long as it does not call back into dlam (vm.call); across such a call it must
// protect them with a Root. The collector is generational (heap.cpp): code that stores
// a Value into a field of an object that may have survived a collection (anything but
// an object it made itself since the last safe point) calls writeBarrier after it.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dlam/arena.h"
#include "dlam/builtins.h"
#include "dlam/config.h"
#include "dlam/error.h"
#include "dlam/mapped_array.h"
#include "dlam/mark_stack.h"
#include "dlam/object.h"
#include "dlam/port.h"
#include "dlam/random.h"
#include "dlam/value.h"

namespace dlam {

struct CallFrame {
  Closure* closure;  // nullptr for a native frame marker
  const Instr* pc;   // saved pc (next instruction) while a callee runs
  uint32_t base;     // index of register 0; the result goes to stack_[base - 1]
  bool boundary;     // this frame was entered from C++ (vm.call): return leaves the loop
  // What the caller takes: 0, the result; 1, a rep result (cons value backprop),
  // checked, as its car and cdr in stack_[base - 1] and stack_[base]; 2 + k (k <=
  // kMaxSplitElements), a backpropagator's (cons fbar (x1 ... xk . tail)), zero
  // allowed anywhere along it, as fbar, x1 .. xk and the tail in stack_[base - 1] ..
  // stack_[base + k]; kSplitRepOf + m, a rep result whose value is itself taken as
  // mode m (1 or 2 + k: what a transformed backpropagator or a transformed
  // transformed function returns), the parts of the value and then the
  // backpropagator (CALL with C = the mode; VM::splitInto).
  uint8_t split = 0;
  // Bit i set: argument i was passed untagged, as the value its caller would have
  // given *j (CALL's raw mask, instr::rawArgs), to a parameter whose only use is a
  // *j-inverse (ARGJINV, Proto::rawParams), which then takes it as it is.
  uint8_t raw = 0;
};

constexpr uint32_t kMaxSplitElements = 60;
constexpr uint8_t kSplitRepOf = 64;
static_assert(kSplitRepOf + 2 + kMaxSplitElements <= 255);

// How many registers a caller that splits with `mode` (> 0) receives.
inline uint32_t splitCount(uint8_t mode) {
  if (mode >= kSplitRepOf) return splitCount(static_cast<uint8_t>(mode - kSplitRepOf)) + 1;
  return mode == 1 ? 2u : mode;
}

// Whether a call result has the outer shape a caller that splits it (CallFrame::split)
// needs: a pair whose cdr is a procedure (1), a pair or a zero (2 + k), a pair whose
// cdr is a procedure and whose car has the shape of the inner mode (kSplitRepOf + m).
inline bool splitsAs(Value r, uint8_t mode) {
  if (mode >= kSplitRepOf)
    return isPair(r) && isProcedure(unwrapAttached(asPair(r)->cdr)) &&
           splitsAs(asPair(r)->car, static_cast<uint8_t>(mode - kSplitRepOf));
  if (isPair(r)) return mode >= 2 || isProcedure(unwrapAttached(asPair(r)->cdr));
  return mode >= 2 && r.isZero();
}

// A result split as a caller with mode 2 + k takes it: dst[0] = fbar, then the first k
// elements of the list xs and what follows them; a zero stands for a pair of zeros
// (as %scar and %scdr read it). False if the list ends or is not a list before k.
inline bool splitList(Value fbar, Value xs, uint32_t k, Value* dst) {
  dst[0] = fbar;
  for (uint32_t i = 1; i <= k; ++i) {
    if (isPair(xs)) {
      dst[i] = asPair(xs)->car;
      xs = asPair(xs)->cdr;
    } else if (xs.isZero()) {
      dst[i] = xs;
    } else {
      return false;
    }
  }
  dst[k + 1] = xs;
  return true;
}

// A whole result r split for mode (see CallFrame::split) into dst; false if it has
// not the shape.
inline bool splitInto(Value r, uint8_t mode, Value* dst);

// (cons v bp) split for a mode kSplitRepOf + m: v's parts for m, then bp.
inline bool splitRepOf(Value v, Value bp, uint8_t mode, Value* dst) {
  auto inner = static_cast<uint8_t>(mode - kSplitRepOf);
  if (!isProcedure(unwrapAttached(bp)) || !splitInto(v, inner, dst)) return false;
  dst[splitCount(inner)] = bp;
  return true;
}

inline bool splitInto(Value r, uint8_t mode, Value* dst) {
  if (!splitsAs(r, mode)) return false;
  if (mode >= kSplitRepOf) return splitRepOf(asPair(r)->car, asPair(r)->cdr, mode, dst);
  if (r.isZero()) return splitList(r, r, mode - 2, dst);
  if (mode == 1) {
    dst[0] = asPair(r)->car;
    dst[1] = asPair(r)->cdr;
    return true;
  }
  return splitList(asPair(r)->car, asPair(r)->cdr, mode - 2, dst);
}

struct GcStats {
  // The objects and bytes allocated and not yet freed. Right after a full collection
  // (VM::collectGarbage(), (collect-garbage)) these are exactly the live ones; after a
  // minor one they also count the old objects that died since the last full one.
  uint64_t liveObjects = 0;
  uint64_t liveBytes = 0;
  uint64_t collections = 0;          // all collections, minor and full
  uint64_t minorCollections = 0;     // of those, the minor ones
  uint64_t markedLast = 0;           // objects the last collection marked (traced)
  uint64_t totalAllocatedBytes = 0;  // every byte counted since the VM was made (live + freed)
  uint64_t peakBytes = 0;            // the most bytes live at once (since the last resetPeak)
  uint64_t pages = 0;                // small-object pages the arena holds
  uint64_t largeObjects = 0;         // objects too large for a page, each in its own block
  uint64_t heldBytes = 0;  // the memory the arena holds from mimalloc (pages, large blocks)
  // The sweeps' work since the VM was made (full sweeps, and the minor collections' lazy
  // ones as the allocator reaches each page): the dead objects freed one by one, and the
  // pages not walked, either emptied whole (nothing in them was marked: their dead are not
  // counted in sweptObjects) or passed over (nothing allocated in them since they were
  // last swept, or every slot alive).
  uint64_t sweptObjects = 0;
  uint64_t pagesEmptied = 0;
  uint64_t pagesSkipped = 0;
};

class VM {
 public:
  // The kinds of collection (collectGarbage).
  enum class GcKind { Minor, Major };
  explicit VM(const Config& config = Config{});
  ~VM();
  VM(const VM&) = delete;
  VM& operator=(const VM&) = delete;

  const Config& config() const { return config_; }
  // The VM's generator of random numbers (random.h).
  Random& random() { return random_; }
  Config& mutableConfig() { return config_; }

  // ---- allocation -------------------------------------------------------------
  Value cons(Value car, Value cdr);
  // cons, inline, for loops that build many pairs (cons is out of line: one call each).
  Pair* newPair(Value car, Value cdr) {
    auto* p = static_cast<Pair*>(allocate(ObjType::Pair, sizeof(Pair)));
    p->car = car;
    p->cdr = cdr;
    p->memo = Value::nil();
    return p;
  }
  Value makeString(std::string_view s);
  Symbol* intern(std::string_view name);
  Value symbol(std::string_view name) { return Value::object(intern(name)); }
  // A closure whose captured values are undefined until the caller stores them.
  Closure* makeClosure(Proto* proto, uint32_t nupvals) {
    Closure* c = newClosure(proto, nupvals);
    for (uint32_t i = 0; i < nupvals; ++i) c->upvals[i] = Value::undefined();
    return c;
  }
  // makeClosure for a caller that stores all `nupvals` captured values before anything
  // else allocates (inline, as are makeRev and newPair: the interpreter makes these in
  // its loops).
  Closure* newClosure(Proto* proto, uint32_t nupvals) {
    auto* c = static_cast<Closure*>(allocate(ObjType::Closure, closureSize(nupvals)));
    c->proto = proto;
    c->memo = Value::nil();
    c->aux = nupvals;
    c->upvals[0] = Value::undefined();  // the one slot of a closure that captures nothing
    return c;
  }
  Proto* makeProto();
  Native* makeNative(const char* name, NativeFn fn, int minArgs, int maxArgs, uint16_t id = 0);
  Rev* makeRev(Value primal) {
    auto* r = static_cast<Rev*>(allocate(ObjType::Rev, sizeof(Rev)));
    r->primal = primal;
    return r;
  }
  Attached* makeAttached(Value primal, Value rep);
  // (attach-*j v rep). Attached by a program (or by custom-vjp* for one), a
  // procedure's rep also serves forward mode, by transposition (kUserRep), unless
  // attach-j* gives it a forward rule; the library's own attachments (map, fold-left,
  // ...) take bundles in their primal code, which is exact for them.
  Attached* attachRep(Value v, Value rep) {
    Attached* a = makeAttached(v, rep);
    if (isProcedure(v) && !runningLibrary()) a->flags |= kUserRep;
    return a;
  }
  // Whether the innermost dlam code running is the standard library's.
  bool runningLibrary() const {
    for (size_t i = frames_.size(); i-- > 0;)
      if (frames_[i].closure) return frames_[i].closure->proto->file == "<prelude>";
    return false;
  }
  Vector* makeVector(uint32_t n);
  // An array of the given shape (rank >= 1, at most kMaxArrayElements elements), its
  // items not set.
  Vector* makeArray(uint32_t rank, const uint32_t* shape);
  static constexpr uint64_t kMaxArrayElements = uint64_t(1) << 30;
  // A record of n fields (nil until the caller stores them) of `type` (object.h).
  Record* makeRecord(Value type, uint32_t n);
  // A sparse sensitivity node (object.h): element i of a vector of length n is x, and
  // the rest is `next` (another node of the same n) or 0 (next nil).
  Vector* makeSparse(uint32_t n, uint32_t i, double x, Value next);
  // v itself if it is dense, else a dense vector with its elements (new, or the one
  // made for the same v last time).
  Vector* dense(Vector* v);
  // Allocates an object of `bytes` bytes with the given type; used by the helpers
  // above. The fast path is inline: count, one threshold test, pop a free list, header.
  // The bytes counted are the object's footprint in the arena (its rounded-up slot).
  Obj* allocate(ObjType type, size_t bytes) {
    uint64_t charged = Arena::footprint(bytes);
    bytesAllocated_ += charged;
    ++liveObjects_;
    if (bytesAllocated_ >= nextGc_) [[unlikely]]
      allocationThreshold(charged);
    void* mem = arena_.allocate(bytes);
    if (!mem) [[unlikely]]
      outOfMemory(charged);
    uint64_t header = static_cast<uint8_t>(type);
    std::memcpy(mem, &header, sizeof header);
    return static_cast<Obj*>(mem);
  }
  // Counts the C++ memory a filled Proto owns (its code, constants, line table...) as
  // heap bytes, so the heap limit covers compiled code; the compiler calls it when it
  // has filled the proto, and the sweeper uncounts the same number when the proto dies.
  // May raise the heap-limit error (the proto stays counted until it is collected).
  void noteProtoBytes(Proto* p);
  // The same for any object owning C++ memory (a port's buffer): `owned` is its count
  // (Proto::ownedBytes, Port::ownedBytes), which becomes `bytes`. The collector
  // uncounts it when the object dies.
  void noteOwnedBytes(uint64_t& owned, uint64_t bytes);
  // A new port of this kind (dlam/port.h), closed to nothing yet (fd -1, empty buffer).
  Port* makePort(PortKind kind);
  // Counts `delta` more bytes (fewer when negative) of memory the VM does not own that
  // lives while it works: the syntax of the sources being compiled (the driver). They
  // count against the heap limit with the objects until given back, and raise no error
  // here: the next allocation past the limit does.
  void countExternal(int64_t delta);

  // Registers an object that owns C++ members (its destructor runs when it dies).
  void track(Obj* o) { finalizable_.push_back(o); }
  // Builds a list from values (iteratively).
  Value list(const Value* xs, size_t n);

  // ---- globals ----------------------------------------------------------------
  void defineGlobal(std::string_view name, Value v) { setGlobal(intern(name), v); }
  // Defines the global `command-line` as the list `args` (the script, then its
  // arguments). That list is also R7RS's procedure of no arguments: (command-line)
  // returns it, so both spellings work (isCommandLineCall).
  void defineCommandLine(Value args) {
    commandLine_ = args;
    defineGlobal("command-line", args);
  }
  // Whether fn is the list defined above, and calling it with nargs arguments is
  // (command-line).
  bool isCommandLine(Value fn) const { return fn.isObject() && fn == commandLine_; }
  bool isCommandLineCall(Value fn, uint32_t nargs) const { return nargs == 0 && isCommandLine(fn); }
  // The error of calling fn, which is no procedure, with nargs arguments.
  [[noreturn]] void notAProcedure(Value fn, uint32_t nargs) {
    if (isCommandLine(fn))
      runtimeError("command-line: expected 0 arguments, got " + std::to_string(nargs) +
                   " (the list of the script and its arguments is also a procedure of none)");
    runtimeError(show(fn, true) + " is not a procedure");
  }
  void setGlobal(Symbol* s, Value v) {
    s->global = v;
    writeBarrier(s, v);
  }
  Value global(std::string_view name) { return intern(name)->global; }
  // The global of the symbol named by a string literal, its symbol remembered by the
  // literal's address (natives that hand their call to a prelude procedure at every
  // call: no hashing of the name each time). Interned symbols live as long as the VM.
  Value globalOfLiteral(const char* literal) {
    for (const auto& [lit, sym] : literalSymbols_)
      if (lit == literal) return sym->global;
    Symbol* s = intern(literal);
    literalSymbols_.emplace_back(literal, s);
    return s->global;
  }
  // The standard library's own globals (library.cpp): while it loads, the compiler
  // binds the globals its code names to twins of the symbols (libraryTwin), and
  // sealLibrary publishes the twins' values, so user definitions cannot change what
  // the library calls.
  void beginLibrary();
  void sealLibrary();
  // Room in the symbol table, the library's twins and the objects to finalise for this
  // many entries, made before the library loads so that none of them grows (and leaves
  // its smaller arrays behind) while it does.
  void reserveTables(size_t symbols, size_t twins, size_t finalizable);
  bool loadingLibrary() const { return loadingLibrary_; }
  Symbol* libraryTwin(Symbol* s);
  // The library's own global `name`: its twin (the public symbol if it has none), for
  // code the compiler makes that calls the library (the reverse transform's helpers).
  Symbol* librarySymbol(std::string_view name);
  // The value of the library's own global `name` (its twin's), whatever a program defined.
  Value libraryValue(std::string_view name) { return librarySymbol(name)->global; }
  const std::unordered_map<Symbol*, Symbol*>& libraryTwins() const { return libraryTwins_; }
  // The macro bound to a symbol (compiler/src/macros.h): undefined for none.
  void setMacro(Symbol* s, Value m) {
    s->macro = m;
    writeBarrier(s, m);
  }
  // The symbol of this name if it exists (nothing is created).
  Symbol* findSymbol(std::string_view name) const;
  // A checkpoint of every symbol's global value and macro, and the return to it:
  // symbols made since are unbound, the others get back what they had. One VM with its
  // library loaded then serves many independent programs (the fuzz targets reset it
  // between inputs instead of loading the prelude each time). What the values refer to
  // is not copied: a program that mutates a pair or a vector the library holds leaves it
  // mutated. The checkpoint's values stay alive (a root) until the next one replaces it.
  void saveBindings();
  void restoreBindings();
  // Numbers the expansions of macros, so the names each one introduces are its own.
  // (Never 0xffffffff, Sx::kLibraryMark: a VM would need 4·10⁹ expansions to reach it.)
  uint32_t nextMacroMark() { return ++macroMarks_ == 0xffffffffu ? ++macroMarks_ : macroMarks_; }
  // The marks used so far, and their restoring (a start-up image carries the count its
  // prelude load left, compiler/src/image.cpp).
  uint32_t macroMarks() const { return macroMarks_; }
  void setMacroMarks(uint32_t n) { macroMarks_ = n; }
  // Every interned symbol, by name (the image writer looks for the prelude's macros).
  const std::unordered_map<std::string_view, Symbol*>& symbolTable() const { return symbols_; }
  // Registers a native procedure as a global.
  Native* defineNative(const char* name, NativeFn fn, int minArgs, int maxArgs, uint16_t id = 0);

  // ---- execution --------------------------------------------------------------
  // Runs a compiled top-level chunk (a Proto with no parameters) and returns its value.
  Value runToplevel(Proto* chunk);
  // Calls any procedure from C++. Re-entrant; errors propagate as dlam::Error.
  Value call(Value fn, const Value* args, int nargs);
  // For natives: asks the VM to call fn with args in the native's place (without
  // C++ recursion); the native returns the value this returns.
  Value tailCall(Value fn, const Value* args, int nargs) {
    pendingCall_.assign(1, fn);
    pendingCall_.insert(pendingCall_.end(), args, args + nargs);
    return Value::tailCall();
  }
  // How many VM::call entries from C++ are active (natives calling back into dlam).
  int callDepth() const { return callDepth_; }
  // Resets the stack after an error so the VM can be used again (and collects
  // the garbage the failed run left, so a heap-limit error does not persist).
  // GcKind::Minor, for a host that recovers often (the fuzz targets: most of their
  // inputs fail): only the collection the policy asks for, if any (a full one past half
  // the heap limit, so a heap-limit error does not persist either; none if the failed
  // run allocated less than the next collection is due at).
  void recover(GcKind kind = GcKind::Major);
  // Between top-level forms (no dlam code running): collects if a collection is due.
  void safePoint() {
    if (gcRequested_ && frames_.empty()) collectDue();
  }
  // Where a gradient starts and ends (the library's gradient functions, the C API's):
  // its tape (the backpropagators and the values they keep) lives from the one to the
  // other, then dies at once. A collection in between traces it and makes it old, to
  // be freed by a full collection only; one just after it finds it dead. So at the end
  // the nursery (the bytes allocated between collections, 4 to 32 MB) is sized to
  // twice what the gradient allocated, so that the next one runs through without a
  // collection, and a minor collection is asked for (at the next safe point, after the
  // gradient's frames are gone) if another gradient as large would not fit in what is
  // left of it (with a quarter to spare), or a full one if collections in the middle
  // of gradients made old (dead) tapes that may be a fair part of the heap.
  // A gradient taken inside code being differentiated is part of the outer tape:
  // nothing happens then.
  void gradientBoundary(bool end);
  // No dlam code is running (a collection may run now, as at a safe point).
  bool idle() const { return frames_.empty(); }
  // How many reverse transforms made the code of the innermost dlam frame (its
  // Proto::adLevel; 0 for plain code or none running).
  // Whether the function of frames_[top + 1] (or about to be pushed there), made by
  // `level` reverse transforms, was called by code that observes its result: the
  // nearest dlam frame at or below top runs code made by fewer transforms and is not
  // the AD machinery's (Proto::adInternal). The host calling it (the C API's gradient)
  // takes the raw result, as the library does.
  bool observedCall(size_t top, uint16_t level) {
    for (size_t i = top + 1; i-- > 0;)
      if (const Closure* c = frames_[i].closure)
        return c->proto->adLevel < level && !c->proto->adInternal;
    return false;
  }
  // The level of the code that called the newest frame's function (0 for the host).
  uint16_t callerAdLevel();
  // Whether the newest frame's function, to the code that called it (callerAdLevel),
  // is a reverse-transformed function rather than a backpropagator: undone as many
  // times as that code's level, it is still the image of a function (Proto::primal).
  // (A backpropagator's result is given materialized by the flag %observed puts on it.)
  [[gnu::noinline]] bool observedRep();
  // The prelude's %j-boundary at `level` (*j of it taken level times): how ADENTRY runs
  // a reverse-transformed function called by code that observes it (ad.cpp).
  Value jBoundary(uint16_t level);
  // The newest frame (a reverse-transformed function at its ADENTRY, called by code
  // that observes its result) made a call of %j-boundary on it and its arguments (from
  // code of level 1, of %j-boundary-at on that boundary, it and its arguments; from
  // code of level c >= 2, of %j-boundary-up on c, that boundary, it and its arguments); the
  // number of arguments to enter it with.
  int toJBoundary();
  // ADENTRY: toJBoundary if the newest frame's function is called by code that observes
  // it (observedCall, observedRep), giving its argument count; 0 if not.
  [[gnu::noinline]] int adEntry();
  // (%observed bp w): a copy of the backpropagator bp that calls from code observing
  // its result send to w (ad.cpp); bp itself if it is no transformed code's closure.
  Value observedCopy(Value bp, Value w);
  // The procedure a call of the flagged backpropagator c from code observing its
  // result goes to (the hidden slot kObservedBp keeps).
  static Value observedTarget(const Closure* c) { return c->upvals[c->aux]; }
  uint16_t runningAdLevel() const {
    for (size_t i = frames_.size(); i-- > 0;)
      if (frames_[i].closure) return frames_[i].closure->proto->adLevel;
    return 0;
  }
  // Asks a running VM to stop at the next safe point (thread-safe).
  void interrupt() { interruptRequested_ = true; }

  // ---- errors -----------------------------------------------------------------
  // Raises a runtime error located at the instruction being executed, with a trace.
  [[noreturn]] void runtimeError(const std::string& message);
  [[noreturn]] void limitError(const std::string& message);
  // Raises `e` with the trace of the running frames. A file and location it has are
  // kept (an error in data a native read, as `read`'s), else it is located as above.
  [[noreturn]] void raiseError(Error e);
  // The limit error of a call past the frame cap (callee: the function called, if known).
  [[noreturn]] void stackOverflow(const Proto* callee);
  // Frames above stack_limit kept for whoever starts a recursion: the top level, an
  // include, the library's wrappers (gradient, map, ...). So a recursion stack_limit
  // calls deep runs wherever it starts (a million frames within the default).
  // A 64th of the limit, at most 1024: a small limit stays close to what it says.
  static constexpr uint64_t kMaxFrameHeadroom = 1024;
  // The number of frames past which a call is a stack overflow.
  uint64_t frameCap() const {
    uint64_t limit = config_.stackLimit;
    uint64_t headroom = std::min<uint64_t>(limit / 64, kMaxFrameHeadroom);
    return limit > UINT64_MAX - headroom ? UINT64_MAX : limit + headroom;
  }
  // The error a call of f with nargs arguments gets if f does not take that many, as
  // the call itself would raise it ("f: expected 2 arguments, got 1", "vector-sum: wrong
  // number of arguments (2)"); an attached value's is its primal's. Nothing otherwise.
  // For code that calls something else in f's place (the rep of an attached value).
  void checkArity(Value f, int nargs);
  // "NAME: expected TYPE as argument N, got VALUE"
  [[noreturn]] void typeError(const char* who, int argIndex, const char* expected, Value got);
  // The error of the CAR or CDR instruction `ins` (pc: the one after it) that got `got`,
  // not a pair: that of the accessor it is a step of (caar ... cdddr) on the
  // accessor's argument, or else of `plain` (car or cdr).
  // A sensitivity taken apart (%scar, %scdr, the parts of a call's argument
  // sensitivities) that is not a pair: named for the user as a backpropagator's.
  [[noreturn]] void sensitivityPartError(Value got);
  [[noreturn]] void cxrError(uint64_t ins, const uint64_t* pc, const Value* R, Value got,
                             const char* plain);
  double checkNumber(const char* who, Value* args, int i);

  // ---- errors a program catches (vm/src/handlers.cpp) ----------------------------
  // A handler frame is a frame of the closure %with-handler-frame, (h thunk ch): while
  // thunk runs, a runtime error or a raise anywhere above it (also past natives that
  // called back into dlam) calls (h obj) where it was raised, without the handlers from
  // that frame on. h returns #f to decline (the next handler out is asked), or a
  // procedure k: then the frames above the handler frame are dropped and (k) is called
  // in its place. ch is #f or what raise-continuable calls. Limit errors and exit are
  // never caught. Nothing here recurses in C++ with the number of handlers or of
  // errors raised in handlers.
  // (raise obj): to the handlers, or an uncaught error (located and traced).
  [[noreturn]] void raiseValue(Value obj);
  // raiseValue for a native to return (raise, error): with a handler to ask, a tail call
  // (VM::tailCall) of the frame that asks the handlers, made where the raise was, as
  // raiseValue's throw would have it made, without a C++ exception; raiseValue else.
  Value raiseToHandlers(Value obj);
  // (raise-continuable obj): a tail call (VM::tailCall) of the innermost handler's ch
  // on obj, in the dynamic context of the raise; raises as raise if it has none.
  Value raiseContinuable(Value obj);
  Value makeErrorObject(Value message, Value irritants);
  // The message of an uncaught raise: an error object's message and its irritants
  // written, separated by spaces (as `error` reports); "uncaught exception: OBJ" else.
  std::string uncaughtMessage(Value obj);
  // Whether a handler is installed (a runtime error raised now is thrown untraced: the
  // handlers are asked first, and the trace is built only if none takes it).
  bool handlerActive() const { return findHandler(frames_.size()) >= 0; }
  // Defines %with-handler-frame and makes the continuable-call marker (stdlib).
  void defineHandlerFrames();
  // Where a top-level gradient began (gradientBoundary), as a number, or #f.
  Value tapeState() const {
    return tapeStart_ == UINT64_MAX ? Value::boolean(false)
                                    : Value::number(static_cast<double>(tapeStart_));
  }

  // ---- differentiation (vm/src/ad.cpp) -----------------------------------------
  // The four operators of Lambda the Ultimate Backpropagator on runtime values.
  Value starJ(Value v);
  // One *j, numbers and tagged values in line: they get a tag; (), booleans, void and
  // the symbolic zero (met once per element in nested derivatives) are their own
  // image; the rest goes to starJ (STARJ's slow path, a call's untagged arguments).
  Value starJValue(Value x) {
    return x.isNumber() || isObj(x, ObjType::Rev) ? Value::object(makeRev(x))
           : x.isObject()                         ? starJ(x)
                                                  : x;
  }
  Value starJInverse(Value v);
  // (*j v) for a constant v, whose sensitivity the code that tags it drops (a global or
  // a literal argument in transformed code: %*j-constant): a number, a dense array or a
  // tagged value gets a new tag marked kConstantImage (object.h), the rest is starJ's.
  Value starJConstant(Value v);
  // Whether v is such an image (its sensitivity is not wanted).
  static bool isConstantImage(Value v) {
    return isObj(v, ObjType::Rev) && v.asObject()->aux == kConstantImage;
  }
  // The zero sensitivity shaped like v, made eagerly (iterative; see ad.cpp).
  Value zeroOf(Value v);
  // The values closure c captured, as a list (the shape of its sensitivity).
  Value capturedValues(Closure* c);
  // plus as a program calls it (the primitive, or PLUS in code no transform made):
  // two arrays of shapes that do not broadcast together are an error naming both.
  // (Inside the library and transformed code such sensitivities are of one value
  // broadcast along different axes, and plus sums each to their common shape.)
  Value plusChecked(Value a, Value b);
  Value plus(Value a, Value b);
  // The parts of a call's result for a caller that takes it split (CallFrame::split),
  // into parts (splitCount(mode) of them); an error naming `callee` if the result
  // has not the shape.
  void splitResult(Value r, uint8_t mode, Value callee, Value* parts);
  // The argument of a call given in m parts (args[0 .. m - 1]: m - 1 elements of a
  // list and its rest; m = 1: the argument whole) made the n parts a function with
  // paramSplit n takes (n = 0: the whole list in args[0]): elements past the n - 1st
  // go back on the rest, or the rest is taken apart further as %scar and %scdr would
  // (a zero stands for a pair of zeros; their error if it is no list that far).
  void regroupParts(Value* args, uint32_t m, uint32_t n);
  // Applies a lazily mapped environment (*j or *j-inverse of the captured values).
  void forceClosure(Closure* c) {
    if (c->flags & (kLazyJ | kLazyJInv)) forceClosureSlow(c);
  }
  // Stores v as captured value i of c (letrec patching, SETUPVAL), and in the closures
  // *j and *j-inverse have made from c since (memoised), mapped as they map c's values:
  // a closure of a letrec group can be differentiated or undone before the group is
  // complete (a custom-vjp of a procedure that calls itself, made in differentiated code).
  void patchCaptured(Closure* c, uint32_t i, Value v);
  // Whether *j-inverse of v is known without a walk: v is a closure, primitive or pair
  // with its *j-inverse memoised, or a transformed closure.
  bool hasInverse(Value v) const;
  // The reverse-mode proto of `p` (made once by the compiler's transform, then cached).
  Proto* transformed(Proto* p);
  // `base` applied under `level` reverse tags (used by transformed code).
  Native* liftedNative(Native* base, uint16_t level);
  // (*j base) at `level`: a procedure following the rep-function convention.
  Native* repNative(Native* base, uint16_t level);
  // For a Rep native called with nargs: the closure that does the work.
  Closure* repClosure(Native* rep, int nargs);
  // A binary arithmetic or comparison primitive applied under `level` reverse tags.
  Value liftedBinary(NativeId id, uint32_t level, Value* args);
  // Runs a Lifted native.
  Value liftedCall(Native* lifted, Value* args, int nargs);
  // Builds the closure (lambda (x1 .. xn) (base x1 .. xn)) — set by the compiler.
  std::function<Proto*(VM&, Native*, int nargs)> etaProto;

  // ---- forward mode (vm/src/forward.cpp) -----------------------------------------
  // A bundle (object.h, Fwd) of tag `tag`: primal + tangent·ε; a cobundle when co.
  Fwd* makeFwd(uint32_t tag, Value primal, Value tangent, bool co = false);
  // A native, applied: numeric ones (kDualRule) given bundles go to fwdApply.
  Value callPrimitive(Native* n, Value* args, int nargs) {
    // (A fwdDeep native, which also has kDualRule, looks inside its list arguments.)
    if ((n->flags & kDualRule) && (anyFwd(args, nargs) || n->fwdDeep)) [[unlikely]]
      return fwdApply(n, args, nargs);
    return n->fn(*this, args, nargs);
  }
  // A native with a forward rule of its own (Native::fwdRule) applied to bundles.
  Value fwdRuleApply(Native* n, Value* args, int nargs);
  // A native linear in some arguments (Native::fwdCoLinear) applied to a cobundle of tag
  // e among them: part by part (forward.cpp).
  Value fwdCoLinearParts(Native* n, Value* args, int nargs, uint32_t e);
  static bool anyFwd(const Value* args, int nargs) {
    for (int i = 0; i < nargs; ++i)
      if (isObj(args[i], ObjType::Fwd)) return true;
    return false;
  }
  // A numeric primitive applied to bundles: the dual-number rule at the highest tag
  // among its arguments (the tangent rule of the primitive's row, compiler/src/ad_rules),
  // the parts computed by callPrimitive again (lower tags); cobundles (sensitivities)
  // by the transposed rules of + - * /.
  Value fwdApply(Native* n, Value* args, int nargs);
  // the numbers' fast path (vm/src/forward_arith.h, inline there)
  [[gnu::always_inline]] inline Value fwdArith2(NativeId id, Value a, Value b);
  // (op a b) for + - * / through callPrimitive (bundles of any tag).
  Value arith(NativeId op, Value a, Value b);
  // A new forward tag above every tag in use (the nesting level of a perturbation),
  // and its end: tags are handed out in nesting order, so an inner one is higher.
  uint32_t fwdBegin() { return ++fwdTag_; }
  void fwdEnd(uint32_t tag) {
    if (fwdTag_ >= tag) fwdTag_ = tag - 1;
  }
  // The tag user-level bundle, primal and tangent work at: the innermost one begun
  // (fwdUserTag when set by a custom rule's call), or the one above all at top level.
  uint32_t fwdTagInUse() const { return fwdTag_; }
  // The tag in use set back to `tag` (one begun before; the prelude's %rule-pullback,
  // running a pullback on the bundles of a tag whose forward pass is over, takes it
  // up again, so that a forward pass begun inside gets a tag above it, not its number).
  void fwdSetTagInUse(uint32_t tag) { fwdTag_ = tag; }
  // v taken apart at `tag`: the parts of a bundle of that tag; anything else is its own
  // primal with a zero tangent. Pairs, records and closures' environments are walked.
  Value fwdPrimal(uint32_t tag, Value v);
  Value fwdPrimalProcedure(uint32_t tag, Value procedure);  // (a closure's, deeply)
  Value fwdTangent(uint32_t tag, Value v);
  // The prelude's %attached-forward: what an attach-*j procedure given bundles calls
  // (attachedTransposes in object.h), with the procedure as its first argument.
  Value attachedForward();
  // (bundle x t) at `tag`, structurally: a pair of bundles for a pair, a closure over
  // bundles for a closure (its environment's tangents t, in free-variable order).
  Value fwdBundle(uint32_t tag, Value x, Value t);
  // A sensitivity g made the shape of `v`'s: cobundles of tags v has not (what a value
  // with no perturbation of that tag was given where it met a bundle) give their
  // primal part, the only one that reaches v.
  Value fwdProject(Value g, Value v);
  // The tangent rule of a numeric primitive (set by the compiler: its rules table).
  Value (*tangentRule)(VM& vm, NativeId id, const Value* p, const Value* t, int n,
                       Value y) = nullptr;

  // ---- printing ---------------------------------------------------------------
  // display (write=false) or write (write=true) form of a value; iterative.
  std::string show(Value v, bool write = true);
  // Where display/print output goes (default: stdout).
  std::function<void(std::string_view)> output;
  // Where the standard error port (current-error-port) writes (default: stdout flushed,
  // then stderr). An embedding host sets both (dlam_config's write callback).
  std::function<void(std::string_view)> errorOutput;

  // ---- GC ---------------------------------------------------------------------
  // Temporary root for natives that call back into dlam while holding Values.
  class Root {
   public:
    Root(VM& vm, Value v) : vm_(vm) {
      vm_.tempRoots_.push_back(v);
      idx_ = vm_.tempRoots_.size() - 1;
    }
    ~Root() { vm_.tempRoots_.pop_back(); }
    Value get() const { return vm_.tempRoots_[idx_]; }
    void set(Value v) { vm_.tempRoots_[idx_] = v; }

   private:
    VM& vm_;
    size_t idx_;
  };
  // n temporary roots at once, all nil at first (a decoder's table of the objects it
  // made). Like Root, the innermost of the roots alive when it goes.
  class Roots {
   public:
    Roots(VM& vm, size_t n) : vm_(vm), base_(vm.tempRoots_.size()), n_(n) {
      vm_.tempRoots_.resize(base_ + n, Value::nil());
    }
    ~Roots() { vm_.tempRoots_.resize(base_); }
    Roots(const Roots&) = delete;
    Roots& operator=(const Roots&) = delete;
    Value get(size_t i) const { return vm_.tempRoots_[base_ + i]; }
    void set(size_t i, Value v) { vm_.tempRoots_[base_ + i] = v; }
    size_t size() const { return n_; }

   private:
    VM& vm_;
    size_t base_, n_;
  };
  // A full collection (GcKind::Major) finds every dead object; a minor one only the
  // young ones (allocated since the last collection), tracing from the roots and the
  // remembered set through young objects only. Either way the survivors become old.
  void collectGarbage(GcKind kind = GcKind::Major);
  // Asks for a collection at the next safe point of the interpreter: a full one, or
  // (GcKind::Minor) the kind the policy picks, minor unless a full one is due.
  void requestCollection(GcKind kind = GcKind::Major) {
    gcRequested_ = true;
    if (kind == GcKind::Major) majorRequested_ = true;
  }
  // The write barrier: called after `v` was stored into a field of `holder`. An old
  // object given a pointer to a young one goes into the remembered set, which the next
  // minor collection traces from (it would not trace the old object otherwise).
  void writeBarrier(Obj* holder, Value v) {
    if (arena_.isMarked(holder) && v.isObject() && !arena_.isMarked(v.asObject())) [[unlikely]]
      remember(holder);
  }
  GcStats gcStats() const;
  void resetPeak() { stats_.peakBytes = bytesAllocated_; }
  // Test hook: the allocation with this 1-based index fails as if out of memory (0: never).
  uint64_t failAllocationAt = 0;
  // Extra roots owned by embedders (handle tables); marked at every collection.
  std::vector<std::function<void(std::vector<Obj*>&)>> rootProviders;
  void markValue(Value v, MarkStack& work);

  // ---- hooks set by higher layers --------------------------------------------
  // Compiles and returns the reverse-mode transform of a proto (compiler/ad).
  std::function<Proto*(VM&, Proto*)> transformProto;
  // The start-up image the library was loaded from (compiler-owned, compiler/src/image.cpp):
  // what the IR of its protos is decoded from when the transform first needs it.
  std::shared_ptr<void> imageState;
  // Decodes the body of a proto loaded from the image (Proto::lazyBody); set with it.
  void (*loadProtoBody)(VM&, Proto*) = nullptr;
  void ensureBody(Proto* p) {
    if (p->lazyBody) [[unlikely]]
      loadProtoBody(*this, p);
  }
  // The image's objects, which the bodies still to decode refer to: roots.
  std::vector<Value> imageObjects;
  // Prints a proto's bytecode (vm/src/disasm.cpp).
  std::string disassemble(const Proto* p, bool recursive = true) const;

  uint64_t instructionsExecuted() const { return instructionCount_; }
  // Starts a run: the configured instruction limit counts the instructions from here on
  // (from the VM's creation until the first call; the C API starts each outermost run).
  void startRun() { runStart_ = instructionCount_; }
  // The native being called, set just before every call of a NativeFn (host
  // function trampolines use it to find their callback).
  Native* callingNative = nullptr;
  // The string procedures' memory of the last string that is not all ASCII they looked
  // into (primitives_strings.cpp): character `index` starts at byte `offset`, and its
  // length in characters if counted (else SIZE_MAX). So a loop of string-ref over such
  // a string walks it once, not once an index. Forgotten at each collection: it keeps
  // nothing alive, and never names a string that is gone.
  struct CharCursor {
    const String* string = nullptr;
    size_t index = 0, offset = 0, length = SIZE_MAX;
  } charCursor;
  // The builtin native registered under an id (for opcode slow paths and AD rules).
  Native* builtin(NativeId id) const { return builtins_[static_cast<size_t>(id)]; }
  std::string currentFile;  // chunk name used for errors raised outside any frame

 private:
  // resume: continue the innermost frame at its saved pc (after a handler landed).
  Value execute(bool resume = false);
  // execute(), passing the runtime errors raised in it to the handlers and going on at
  // the handler frame (above entryDepth) of the one that takes it (handlers.cpp).
  Value run(size_t entryDepth);
  Value runCaught(size_t entryDepth, Error err);  // run's loop once an error was caught
  void askHandlers(Error& e);
  // Drops the frames above the handler frame at `index` and makes it call landing_.
  void land(size_t index);
  // The index of the innermost frame entered from C++ (the first frame of the innermost
  // run): an error decided for a handler frame from there up lands without a throw.
  size_t runEntry() const;
  static Value nextHandlerNative(VM& vm, Value* args, int nargs);
  static Value handlerAtNative(VM& vm, Value* args, int nargs);
  // The innermost active handler frame below frame index `from`, or -1.
  long findHandler(size_t from) const;
  Proto* handlerProto_ = nullptr;      // %with-handler-frame's code
  Proto* continuableProto_ = nullptr;  // the frame raise-continuable calls a handler in
  Closure* continuableCall_ = nullptr;
  Proto* askProto_ = nullptr;  // the frame the handlers are asked in, one after the other
  Closure* askCall_ = nullptr;
  Value raisedValue_ = Value::undefined();  // the object of a raise being thrown
  Value commandLine_ = Value::nil();        // see defineCommandLine
  Value landing_ = Value::undefined();      // what a decided error calls where it lands
  // Set by %next-handler when it has landed an error in the innermost run itself: the
  // interpreter goes on in the innermost frame, where the landing left it.
  bool landed_ = false;
  Value returnList(Instr ins, const Instr* words, Value* R, const Value* K, uint8_t split);
  Value returnRepList(Instr ins, const Instr* words, Value* R, const Value* K, uint8_t split);
  void arrangeArguments(const Proto* p, Value* R, uint32_t nargs, uint32_t parts);
  void buildTrace(Error& e);
  void markRoots(MarkStack& work);
  void traceChildren(Obj* o, MarkStack& work);
  void weakDerivatives(uint64_t& marked, uint64_t& markedBytes);
  [[gnu::noinline]] void holdWeakly(Obj* o);
  // The collection the allocation threshold asked for: minor, or full by the policy
  // (heap.cpp).
  void collectDue();
  bool majorDue() const;
  void remember(Obj* holder);
  void checkRememberedSet();
  void forgetRemembered();  // empties the remembered set

  Config config_;
  Random random_ = Random::fromClock(this);
  uint64_t bytesAllocated_ = 0;
  uint64_t bytesFreed_ = 0;  // uncounted by every collection so far (GcStats::totalAllocatedBytes)
  uint64_t nextGc_ = 1 << 20;
  uint64_t gcThreshold_ = 1 << 20;  // nextGc_ without the test hooks
  uint64_t liveObjects_ = 0;
  uint64_t allocationCount_ = 0;
  size_t stackHigh_ = 0;           // registers above stackTop_ possibly written since the last GC
  std::vector<Obj*> finalizable_;  // protos, symbols, natives, ports: objects owning C++ members
  [[noreturn]] void outOfMemory(uint64_t bytes);
  void allocationThreshold(uint64_t bytes);
  void pastThreshold(uint64_t undo);

  GcStats stats_;
  bool gcRequested_ = false;
  bool majorRequested_ = false;   // the next collection is full
  std::vector<Obj*> remembered_;  // old objects that may point at young ones (kRemembered)
  // A full collection holds the caches of nested derivatives weakly (heap.cpp,
  // weakDerivatives): the transform of a proto made by a transform, and *j of a closure
  // of such a proto. weakPass_ is set while it marks; the objects holding such links wait
  // here until marking ends.
  bool weakPass_ = false;
  std::vector<Obj*> weakHolders_;
  uint64_t oldBytes_ = 0;            // the bytes that survived the last collection (all old)
  uint64_t oldObjects_ = 0;          // and the objects
  uint64_t liveAfterMajor_ = 0;      // the bytes that survived the last full collection
  uint64_t smallAfterMajor_ = 0;     // of them, in small objects (not the arena's large blocks)
  uint64_t afterGc_ = 0;             // bytesAllocated_ just after the last collection
  uint64_t tapeOld_ = 0;             // bytes made old by collections during top-level gradients
  uint64_t nursery_ = 0;             // the bytes allocated between collections, at least
  uint64_t tapeStart_ = UINT64_MAX;  // the total allocated when a top-level gradient started
  void setGcThreshold();
  uint64_t majorAt_ = 0;        // a full collection is due when oldBytes_ reaches this
  uint64_t externalBytes_ = 0;  // counted in bytesAllocated_ too (countExternal)
  // Keyed by a view of the symbol's own name: a symbol in the table is never collected
  // (markRoots marks them all) and its name never changes. So neither a lookup nor an
  // insertion copies the name.
  std::unordered_map<std::string_view, Symbol*> symbols_;
  std::unordered_map<Symbol*, Symbol*> libraryTwins_;            // public symbol -> the library's
  std::vector<std::pair<const char*, Symbol*>> literalSymbols_;  // globalOfLiteral's
  struct SavedBinding {
    Symbol* symbol;
    Value global, macro;
  };
  std::vector<SavedBinding> savedBindings_;  // saveBindings
  bool loadingLibrary_ = false;
  uint32_t macroMarks_ = 0;
  std::vector<Value> tempRoots_;

  MappedArray<Value> stack_;  // registers (mapped_array.h: grows without copying)
  MappedArray<CallFrame> frames_;
  uint32_t stackTop_ = 0;  // first free slot above the innermost frame's registers
  uint64_t instructionCount_ = 0;
  uint64_t runStart_ = 0;  // instructionCount_ when the run began (startRun)
  // instructionCount_ at which the interpreter next checks the instruction limit and
  // interrupts. It outlives execute(): a loop that leaves the interpreter every few
  // instructions (an error caught by a handler, a native calling back) still reaches it.
  uint64_t nextPoll_ = 0;
  std::atomic<bool> interruptRequested_{false};
  std::vector<Value> pendingCall_;
  int callDepth_ = 0;
  Native* builtins_[static_cast<size_t>(NativeId::Count)] = {};
  uint32_t fwdTag_ = 1;  // the last forward tag handed out (1: user-level bundles at top)
  void ensureStack(size_t needed) {
    if (needed > stack_.size()) [[unlikely]]
      growStack(needed);
  }
  void growStack(size_t needed);
  void forceClosureSlow(Closure* c);
  void noteAttached(Attached* a);
  Value adMap(Value root, bool inverse);
  Value jLeaf(Value v);
  Value jInvLeaf(Value v);
  std::unordered_map<uint64_t, Native*> liftedCache_;
  // The last sparse sensitivity made dense, and its dense form (dense): a loop of
  // vector-refs over one sparse ybar in a user's pullback densifies it once (between
  // two collections: each collection forgets them, so they keep nothing alive).
  Value denseOf_[2] = {Value::nil(), Value::nil()};
  std::unordered_map<uint64_t, Closure*> etaCache_;
  [[noreturn]] void raise(ErrorKind kind, const std::string& message);
  Arena arena_;  // last: its free lists (half a KiB) stay out of the interpreter's fields
};

}  // namespace dlam

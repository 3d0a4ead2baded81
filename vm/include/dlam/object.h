// object.h — the layout of every heap object the VM allocates.
//
// All objects start with Obj: an 8-byte header with the type tag, the mark byte,
// flags and a small per-type payload. Objects are allocated from the VM's own
// arena (dlam/arena.h), whose pages the sweeper walks, and never move. The mark
// byte is the collector's (heap.cpp): marks are sticky, so a marked object is one
// that survived a collection ("old"), and an old object that was given a pointer to
// a young one is also flagged as remembered (kRemembered). A mark is the arena's epoch,
// so that all are cleared at once by moving the epoch on (Arena::unmarkAll).
// Pairs and closures carry a memo slot for the AD operators: the value *j made of
// them, or the value *j-inverse made of them (flags say which; both: a record).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dlam/error.h"
#include "dlam/value.h"

namespace dlam {

class VM;

enum class ObjType : uint8_t {
  String,
  Symbol,
  Pair,
  Closure,
  Proto,
  Native,
  Rev,          // reverse-tagged value (AD)
  Attached,     // value with an attached *j (AD)
  Foreign,      // libffi function
  Vector,       // immutable vector of doubles
  ErrorObject,  // what (error msg irritant ...) raises, or a caught runtime error
  Record,       // a record of a type made by define-record-type, or such a type
  Dict,         // a persistent map (its entries: a tree of DictNodes)
  DictNode,     // one entry of a dict's tree (never a value of its own)
  Port,         // input or output port, or the end-of-file object (dlam/port.h)
  Fwd,          // forward-tagged value (AD): a bundle, or the sensitivity of one
};

// Obj::flags bits.
enum ObjFlag : uint16_t {
  kMemoFwd = 1 << 0,       // memo holds (*j this)
  kMemoInv = 1 << 1,       // memo holds (*j-inverse this)
  kMemoBoth = 1 << 2,      // memo holds a Pair record ((*j this) . (*j-inverse this))
  kLazyJ = 1 << 3,         // closure: upvals still need *j applied (lazy environment)
  kLazyJInv = 1 << 4,      // closure: upvals still need *j-inverse applied
  kNoDerivative = 1 << 5,  // native: using it in differentiated code is an error naming it
  // closure: a backpropagator handed to code that observes its result (%observed): it
  // holds, past its captured values, the procedure that runs it and materializes what
  // it returns (vm/src/ad.cpp). The bit of kSparse (never a closure's); CALL tests it
  // with kLazyJ and kLazyJInv on its way to the common case.
  kObservedBp = 1 << 8,
  kHasVjp = 1 << 6,           // native: differentiable (first order only) through Native::vjp
  kRemembered = 1 << 7,       // old, and in the VM's remembered set (it may point at young objects)
  kSparse = 1 << 8,           // vector: a node of a sparse sensitivity (see Vector)
  kUserRep = 1 << 8,          // attached (by attach-*j itself): forward mode transposes its rep
  kSparseOverDense = 1 << 9,  // sparse node: the chain ends in a dense vector
  kZeroTree = 1 << 10,        // dict node: every value in its subtree is the symbolic zero
  kAsciiKnown = 1 << 11,      // string: whether it is all ASCII was found (kAscii says)
  kAscii = 1 << 12,           // string: every byte is ASCII (a character index is a byte index)
  kScalarFwd = 1 << 12,       // Fwd: a bundle (not a cobundle) whose primal and tangent are numbers
  kCoBundle = 1 << 13,        // Fwd: the sensitivity of a bundle (see Fwd), not a bundle
  kDualRule = 1 << 14,        // native: numeric, so bundles among its arguments go to VM::fwdApply
  kForwardRep = 1 << 15,      // attached: rep is the value's j* (attach-j*), not its *j
};

// Obj::marked: the arena's epoch when the object was last marked (1 to kMaxEpoch), 0
// if never. The object is marked (it survived a collection: old; or the running one
// reached it) if that is the arena's epoch now (Arena::isMarked). A new object has 0
// (it is young). The flag kRemembered is only ever set on a marked object.
constexpr uint8_t kMaxEpoch = 0xff;

// The heap memory a std::string owns (none when its characters are stored inside it)
// and a std::vector's buffer: what objects owning C++ members count as their memory.
inline uint64_t heapBytesOf(const std::string& s) {
  const char* self = reinterpret_cast<const char*>(&s);
  if (s.data() >= self && s.data() < self + sizeof s) return 0;
  return s.capacity() + 1;
}
template <class T>
uint64_t heapBytesOf(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

struct Obj {
  ObjType type;
  uint8_t marked;  // the epoch of its mark (see kMaxEpoch)
  uint16_t flags;
  uint32_t aux;  // small per-type payload (lengths, counts)
};

struct String : Obj {
  // aux: length. Bytes follow, NUL-terminated.
  char chars[1];
  uint32_t length() const { return aux; }
  std::string_view view() const { return {chars, aux}; }
};

struct Symbol : Obj {
  Value global;  // the top-level binding, Value::undefined() if none
  Value macro;   // a syntax-rules macro of this name (compiler/src/macros.h), else undefined
  std::string name;
};

struct Pair : Obj {
  Value car;
  Value cdr;
  Value memo;
};

struct Proto;

struct Closure : Obj {
  // aux: number of captured values.
  Proto* proto;
  Value memo;
  Value upvals[1];
  uint32_t count() const { return aux; }
};
// The bytes of a closure with `nupvals` captured values (one slot at least).
inline size_t closureSize(uint32_t nupvals) {
  return offsetof(Closure, upvals) + sizeof(Value) * (nupvals ? nupvals : 1);
}
// The slots a closure's object holds: its captured values, and the hidden one of a
// backpropagator flagged kObservedBp.
inline uint32_t closureSlots(const Obj* o) { return o->aux + (o->flags & kObservedBp ? 1 : 0); }

using Instr = uint64_t;

// In Proto::callKey: the function takes its one argument in parts (CALLP). (Above
// any argument count: apply can pass more than 65535 arguments.)
constexpr uint32_t kCallParts = 0x80000000u;
// Proto::callKey of a proto whose body is still in the start-up image (Proto::lazyBody).
constexpr uint32_t kLazyCallKey = 0xfffffffeu;

// A compiled function. The compiler owns its construction; the VM only executes it.
// `ir` keeps the function's A-normal form so a later transform can derive its
// reverse-mode version at run time (the VM treats it as opaque).
struct Proto : Obj {
  std::vector<Instr> code;
  std::vector<Value> constants;
  std::vector<Proto*> protos;  // lambdas created by this function
  std::vector<std::vector<uint16_t>>
      captures;                       // per child proto: registers of this frame it captures
  std::vector<SrcLoc> locs;           // per instruction
  std::vector<std::string> freeVars;  // captured variables, first-occurrence order
  std::string name;                   // "" for anonymous lambdas
  std::string file;
  SrcLoc loc;
  uint16_t nparams = 0;
  bool hasRest = false;
  // A function of one parameter that only takes it apart along a list with %scar and
  // %scdr (a backpropagator taking a list of sensitivities): the number of parts it
  // takes it as, its first paramSplit - 1 elements and the rest, in registers 0 ..
  // paramSplit - 1 from its entry on (VM::regroupParts); 0 for any other function.
  uint8_t paramSplit = 0;
  // The call entered without the general path: a CALL with this many arguments, or
  // for kCallParts | paramSplit a CALLP with as many parts; 0xffffffff for none (a
  // rest parameter).
  uint32_t callKey = 0;
  // Bit i set: parameter i (< 8) is used only by one *j-inverse (ARGJINV), so a
  // caller may pass it untagged (CallFrame::raw) instead of making a reverse-tagged
  // value this function would only take apart again.
  uint8_t rawParams = 0;
  uint16_t nregs = 0;
  std::shared_ptr<const void> ir;  // compiler-owned IR (anf::Lambda)
  Proto* transformed = nullptr;    // memoised reverse transform
  Proto* primal = nullptr;         // for a transformed proto: the proto it came from
  uint16_t adLevel = 0;            // how many reverse transforms made this proto
  // Part of the AD machinery (the prelude's %-definitions and their transforms): the
  // reverse-transformed functions it calls and the backpropagators it gets are its own
  // business, their results not observed (ADENTRY and observedCallee let them be raw).
  bool adInternal = false;
  // The memory of the IR it keeps for the transform (its own lambda: the nodes of its
  // body, not those of the lambdas nested in it, which their protos count). Set by the
  // compiler; counted with the rest in ownedBytes.
  uint64_t irBytes = 0;
  // Loaded from the start-up image (compiler/src/image.cpp, VM::imageState) with `ir`
  // still to decode, when the transform first needs it: the form (from 1; 0 for none)
  // and the lambda in it.
  uint32_t irForm = 0;
  uint32_t irLambda = 0;
  // Loaded from the start-up image with its body (code, constants, child protos,
  // captures, locations, free variables and callKey) still to decode: where the body
  // starts in the image, plus 1 (0: decoded, or never from an image). A start runs
  // few of the library's functions, so the rest are never decoded. Until then callKey
  // is kLazyCallKey, which no call matches, so the first call takes the path that
  // decodes it (VM::ensureBody); so does anything else that reads the body.
  uint32_t lazyBody = 0;
  uint64_t ownedBytes = 0;  // the C++ memory above, as counted by VM::noteProtoBytes
};

using NativeFn = Value (*)(VM& vm, Value* args, int nargs);
struct Native;
// A native's forward rule (Native::fwdRule): the tangent of its result y from the
// primals p and tangents t of its nargs arguments at one tag (the symbolic zero for an
// argument with none); undefined for no tangent.
using FwdRule = Value (*)(VM& vm, Native* self, const Value* p, const Value* t, int nargs, Value y);

struct Native : Obj {
  NativeFn fn;
  const char* name;  // static storage, or owned by `ownedName`
  int16_t minArgs;
  int16_t maxArgs;  // -1: variadic
  // Whether it takes nargs arguments.
  bool takes(int nargs) const { return nargs >= minArgs && (maxArgs < 0 || nargs <= maxArgs); }
  uint16_t id;         // builtin identifier (NativeId) for the compiler and AD rules
  Value data;          // per-native payload (host callbacks; the base native of a lifted one)
  Value memo;          // (*j this) once made
  uint16_t level = 0;  // lifted/rep natives: how many *j levels they work at
  uint16_t kind = 0;   // NativeKind
  std::string ownedName;
  // Host functions (embed/): the callback and its user data, and for numeric ones
  // with a derivative the vector-Jacobian product: vjp(vm, args..., ybar) returns
  // the list of the argument sensitivities (flag kHasVjp).
  void* hostFn = nullptr;
  void* hostData = nullptr;
  void* hostVjp = nullptr;
  NativeFn vjp = nullptr;
  // Forward mode through a native known by no NativeId (the array library): its rule
  // (VM::fwdRuleApply); fwdDeep when bundles may also come inside its list arguments.
  FwdRule fwdRule = nullptr;
  bool fwdDeep = false;
  // Reverse over forward: the arguments (a bit mask) in which the native is linear, so
  // that given cobundles there it applies to their primal and tangent parts apart
  // (the other arguments, shapes and indices, seen through bundles); 0: an error.
  // Linear in them jointly (a linear argument that is no cobundle gives its all to the
  // primal part), or with fwdCoEach in each apart (multilinear, as a dot product: one
  // that is no cobundle is a coefficient of both parts).
  uint8_t fwdCoLinear = 0;
  bool fwdCoEach = false;
};

enum class NativeKind : uint16_t {
  Plain = 0,
  Lifted,  // base native applied under `level` reverse tags: strips them, calls, re-tags
  Rep,     // (*j base) at `level`: follows the rep-function convention via eta expansion
};

// Rev::aux: kConstantImage on the image of a constant (VM::starJConstant): of a global
// or a literal passed to a call in transformed code, or the result of a library array
// procedure of such arguments only. Whatever sensitivity such a value gets is dropped
// where it came from, so a rule may leave it the symbolic zero (%wanted?, prelude.dlam);
// the tag is in every other way the same as any other. Such a value is computed from
// globals and literals alone, a constant at every level of differentiation, so which
// level a nested derivative reads the mark at does not matter. 0 otherwise.
constexpr uint32_t kConstantImage = 1;

struct Rev : Obj {
  Value primal;
};

struct Attached : Obj {
  Value primal;
  Value rep;
};

// A forward-tagged value (forward mode, docs/forward-mode.md): a dual number primal +
// tangent·ε_tag, aux holding the tag, the perturbation's nesting level (VM::fwdBegin). A bundle's
// parts carry only lower tags, so nested derivatives never mix their perturbations.
// Flagged kCoBundle it is instead the sensitivity of a bundle of that tag (a reverse
// pass over code that made the bundle): the linear form taking (p, t) to
// primal·p + tangent·t, which multiplication by a bundle transposes (VM::fwdApply).
struct Fwd : Obj {
  Value primal;
  Value tangent;
  uint32_t tag() const { return aux; }
  bool co() const { return flags & kCoBundle; }
};

// An R7RS error object: the message (a string) and the irritants (a list). Under *j it
// is a discrete value (its own image and sensitivity), like a string.
struct ErrorObject : Obj {
  Value message;
  Value irritants;
};

// An array of doubles of any rank >= 1, immutable, its elements unboxed, contiguous and
// row-major in one allocation (a large one is a block of its own in the arena, counted
// by the heap like every object: heap_limit_mb applies). A vector is the rank-1 case.
// The shape of a rank-1 array is its length (aux); an array of rank 2 or more keeps its
// sizes after its items (arrayShape). A number plays the part of a rank-0 array.
struct Vector : Obj {
  // aux: number of elements (a vector's length).
  Value memo;     // (*j v), once made (ad.cpp)
  uint32_t rank;  // 1 for a vector
  uint32_t reserved;
  double items[1];
};
// The sizes of the axes of a dense array: rank() of them.
inline const uint32_t* arrayShape(const Vector* v) {
  return v->rank == 1 ? &v->aux : reinterpret_cast<const uint32_t*>(v->items + v->aux);
}
inline uint32_t* arrayShape(Vector* v) {
  return v->rank == 1 ? &v->aux : reinterpret_cast<uint32_t*>(v->items + v->aux);
}
// The bytes of an array of n elements and rank `rank` (its shape after the items).
inline size_t arrayBytes(uint32_t n, uint32_t rank) {
  size_t tail = sizeof(double) * size_t(n) + (rank > 1 ? sizeof(uint32_t) * rank : 0);
  tail = (tail + 7) & ~size_t(7);
  return offsetof(Vector, items) + (tail ? tail : sizeof(double));
}

// A sparse vector sensitivity: a chain of Vector nodes flagged kSparse, each holding one
// element of the sensitivity of a vector of length n, the chain ending in () (the other
// elements are 0) or in a dense vector of length n that holds the rest (the flag
// kSparseOverDense on every node says which). The sensitivity of (vector-ref v i) is one
// node, and plus puts the nodes of a short chain in front of the other side, so the k
// vector-refs of a loop give v's sensitivity in O(k) rather than O(k n) (a dense one-hot
// vector each, summed). A node's items are [n, index, value, nodes from here to the end
// of the chain], aux is 4 (its storage), and memo is the next node, the dense end or ().
// Only the AD runtime meets them as such (plus, %materialize, the shape checks): *j and
// every native that reads elements see the dense form (VM::dense); the printer and
// equal? read them with elementsOf and the C API with denseInto.
constexpr uint32_t kSparseItems = 4;
inline bool isSparse(const Vector* v) { return v->flags & kSparse; }
// A node's items, through a pointer (items is declared with one element).
inline double* sparseItems(Vector* v) { return v->items; }
inline const double* sparseItems(const Vector* v) { return v->items; }
// A chain ending in (): only its nodes are not zero.
inline bool isPurelySparse(const Vector* v) {
  return (v->flags & (kSparse | kSparseOverDense)) == kSparse;
}
// The number of elements: n for a sparse node, the length for a dense vector.
inline uint32_t vectorLength(const Vector* v) {
  return isSparse(v) ? static_cast<uint32_t>(sparseItems(v)[0]) : v->aux;
}
inline uint32_t sparseCount(const Vector* v) {
  return isSparse(v) ? static_cast<uint32_t>(sparseItems(v)[3]) : 0;
}
// Whether a chain of `count` nodes is kept for a vector of n elements; a longer one is
// summed into a dense vector (O(n + count), once every n or so nodes added: O(1) a
// node), so a sensitivity's memory stays O(n) however many vector-refs reach it.
inline bool sparseChainFits(uint64_t count, uint32_t n) { return count <= 2 * uint64_t(n) + 16; }
// Calls f(index, value) for every node of a sparse chain (an index may come more than
// once) and returns its dense end, or nullptr if it ends in ().
template <class F>
const Vector* forEachSparse(const Vector* v, F f) {
  for (;;) {
    f(static_cast<uint32_t>(sparseItems(v)[1]), sparseItems(v)[2]);
    if (!v->memo.isObject()) return nullptr;
    v = static_cast<const Vector*>(v->memo.asObject());
    if (!isSparse(v)) return v;
  }
}
// Adds the elements of v, dense or sparse, into out[0 .. vectorLength(v)).
inline void addInto(const Vector* v, double* out) {
  if (isSparse(v)) {
    v = forEachSparse(v, [&](uint32_t i, double x) { out[i] += x; });
    if (!v) return;
  }
  for (uint32_t i = 0; i < v->aux; ++i) out[i] += v->items[i];
}
// Whether two arrays (dense, or sparse sensitivities of vectors) have one shape.
inline bool sameShape(const Vector* a, const Vector* b) {
  if (a->rank != b->rank) return false;
  if (a->rank == 1) return vectorLength(a) == vectorLength(b);
  const uint32_t *sa = arrayShape(a), *sb = arrayShape(b);
  for (uint32_t i = 0; i < a->rank; ++i)
    if (sa[i] != sb[i]) return false;
  return true;
}
// An array's shape as dlam writes the list of its sizes: "(2 3)".
inline std::string shapeText(const Vector* v) {
  std::string s = "(";
  if (v->rank == 1) {
    s += std::to_string(vectorLength(v));
  } else {
    for (uint32_t i = 0; i < v->rank; ++i) {
      if (i) s += ' ';
      s += std::to_string(arrayShape(v)[i]);
    }
  }
  return s + ")";
}
// Writes the elements of v, dense or sparse, into out[0 .. vectorLength(v)).
inline void denseInto(const Vector* v, double* out) {
  if (!isSparse(v)) {
    for (uint32_t i = 0; i < v->aux; ++i) out[i] = v->items[i];  // as they are (-0 stays -0)
    return;
  }
  for (uint32_t i = 0, n = vectorLength(v); i < n; ++i) out[i] = 0;
  addInto(v, out);
}
// The elements of v: its own items when it is dense, else written into `buffer`
// (the printer and equal? read a vector through this, without a GC object).
template <class Buffer>
const double* elementsOf(const Vector* v, Buffer& buffer) {
  if (!isSparse(v)) return v->items;
  buffer.resize(vectorLength(v));
  denseInto(v, buffer.data());
  return buffer.data();
}

// A record: the values of its fields, in the order of its type's fields. Its type is a
// Record too, whose own type is void (isRecordType): fields [name, field name ...], the
// names symbols. Records are immutable; *j maps a record field by field, as it maps a
// pair (memo: both ways), so a record's image and its sensitivity are records of its type.
struct Record : Obj {
  // aux: number of fields.
  Value type;
  Value memo;
  Value fields[1];
  uint32_t count() const { return aux; }
};
inline size_t recordSize(uint32_t nfields) {
  return offsetof(Record, fields) + sizeof(Value) * (nfields ? nfields : 1);
}
inline bool isRecordType(const Record* r) { return r->type.isVoid(); }

// A dict: a persistent map from keys (numbers, strings, symbols) to values, kept as an
// AVL tree of DictNodes ordered by compareKeys (dict.h), shared between the dicts made
// from one another. `zero` holds, once made, a dict of its keys whose values are all the
// symbolic zero, so that the sensitivity of one entry (%dict-onehot) costs O(log n).
struct Dict : Obj {
  // aux: number of entries.
  Value root;  // a DictNode, or nil when empty
  Value memo;  // *j / *j-inverse (as for pairs)
  Value zero;  // its keys with symbolic zeros, once made, else nil
  uint32_t size() const { return aux; }
};
struct DictNode : Obj {
  // aux: height of the subtree (a leaf: 1).
  Value key;
  Value value;
  Value left;  // nil: no subtree
  Value right;
};

inline bool isObj(Value v, ObjType t) { return v.isObject() && v.asObject()->type == t; }
// v without its reverse tags (every level): the primal of a tagged value, for what is
// not differentiated (indices, statuses, shapes, messages).
inline Value untagged(Value v) {
  while (isObj(v, ObjType::Rev)) v = static_cast<const Rev*>(v.asObject())->primal;
  return v;
}
inline bool isPair(Value v) { return isObj(v, ObjType::Pair); }
inline bool isFwd(Value v) { return isObj(v, ObjType::Fwd); }
inline Fwd* asFwd(Value v) { return static_cast<Fwd*>(v.asObject()); }
// What a use that is not differentiated (an index, a format, a comparison of
// identity, a native with no derivative rule) sees of a forward bundle: its primal,
// through nested bundles. The tangent is dropped, as such a native gets primal values
// under *j (its result is a constant to the derivative).
inline Value fwdPrimal(Value v) {
  while (isObj(v, ObjType::Fwd) && !(v.asObject()->flags & kCoBundle))
    v = static_cast<const Fwd*>(v.asObject())->primal;
  return v;
}
// What a value or a sensitivity is made of under its bundles and cobundles of any depth
// (their primal parts, or the tangent part where the primal part is the symbolic zero):
// what has its shape. A cobundle of cobundles (reverse over forward over forward) has
// the shape of its innermost parts; fwdPrimal stops at a cobundle.
inline Value fwdLeaf(Value x) {
  while (isFwd(x)) {
    const Fwd* f = asFwd(x);
    x = f->primal.isZero() ? f->tangent : f->primal;
  }
  return x;
}
// The same under reverse tags too, at every level.
inline Value leafPart(Value x) {
  for (x = untagged(x); isFwd(x); x = untagged(x)) x = fwdLeaf(x);
  return x;
}
inline Pair* asPair(Value v) { return static_cast<Pair*>(v.asObject()); }
// isPair(a) && isPair(b), testing the tag bits of the two at once (loops along two spines).
inline bool bothPairs(Value a, Value b) {
  constexpr uint64_t kObject = Value::kQNaN | Value::kSignBit;
  return (a.bits() & b.bits() & kObject) == kObject && a.asObject()->type == ObjType::Pair &&
         b.asObject()->type == ObjType::Pair;
}
inline bool isString(Value v) { return isObj(v, ObjType::String); }
inline String* asString(Value v) { return static_cast<String*>(v.asObject()); }
inline bool isSymbol(Value v) { return isObj(v, ObjType::Symbol); }
inline Symbol* asSymbol(Value v) { return static_cast<Symbol*>(v.asObject()); }
inline bool isClosure(Value v) { return isObj(v, ObjType::Closure); }
inline Closure* asClosure(Value v) { return static_cast<Closure*>(v.asObject()); }
inline bool isNative(Value v) { return isObj(v, ObjType::Native); }
inline Native* asNative(Value v) { return static_cast<Native*>(v.asObject()); }
// Whether a bundle (not a cobundle) is an element of the list structure v (a pair),
// found walking cars and cdrs iteratively (vm/src/forward.cpp).
bool bundleInList(Value v);
// What calling an attached value calls: its primal, or for attach-j* given a bundle
// among the arguments (or inside a list among them), its forward rep (which follows
// j*'s convention).
inline Value attachedCallee(Value fn, const Value* args, int nargs) {
  auto* a = static_cast<const Attached*>(fn.asObject());
  if (a->flags & kForwardRep) {
    for (int i = 0; i < nargs; ++i)
      if (isObj(args[i], ObjType::Fwd)) return a->rep;
    for (int i = 0; i < nargs; ++i)
      if (isObj(args[i], ObjType::Pair) && bundleInList(args[i])) return a->rep;
  }
  return a->primal;
}
// Whether calling fn (attached) with these arguments is forward mode meeting a rep made
// by attach-*j itself (kUserRep) with no forward rule over it: a bundle among the
// arguments (or inside a list among them) or in the environment of fn's primal or rep.
// Such a call goes to the prelude's %attached-forward, which transposes the rep
// (vm/src/forward.cpp), so that one rule serves both modes.
// (The flag is tested inline: the library's own attachments, map and fold-left among
// them, never transpose.)
bool attachedTransposesSlow(Value fn, const Value* args, int nargs);
inline bool attachedTransposes(Value fn, const Value* args, int nargs) {
  return (static_cast<const Attached*>(fn.asObject())->flags & kUserRep) &&
         attachedTransposesSlow(fn, args, nargs);
}
// An attached value behaves like its primal everywhere but under *j.
inline Value unwrapAttached(Value v) {
  while (isObj(v, ObjType::Attached)) [[unlikely]] v = static_cast<Attached*>(v.asObject())->primal;
  return v;
}
inline bool isProcedure(Value v) {
  if (!v.isObject()) return false;
  ObjType t = v.asObject()->type;
  return t == ObjType::Closure || t == ObjType::Native || t == ObjType::Foreign ||
         (t == ObjType::Attached);
}

}  // namespace dlam

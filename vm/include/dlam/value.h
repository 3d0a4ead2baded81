// value.h — the dlam value: a NaN-boxed 64-bit word.
//
// Doubles are stored unboxed. Every other value lives in the NaN space: heap
// pointers carry the sign bit, small immediates (nil, booleans, void, the
// "undefined" marker of letrec holes, the symbolic zero of AD) use tags 1..7, and a
// character is its code point under the bit kCharTag (so chars never touch the heap
// and eq? compares them by value). Arithmetic on two doubles never touches the heap.
#pragma once
#include <cstdint>
#include <cstring>

namespace dlam {

struct Obj;

class Value {
 public:
  static constexpr uint64_t kQNaN = 0x7ffc000000000000ull;
  static constexpr uint64_t kSignBit = 0x8000000000000000ull;
  static constexpr uint64_t kCanonicalNaN = 0x7ff8000000000000ull;
  enum Tag : uint64_t {
    kTagNil = 1,
    kTagFalse = 2,
    kTagTrue = 3,
    kTagVoid = 4,
    kTagUndefined = 5,
    kTagZero = 6,
    kTagTailCall = 7,  // returned by a native that asked the VM to call something in its place
  };

  // A character: kQNaN | kCharTag | code point (below 2^21).
  static constexpr uint64_t kCharTag = 0x0000000100000000ull;

  constexpr Value() : bits_(kQNaN | kTagNil) {}
  static constexpr Value fromBits(uint64_t b) {
    Value v;
    v.bits_ = b;
    return v;
  }

  static Value number(double d) {
    Value v;
    std::memcpy(&v.bits_, &d, 8);
    return v;
  }
  // Canonicalises NaN payloads coming from outside (reader, host, foreign calls) so
  // they can never be mistaken for a boxed value.
  static Value numberChecked(double d) { return d != d ? fromBits(kCanonicalNaN) : number(d); }
  static Value object(const Obj* o) {
    return fromBits(kSignBit | kQNaN | reinterpret_cast<uint64_t>(o));
  }
  static constexpr Value nil() { return fromBits(kQNaN | kTagNil); }
  static constexpr Value boolean(bool b) { return fromBits(kQNaN | (b ? kTagTrue : kTagFalse)); }
  static constexpr Value voidValue() { return fromBits(kQNaN | kTagVoid); }
  static constexpr Value undefined() { return fromBits(kQNaN | kTagUndefined); }
  // The symbolic zero sensitivity: conforms to every shape, absorbed by plus in O(1).
  static constexpr Value zero() { return fromBits(kQNaN | kTagZero); }
  static constexpr Value tailCall() { return fromBits(kQNaN | kTagTailCall); }
  static constexpr Value character(uint32_t cp) { return fromBits(kQNaN | kCharTag | cp); }

  bool isNumber() const { return (bits_ & kQNaN) != kQNaN; }
  bool isObject() const { return (bits_ & (kQNaN | kSignBit)) == (kQNaN | kSignBit); }
  bool isNil() const { return bits_ == nil().bits_; }
  bool isBool() const { return bits_ == boolean(true).bits_ || bits_ == boolean(false).bits_; }
  bool isFalse() const { return bits_ == boolean(false).bits_; }
  bool isTruthy() const { return bits_ != boolean(false).bits_; }
  bool isVoid() const { return bits_ == voidValue().bits_; }
  bool isUndefined() const { return bits_ == undefined().bits_; }
  bool isZero() const { return bits_ == zero().bits_; }
  bool isTailCall() const { return bits_ == tailCall().bits_; }
  bool isChar() const { return (bits_ >> 32) == ((kQNaN | kCharTag) >> 32); }

  double asNumber() const {
    double d;
    std::memcpy(&d, &bits_, 8);
    return d;
  }
  uint32_t asChar() const { return static_cast<uint32_t>(bits_); }
  Obj* asObject() const { return reinterpret_cast<Obj*>(bits_ & ~(kSignBit | kQNaN)); }
  uint64_t bits() const { return bits_; }

  friend bool operator==(Value a, Value b) { return a.bits_ == b.bits_; }
  friend bool operator!=(Value a, Value b) { return a.bits_ != b.bits_; }

 private:
  uint64_t bits_;
};

static_assert(sizeof(Value) == 8);

// Numbers as eq? and eqv? compare them: by value (0 and -0 are the same), and every
// NaN is the same as every NaN (so a NaN is found by memv and assv, and eq? to itself).
inline bool sameNumber(double a, double b) { return a == b || (a != a && b != b); }

}  // namespace dlam

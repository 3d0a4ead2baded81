// generational_test.cpp — the generational collector (vm/src/heap.cpp): a minor collection
// traces only young objects, a full one reclaims old garbage, and every store that can make
// an old object point at a young one has a write barrier, so the young object survives
// minor collections. Each barrier test makes the holder old (a full collection), stores a
// new object into it through one mutation point, drops every other reference to the new
// object, then runs minor collections with fresh allocations in between (which reuse any
// slot wrongly freed) and checks the value: without the barrier the value is wrong, the
// program fails, or (under ASan) the freed slot's use is reported.
#include <gtest/gtest.h>

#include <string>

#include "dlam/compiler.h"
#include "dlam/error.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Value;
using dlam::VM;
using GcKind = dlam::VM::GcKind;

dlam::Config config() {
  dlam::Config cfg;
  cfg.heapLimitMb = 256;
  cfg.sandbox = true;
  return cfg;
}

class Generational : public ::testing::Test {
 protected:
  Generational() {
    dlam::openStdlib(vm);
    // (%minor-gc): a collection of the policy's choice (minor unless a full one is due) at
    // the next safe point of the interpreter.
    vm.defineNative(
        "%minor-gc",
        [](VM& v, Value*, int) {
          v.requestCollection(GcKind::Minor);
          return Value::voidValue();
        },
        0, 0);
  }

  std::string eval(const std::string& src) {
    return vm.show(dlam::evalSource(vm, src, "<test>"), true);
  }

  // New objects of every small size class (strings of 16 to 512 bytes), several pages'
  // worth each: they take any slot a collection freed.
  void churn() {
    for (size_t bytes = 16; bytes <= 512; bytes += 16) {
      size_t chars = bytes - 9;  // header, length, NUL: exactly `bytes`
      for (size_t i = 0; i < 8 * (64 << 10) / bytes; ++i) vm.makeString(std::string(chars, 'z'));
    }
  }

  void minor() {
    uint64_t before = vm.gcStats().minorCollections;
    vm.collectGarbage(GcKind::Minor);
    EXPECT_EQ(vm.gcStats().minorCollections, before + 1);
  }

  // Minor collections with new objects in between.
  void minorsAndChurn() {
    for (int i = 0; i < 3; ++i) {
      minor();
      churn();
    }
    minor();
  }

  VM vm{config()};
};

// ---- what a minor collection does ---------------------------------------------------------

TEST_F(Generational, MinorCollectionDoesNotTraceOldObjects) {
  eval("(define big (iota 100000))");
  vm.collectGarbage();  // full: everything it finds, the 10^5 pairs included, becomes old
  EXPECT_GE(vm.gcStats().markedLast, 100000u);
  eval("(define small (list 1 2 3))");
  minor();
  // The new list, the compiled form and little else; not the old list.
  EXPECT_LT(vm.gcStats().markedLast, 1000u);
  minor();
  EXPECT_LT(vm.gcStats().markedLast, 100u);
  EXPECT_EQ(eval("(list (length big) (list-ref big 99999) small)"), "(100000 99999 (1 2 3))");
  // A full collection traces them all again.
  vm.collectGarbage();
  EXPECT_GE(vm.gcStats().markedLast, 100000u);
}

// A minor collection frees its dead later, page by page as the allocator reaches them,
// and gcStats reports that work: dead objects freed one by one in pages that also hold
// survivors, pages with nothing marked emptied whole.
TEST_F(Generational, GcStatsCountTheLazySweepsWork) {
  eval("(define keep (make-vector 1 0))");
  vm.collectGarbage();
  dlam::GcStats before = vm.gcStats();
  // Pages in which every fourth string survives (held by a list), the rest die.
  eval(
      "(define held (let loop ((i 0) (acc '())) (if (= i 20000) acc "
      "(let ((s (make-string 20 #\\a))) (loop (+ i 1) (if (= 0 (modulo i 4)) (cons s acc) "
      "acc))))))");
  minor();
  dlam::GcStats after = vm.gcStats();
  EXPECT_EQ(after.sweptObjects, before.sweptObjects);  // nothing swept yet: it is lazy
  churn();
  dlam::GcStats swept = vm.gcStats();
  EXPECT_GE(swept.sweptObjects - before.sweptObjects, 15000u);
  EXPECT_GT(swept.pagesEmptied + swept.pagesSkipped, before.pagesEmptied + before.pagesSkipped);
  EXPECT_EQ(eval("(length held)"), "5000");
}

// Collections count the bytes from the marks (a minor one's sweep is lazy and frees
// later): what survives must be counted as allocation counted it, for every kind of
// object, through minor and full collections, and what dies uncounted at once.
TEST_F(Generational, CollectionsCountTheSurvivorsAsAllocationCountedThem) {
  vm.collectGarbage();
  dlam::Symbol* keep = vm.intern("keep");
  vm.setGlobal(keep, Value::nil());
  vm.collectGarbage();
  uint64_t bytes0 = vm.gcStats().liveBytes, objects0 = vm.gcStats().liveObjects;
  // Made from C++, so nothing else is allocated: strings of several sizes (up to a large
  // block), a symbol, closures of 0 to 3 captured values, a proto with code, a native,
  // a reverse-tagged number, an attached value, vectors; then the spine holding them.
  std::vector<Value> items;
  for (size_t n : {0, 7, 8, 100, 2000}) items.push_back(vm.makeString(std::string(n, 'q')));
  items.push_back(Value::object(vm.intern("a-symbol-made-here")));
  dlam::Proto* proto = vm.makeProto();
  proto->code.assign(100, dlam::Instr(0));
  vm.noteProtoBytes(proto);
  items.push_back(Value::object(proto));
  for (uint32_t n = 0; n < 4; ++n) items.push_back(Value::object(vm.makeClosure(proto, n)));
  items.push_back(Value::object(vm.makeNative(
      "a-native", [](VM&, Value*, int) { return Value::nil(); }, 0, 0)));
  items.push_back(Value::object(vm.makeRev(Value::number(2))));
  items.push_back(Value::object(vm.makeAttached(Value::number(1), items.back())));
  for (uint32_t n : {0u, 1u, 5u, 100u}) items.push_back(Value::object(vm.makeVector(n)));
  Value list = Value::nil();
  for (Value v : items) {
    list = vm.cons(v, list);
    vm.setGlobal(keep, list);
  }
  uint64_t bytes1 = vm.gcStats().liveBytes, objects1 = vm.gcStats().liveObjects;
  ASSERT_GT(bytes1, bytes0 + 2000);
  minor();
  EXPECT_EQ(vm.gcStats().liveBytes, bytes1);
  EXPECT_EQ(vm.gcStats().liveObjects, objects1);
  vm.collectGarbage();
  EXPECT_EQ(vm.gcStats().liveBytes, bytes1);
  EXPECT_EQ(vm.gcStats().liveObjects, objects1);
  // Dropped: a full collection uncounts every one (the symbol stays interned).
  vm.setGlobal(keep, Value::nil());
  vm.collectGarbage();
  uint64_t symbolBytes = dlam::Arena::footprint(sizeof(dlam::Symbol));
  EXPECT_EQ(vm.gcStats().liveBytes, bytes0 + symbolBytes);
  EXPECT_EQ(vm.gcStats().liveObjects, objects0 + 1);
  // Young and dead: a minor collection uncounts them at once, though its sweep waits.
  for (int i = 0; i < 1000; ++i) vm.cons(Value::number(i), Value::nil());
  vm.makeString(std::string(3000, 'z'));
  minor();
  EXPECT_EQ(vm.gcStats().liveBytes, bytes0 + symbolBytes);
  EXPECT_EQ(vm.gcStats().liveObjects, objects0 + 1);
}

TEST_F(Generational, YoungGarbageIsFreedByAMinorCollection) {
  vm.collectGarbage();
  uint64_t live0 = vm.gcStats().liveBytes;
  eval("(define (waste n) (if (= n 0) 0 (begin (iota 100) (waste (- n 1)))))");
  eval("(waste 1000)");
  minor();
  EXPECT_LT(vm.gcStats().liveBytes, live0 + 64 * 1024);
}

TEST_F(Generational, OldGarbageIsReclaimedByAFullCollection) {
  eval("(define big (iota 200000))");
  vm.collectGarbage();
  uint64_t withBig = vm.gcStats().liveBytes;
  eval("(define big 0)");
  // Dead but old: a minor collection does not look at it.
  minor();
  EXPECT_GE(vm.gcStats().liveBytes + 1024, withBig);
  // A full one frees it.
  vm.collectGarbage();
  EXPECT_LE(vm.gcStats().liveBytes + 200000u * sizeof(dlam::Pair), withBig);
  // (collect-garbage) asks for a full collection too.
  eval("(define big (iota 200000))");
  vm.collectGarbage();
  withBig = vm.gcStats().liveBytes;
  eval("(define big 0)");
  uint64_t minors = vm.gcStats().minorCollections;
  EXPECT_EQ(eval("(begin (collect-garbage) (car (list 1)))"), "1");
#ifndef DLAM_GC_STRESS  // (under GC stress every safe point collects, minor ones too)
  EXPECT_EQ(vm.gcStats().minorCollections, minors) << "(collect-garbage) is a full collection";
#endif
  EXPECT_LE(vm.gcStats().liveBytes + 199000u * sizeof(dlam::Pair), withBig);
}

TEST_F(Generational, TheAllocationThresholdGivesMinorAndFullCollections) {
  // A structure that keeps growing (its old bytes double now and then) and garbage.
  eval(
      "(define keep"
      "  (let loop ((i 0) (keep '()))"
      "    (if (= i 2000) keep (loop (+ i 1) (begin (iota 500) (cons (iota 100) keep))))))");
  dlam::GcStats s = vm.gcStats();
  EXPECT_GT(s.minorCollections, 0u);
  EXPECT_GT(s.collections - s.minorCollections, 0u);
  EXPECT_EQ(eval("(list (length keep) (apply + (map length keep)))"), "(2000 200000)");
}

// Large arrays (the arena's large blocks) pace the collector by what they may leave
// behind, not by how much lives: a loop of array arithmetic on 8 MB arrays, whose
// temporaries are live in registers when a collection runs mid-function (so they are
// promoted, and then die), keeps its peak heap within a dozen arrays. The pace used to
// follow the bytes live after the last full collection, temporaries included (80 MB
// here), so a collection came every ten arrays and a full one when those had doubled
// again: 153 MB (the function) and 137 MB (its gradient) at the peak. And the array
// arithmetic opcodes (ADD, MUL...: no call) are safe points when a collection is due.
TEST_F(Generational, LargeArrayTemporariesKeepThePeakHeapLow) {
  constexpr uint64_t kArray = 8000000;  // 10^6 doubles
  eval("(define x (make-array (list 1000000) 0.5))");
  eval(
      "(define (f x)"
      "  (let* ((a (* x x)) (b (- a x)) (c (* 3 b)) (d (+ c a)) (e (* d d)) (g (- e 1)))"
      "    (sum g)))");
  EXPECT_EQ(eval("(let loop ((i 0) (acc 0)) (if (= i 40) acc (loop (+ i 1) (+ acc (f x)))))"),
            "-30000000");
  // x and f's six temporaries live at once, at most: 56 MB, and some young garbage.
  EXPECT_LT(vm.gcStats().peakBytes, 12 * kArray);
  EXPECT_GT(vm.gcStats().totalAllocatedBytes, 40 * 6 * kArray);
}

TEST_F(Generational, LargeArrayTemporariesKeepTheGradientsPeakHeapLow) {
  constexpr uint64_t kArray = 8000000;
  eval("(define x (make-array (list 1000000) 0.5))");
  eval(
      "(define (f x)"
      "  (let* ((a (* x x)) (b (- a x)) (c (* 3 b)) (d (+ c a)) (e (* d d)) (g (- e 1)))"
      "    (sum g)))");
  eval("(define gf (gradient f))");
  // df/dx = 2 (3 (x^2 - x) + x^2)(6x - 3 + 2x) = 2 (-0.5)(1) = -1 at x = 0.5.
  EXPECT_EQ(
      eval("(let loop ((i 0) (acc 0)) (if (= i 20) acc (loop (+ i 1) (+ acc (sum (gf x))))))"),
      "-20000000");
  // x, the six forward temporaries the tape keeps, and the reverse pass's.
  EXPECT_LT(vm.gcStats().peakBytes, 14 * kArray);
}

// A gradient's tape dies at the gradient's end (VM::gradientBoundary): the collection comes
// there, finding it dead, and the nursery is sized to hold the next gradient. A gradient
// through 60 000 steps allocates some 7 MB, more than the 4 MB nursery: the first one
// has collections in its middle, which make its tape old, and a full collection at its
// end frees it; after it, each one is followed by exactly one collection, which traces
// almost nothing, and none runs in its middle. Without the boundary, a collection would
// come every 4 MB wherever that falls, tracing the half-built tape, and the old tapes
// would stay until the old bytes doubled. A gradient taken inside one (nested) changes
// nothing, and plain code keeps a pace of a few MB.
TEST_F(Generational, GradientsAreCollectedAtTheirEndAndNotInTheirMiddle) {
  eval(
      "(define (steps n) (lambda (x) (let loop ((i 0) (acc x)) (if (= i n) acc (loop (+ i 1) (sin "
      "acc))))))");
  eval("(define f (steps 60000))");
  eval("(define g (gradient f))");
  EXPECT_EQ(eval("(< (abs (- ((gradient (steps 10)) 0.5) ((derivative (steps 10)) 0.5))) 1e-15)"),
            "#t");
  eval("0");
  vm.collectGarbage();
  dlam::GcStats before = vm.gcStats();
  eval("(define r (g 0.5))");
  eval("0");
  dlam::GcStats after = vm.gcStats();
  EXPECT_GE(after.minorCollections, before.minorCollections + 1) << "in the middle of the first";
  EXPECT_GE(after.collections - after.minorCollections,
            before.collections - before.minorCollections + 1)
      << "a full collection at its end";
  EXPECT_LT(after.liveBytes, before.liveBytes + (256u << 10)) << "the old tape is freed";
  for (int k = 0; k < 6; ++k) {
    before = vm.gcStats();
    eval("(define r (g 0.5))");
    eval("0");  // (a safe point between top-level forms: the requested collection runs)
    after = vm.gcStats();
    EXPECT_EQ(after.collections, before.collections + 1) << "gradient " << k;
    EXPECT_EQ(after.minorCollections, before.minorCollections + 1) << "gradient " << k;
    EXPECT_LT(after.markedLast, 1000u) << "gradient " << k;
    EXPECT_GT(after.totalAllocatedBytes - before.totalAllocatedBytes, uint64_t(5) << 20);
  }
  EXPECT_EQ(eval("(< (abs (- r ((derivative f) 0.5))) 1e-15)"), "#t");
  // The library's other entry points mark their gradients too (value-and-gradient;
  // jacobian-reverse through vjp). derivative and jvp are forward mode: no tape.
  for (const char* call : {"((value-and-gradient f) 0.5)",
                           "((jacobian-reverse (lambda (l) (list (f (car l))))) (list 0.5))"}) {
    eval(call);  // (the first of each: its transform is compiled)
    eval("0");
    before = vm.gcStats();
    eval(call);
    eval("0");
    after = vm.gcStats();
    EXPECT_EQ(after.collections, before.collections + 1) << call;
    EXPECT_LT(after.markedLast, 1000u) << call;
  }
  // Nested: the inner gradients end inside the outer tape, which lives on.
  eval("(define (h x) ((derivative (lambda (y) (* x (f y)))) 0.5))");
  EXPECT_EQ(eval("(< (abs (- ((derivative h) 2) ((derivative f) 0.5))) 1e-12)"), "#t");
  // Plain code after gradients: the nursery was sized to hold them, and stays so
  // until the next gradient says otherwise.
  before = vm.gcStats();
  eval("(define (churn n) (if (= n 0) 0 (begin (iota 100) (churn (- n 1)))))");
  eval("(churn 20000)");  // some 64 MB
  after = vm.gcStats();
  EXPECT_GE(after.collections - before.collections, 2u);
  EXPECT_LE(after.collections - before.collections, 16u);
}

// The collector's pace follows the objects, not the C++ memory of compiled code that counts
// with them (bytecode and IR, Proto::ownedBytes): with 4 000 functions (16 MB of IR) live,
// garbage is still collected every few megabytes. Paced by all the bytes, the nursery was
// as large as the code (the next collection came after as many bytes as were live) and
// full collections as far apart.
TEST_F(Generational, ThePaceFollowsTheObjectsNotTheCompiledCode) {
  for (int i = 0; i < 4000; ++i) {
    std::string k = std::to_string(i);
    eval("(define (f" + k + " x y) (let ((a (* x y)) (b (+ x " + k +
         "))) (if (< a b) (list a b (* a b)) (cons (- a b) (sin a)))))");
  }
  vm.collectGarbage();
  uint64_t live = vm.gcStats().liveBytes;
  EXPECT_GT(live, uint64_t(12) << 20);
  vm.resetPeak();
  EXPECT_EQ(
      eval("(let loop ((i 0) (keep '())) (if (= i 20000) (length keep)"
           " (loop (+ i 1) (begin (iota 100) (if (= 0 (modulo i 100)) (cons i keep) keep)))))"),
      "200");
  EXPECT_GT(vm.gcStats().collections, 5u);
  EXPECT_LT(vm.gcStats().peakBytes - live, uint64_t(8) << 20);
}

// A full collection moves the arena's epoch on rather than clearing every mark, and the
// epochs start over after 255: across 300 full collections with minor ones in between,
// old objects that point at young ones (remembered, then not) keep them, and the garbage
// of each round is freed.
TEST_F(Generational, MarksStayRightAcrossManyRoundsOfEpochs) {
  eval("(define g 0)");
  eval("(define old (iota 1000))");
  vm.collectGarbage();
  uint64_t base = vm.gcStats().liveBytes;
  for (int round = 0; round < 300; ++round) {
    std::string n = std::to_string(round);
    // The old symbol g given a young list: remembered until the next minor collection.
    eval("(define g (list " + n + " \"young\"))");
    eval("(iota 2000)");  // garbage
    minor();
    churn();
    EXPECT_EQ(eval("g"), "(" + n + " \"young\")");
    vm.collectGarbage();
    EXPECT_EQ(eval("(list g (length old) (list-ref old 999))"), "((" + n + " \"young\") 1000 999)");
    EXPECT_LT(vm.gcStats().liveBytes, base + 64 * 1024) << round;
  }
}

// ---- write barriers, one per mutation point ------------------------------------------------

// SETGLOBAL: a top-level define over an old symbol.
TEST_F(Generational, BarrierGlobalDefinedOverAnOldSymbol) {
  eval("(define g 0)");
  vm.collectGarbage();
  for (int round = 0; round < 3; ++round) {
    std::string n = std::to_string(round);
    eval("(define g (list " + n + " (* 2 " + n + ") \"s" + n + "\"))");
    minorsAndChurn();
    EXPECT_EQ(eval("g"), "(" + n + " " + std::to_string(2 * round) + " \"s" + n + "\")");
  }
}

// VM::defineGlobal from C++ (dlam_set_global, command-line, host functions).
TEST_F(Generational, BarrierGlobalDefinedFromCpp) {
  vm.defineGlobal("h", Value::number(0));
  vm.collectGarbage();
  Value l = vm.cons(Value::number(1), vm.cons(vm.makeString("two"), Value::nil()));
  vm.defineGlobal("h", l);
  minorsAndChurn();
  EXPECT_EQ(eval("h"), "(1 \"two\")");
}

// SETUPVAL: letrec patches a closure made before a collection (at the next CLOSURE) made
// it old, with a closure made after.
TEST_F(Generational, BarrierLetrecPatchesAnOldClosure) {
  eval(
      "(define (mk n)"
      "  (letrec ((f (lambda () (g)))"
      "           (c (collect-garbage))"  // collects at the next safe point: the CLOSURE of g
      "           (g (lambda () (list n n))))"
      "    f))");
  eval("(define f1 (mk 42))");
  minorsAndChurn();
  EXPECT_EQ(eval("(f1)"), "(42 42)");
  eval("(define f2 (mk 7))");
  minorsAndChurn();
  EXPECT_EQ(eval("(list (f1) (f2))"), "((42 42) (7 7))");
}

// setMemo: the memo of *j on old pairs (the *j image is reachable only through it).
TEST_F(Generational, BarrierStarJMemoOnOldPairs) {
  eval("(define l (list 1 2 3))");
  vm.collectGarbage();
  eval("(begin (*j l) 0)");
  minorsAndChurn();
  EXPECT_EQ(eval("(list (eq? (*j l) (*j l)) (map *j-inverse (*j l)) (eq? (*j-inverse (*j l)) l))"),
            "(#t (1 2 3) #t)");
}

// setMemo: the memo of *j on an old closure.
TEST_F(Generational, BarrierStarJMemoOnAnOldClosure) {
  eval("(define (sq x) (* x x))");
  vm.collectGarbage();
  eval("(begin (*j sq) 0)");
  minorsAndChurn();
  EXPECT_EQ(eval("(list (eq? (*j sq) (*j sq)) (eq? (*j-inverse (*j sq)) sq) ((gradient sq) 3))"),
            "(#t #t 6)");
}

// setMemo: an old pair that has its *j memo is given its *j-inverse memo too: both go
// into a new record pair.
TEST_F(Generational, BarrierSecondMemoOnAnOldPair) {
  eval("(define l (list \"a\" 'b))");  // *j and *j-inverse of strings and symbols are themselves
  eval("(define jl (*j l))");
  vm.collectGarbage();
  eval("(begin (*j-inverse l) 0)");
  minorsAndChurn();
  EXPECT_EQ(eval("(list (eq? (*j l) jl) (eq? (*j-inverse l) (*j-inverse l)) (*j-inverse l) (eq? "
                 "(*j-inverse l) l))"),
            "(#t #t (\"a\" b) #f)");
}

// VM::transformed: the reverse transform cached on an old proto (the closures that used it die).
TEST_F(Generational, BarrierTransformCachedOnAnOldProto) {
  eval("(define (make) (lambda (x) (let ((h (lambda (y) (* x y y)))) (h x))))");
  vm.collectGarbage();
  EXPECT_EQ(eval("((gradient (make)) 2)"), "12");
  minorsAndChurn();
  EXPECT_EQ(eval("((gradient (make)) 3)"), "27");
  minorsAndChurn();
  EXPECT_EQ(eval("(list ((gradient (make)) 1) ((gradient (gradient (make))) 1))"), "(3 6)");
}

// forceClosureSlow: the lazily mapped environment of an old (*j closure), mapped on its first call.
TEST_F(Generational, BarrierLazyEnvironmentOfAnOldClosure) {
  eval("(define (make-scale a) (lambda (x) (* a x)))");
  eval("(define jscale (*j (make-scale 3)))");
  eval("(define jpair (*j (let ((l (list 1 2))) (lambda (x) (* x (car l) (cadr l))))))");
  vm.collectGarbage();
  EXPECT_EQ(eval("(*j-inverse (car (jscale (*j 2))))"), "6");
  EXPECT_EQ(eval("(*j-inverse (car (jpair (*j 5))))"), "10");
  minorsAndChurn();
  EXPECT_EQ(eval("(list (*j-inverse (car (jscale (*j 5)))) (*j-inverse (car (jpair (*j 7)))))"),
            "(15 14)");
}

// noteAttached: an old rep remembers the attached value as its *j-inverse.
TEST_F(Generational, BarrierAttachedValueRememberedByAnOldRep) {
  eval("(define (f x) (list 'f x))");
  eval("(define (rep x) (list 'rep x))");
  vm.collectGarbage();
  eval("(begin (attach-*j f rep) 0)");
  minorsAndChurn();
  EXPECT_EQ(eval("((*j-inverse rep) 7)"), "(f 7)");
}

// map's native loop: it appends each result cell to the last one, which a collection in
// the mapped procedure may have made old.
TEST_F(Generational, BarrierMapAppendsToAnOldCell) {
  uint64_t minors = vm.gcStats().minorCollections;
  EXPECT_EQ(
      eval("(define r (map (lambda (x) (%minor-gc) (list x (* x x))) (iota 200))) (length r)"),
      "200");
  EXPECT_GE(vm.gcStats().minorCollections - minors, 150u);
  minorsAndChurn();
  EXPECT_EQ(eval("(equal? r (let loop ((i 199) (acc '())) (if (< i 0) acc (loop (- i 1) (cons "
                 "(list i (* i i)) acc)))))"),
            "#t");
}

}  // namespace

// opcodes.h — every bytecode instruction, defined once, and the layout of its word.
//
// An instruction is a 64-bit word. Its fields, the most significant bits on the left:
//
//     63      56 55            40 39            24 23             8 7      0
//    +----------+----------------+----------------+----------------+--------+
//    |   top    |       C        |       B        |       A        |   op   |   ABC
//    +----------+----------------+----------------+----------------+--------+
//    |   top    |      sC        |       B        |       A        |   op   |   ABsC
//    +----------+----------------+----------------+----------------+--------+
//    | 0        |               Bx                |       A        |   op   |   ABx
//    +----------+---------------------------------+----------------+--------+
//    | 0        |              sBx                |       A        |   op   |   AsBx
//    +----------+---------------------------------+----------------+--------+
//
// op is the opcode (Op). A, B and C are 16 bits each: registers (frame-relative), indices
// into the proto's constant table K, or counts, as DLAM_OP's FORMAT says. Bx is B and C
// read as one unsigned 32-bit number (constant and proto indices); sBx is the same bits
// signed (a jump offset relative to the next instruction), and sC is C read as a signed
// 16-bit jump offset. RETURNN and RETURNR own the words after them, which list registers
// four to a word, the first lowest:
//
//    +----------------+----------------+----------------+----------------+
//    |     x(4j+3)    |     x(4j+2)    |     x(4j+1)    |      x(4j)     |   word j
//    +----------------+----------------+----------------+----------------+
//
// The top byte means one thing or another by the opcode; each meaning has its accessor
// below, and nothing else reads these bits:
//
//     63  62            56
//    +---+----------------+
//    | s |     level      |   ADD .. NUMEQK, the arithmetic and the comparisons
//    +---+----------------+
//    | h | 0              |   JNLT .. JNNUMEQK, the compare-and-jumps
//    +---+----------------+
//    | untagged arguments |   CALL, TAILCALL: bit 56 + j flags argument j + 1
//    +------------+---+---+
//    | 0          |tk |hk |   RETURNN, RETURNR: hk, A is K[A]; tk, C is K[C]
//    +------------+---+---+
//
// h (holds): a compare-and-jump that jumps where the comparison holds, not where it
// fails (a loop's test repeated at its end: below).
// s (swapped): a K-form instruction whose operands were swapped from the source order
// ((* 2 x) → MULK x 2), so error messages still number the arguments as written; RSUBK
// and RDIVK keep the constant on the left ((- 1 x) → RSUBK x 1), in the source order.
// level: in transformed code the operands carry that many reverse tags, which the slow
// path strips (and puts back on the result). The untagged arguments are computed for *j
// and passed as they are (CallFrame::raw). Every other opcode leaves the top byte 0.
// 64-bit words (rather than Lua's 32) let a function use up to 65535 registers, which
// reverse-transformed code of large functions needs.
//
// A compare-and-jump with h set (JLT .. JNUMEQK in listings) repeats a loop's test at
// its end. A loop compiled in place whose body starts with a compare-and-jump (its
// test) ends each self-call with the test again, followed by a JMP: jumping back into
// the body where the test would lead, the one dispatch per iteration where a JMP back
// to the test made two. A self-call in the branch the test falls through to repeats
// it with h set (jump back past the test while the comparison holds), one in the
// branch it jumps to repeats it as it is (jumping backwards); the JMP after it goes
// where the test goes otherwise. The repeated test has the test's location (an error
// comparing is the test's), and a poll after it jumped back points at the JMP after
// it (the self-call's location).
//
// The enum, the names, the interpreter's dispatch table and the disassembler are
// all generated from DLAM_OPCODES.
#pragma once
#include <cstdint>

#include "dlam/object.h"

namespace dlam {

// DLAM_OP(NAME, FORMAT, DOC). FORMAT tells the disassembler how to read operands:
//   A      one register          AB    two registers       ABC   three registers
//   ABK    A, B registers, C constant                      ABx   A register, Bx constant
//   AP     A register, Bx proto  sBx   jump                AsBx  register + jump
//   ABsC   A, B registers, sC jump                         AKsC  A register, B constant, sC jump
//   ABN    A register, B count   ABCu  A closure register, B upvalue index, C register
//   ABU    A register, B upvalue index, C how many more (registers and upvalues) after them
//   ABn    A, B registers, C how many times more the operation is applied
//   ABL    A register, B count, C register, then B registers in ceil(B / 4) more words
//          (16 bits each, lowest first), which the instruction owns
//   ABR    as ABL, the first of the B registers apart (RETURNR's backpropagator)
//   ABV    A register, B count, C register, then B registers as ABL's (SENSBK's values)
//   ABP    A, B registers, C a primitive (its NativeId)
#define DLAM_OPCODES(X)                                                                          \
  X(LOADK, ABx, "R[A] = K[Bx]")                                                                  \
  X(MOVE, AB, "R[A] = R[B]")                                                                     \
  X(GETUPVAL, ABU, "R[A] .. R[A+C] = captured values B .. B+C of the running closure")           \
  X(GETGLOBAL, ABx, "R[A] = global K[Bx] (error if undefined)")                                  \
  X(SETGLOBAL, ABx, "global K[Bx] = R[A]")                                                       \
  X(CLOSURE, AP, "R[A] = new closure of child proto Bx, capturing its listed registers")         \
  X(SETUPVAL, ABCu, "captured value B of closure R[A] = R[C] (letrec patching)")                 \
  X(CALL, ABN, "R[A] = R[A](R[A+1] .. R[A+B]); C > 0: its parts in R[A] ... (CallFrame::split)") \
  X(CALLP, ABN,                                                                                  \
    "as CALL, R[A+1] .. R[A+B] the parts of its one argument: B - 1 elements of a list and the " \
    "rest")                                                                                      \
  X(TAILCALL, ABN, "return R[A](R[A+1] .. R[A+B]), reusing this frame")                          \
  X(RETURN, A, "return R[A]")                                                                    \
  X(RETURN2, AB, "return (cons R[A] R[B]), as two values to a caller that splits it")            \
  X(RETURNN, ABL,                                                                                \
    "return (cons R[A] (x1 ... xB . R[C])), the B registers x in the next words; parts to a "    \
    "splitting caller (A, C: K[A], K[C] when marked)")                                           \
  X(RETURNR, ABR,                                                                                \
    "return (cons (cons R[A] (x1 ... xk . R[C])) bp), bp and the k = B - 1 registers x in the "  \
    "next words; parts to a splitting caller (A, C as RETURNN's)")                               \
  X(JMP, sBx, "pc += sBx")                                                                       \
  X(JMPIFNOT, AsBx, "if R[A] is #f then pc += sBx")                                              \
  X(ADD, ABC, "R[A] = R[B] + R[C]")                                                              \
  X(SUB, ABC, "R[A] = R[B] - R[C]")                                                              \
  X(MUL, ABC, "R[A] = R[B] * R[C]")                                                              \
  X(DIV, ABC, "R[A] = R[B] / R[C]")                                                              \
  X(ADDS, ABC, "R[A] = R[B] + R[C] as sensitivities of one value (%sens+)")                      \
  X(SUBS, ABC, "R[A] = R[B] - R[C] as sensitivities of one value (%sens-)")                      \
  X(ADDK, ABK, "R[A] = R[B] + K[C]")                                                             \
  X(SUBK, ABK, "R[A] = R[B] - K[C]")                                                             \
  X(MULK, ABK, "R[A] = R[B] * K[C]")                                                             \
  X(DIVK, ABK, "R[A] = R[B] / K[C]")                                                             \
  X(RSUBK, ABK, "R[A] = K[C] - R[B]")                                                            \
  X(RDIVK, ABK, "R[A] = K[C] / R[B]")                                                            \
  X(LT, ABC, "R[A] = R[B] < R[C]")                                                               \
  X(LE, ABC, "R[A] = R[B] <= R[C]")                                                              \
  X(GT, ABC, "R[A] = R[B] > R[C]")                                                               \
  X(GE, ABC, "R[A] = R[B] >= R[C]")                                                              \
  X(NUMEQ, ABC, "R[A] = R[B] = R[C]")                                                            \
  X(LTK, ABK, "R[A] = R[B] < K[C]")                                                              \
  X(LEK, ABK, "R[A] = R[B] <= K[C]")                                                             \
  X(GTK, ABK, "R[A] = R[B] > K[C]")                                                              \
  X(GEK, ABK, "R[A] = R[B] >= K[C]")                                                             \
  X(NUMEQK, ABK, "R[A] = R[B] = K[C]")                                                           \
  X(JNLT, ABsC, "if not R[A] < R[B] then pc += sC")                                              \
  X(JNLE, ABsC, "if not R[A] <= R[B] then pc += sC")                                             \
  X(JNGT, ABsC, "if not R[A] > R[B] then pc += sC")                                              \
  X(JNGE, ABsC, "if not R[A] >= R[B] then pc += sC")                                             \
  X(JNNUMEQ, ABsC, "if not R[A] = R[B] then pc += sC")                                           \
  X(JNLTK, AKsC, "if not R[A] < K[B] then pc += sC")                                             \
  X(JNLEK, AKsC, "if not R[A] <= K[B] then pc += sC")                                            \
  X(JNGTK, AKsC, "if not R[A] > K[B] then pc += sC")                                             \
  X(JNGEK, AKsC, "if not R[A] >= K[B] then pc += sC")                                            \
  X(JNNUMEQK, AKsC, "if not R[A] = K[B] then pc += sC")                                          \
  X(CONS, ABC, "R[A] = (cons R[B] R[C])")                                                        \
  X(CAR, AB, "R[A] = (car R[B]); C: the step of a caar ... cdddr it is (instr::cxrStep)")        \
  X(CDR, AB, "R[A] = (cdr R[B]); C: the step of a caar ... cdddr it is (instr::cxrStep)")        \
  X(NOT, AB, "R[A] = (not R[B])")                                                                \
  X(NULLP, AB, "R[A] = (null? R[B])")                                                            \
  X(PAIRP, AB, "R[A] = (pair? R[B])")                                                            \
  X(TYPEP, ABP, "R[A] = (P R[B]), P the type predicate C names (its NativeId): number? ...")     \
  X(EQP, ABC, "R[A] = (eq? R[B] R[C])")                                                          \
  X(ATTACH, ABC, "R[A] = (attach-*j R[B] R[C]): R[B] whose *j is R[C]")                          \
  X(PLUS, ABC, "R[A] = (plus R[B] R[C]): sensitivities added")                                   \
  X(UNRED, ABC, "R[A] = (%unreduce R[B] R[C]): R[B] itself when R[C] is a number")               \
  X(SUMTO, ABC, "R[A] = (%sum-to R[B] R[C]): R[B] itself when it is a number")                   \
  X(SENSBK, ABV,                                                                                 \
    "R[A] = (%sens-back R[C] x like...): R[C] itself unless x is the symbolic zero; the B "      \
    "registers after it are x then the likes (p: the likes, x their product)")                   \
  X(SCAR, AB, "R[A] = (%scar R[B]): car of a sensitivity (zero stays zero)")                     \
  X(SCDR, AB, "R[A] = (%scdr R[B]): cdr of a sensitivity (zero stays zero)")                     \
  X(JINV, ABn, "R[A] = (*j-inverse R[B]), taken C + 1 times")                                    \
  X(STARJ, ABn, "R[A] = (*j R[B]), taken C + 1 times")                                           \
  X(ARGJINV, AB,                                                                                 \
    "R[A] = (*j-inverse R[B]) for parameter B, or R[B] as it is if passed untagged "             \
    "(CallFrame::raw)")                                                                          \
  X(ADENTRY, A,                                                                                  \
    "entry of a reverse-transformed function: called by code its result is observed by, "        \
    "it runs through %j-boundary (vm/src/ad.cpp)")                                               \
  X(NEG, AB, "R[A] = (- R[B])")                                                                  \
  X(REPRES, ABC,                                                                                 \
    "R[A] = (%rep-result R[B] R[C]): R[B] checked to be (cons value backprop) from *j R[C]")     \
  X(BPRES, ABC,                                                                                  \
    "R[A] = (%bp-result R[B] R[C]): R[B] checked to be (cons fbar xbar) from backprop R[C]")     \
  X(VREF, ABC, "R[A] = (vector-ref R[B] R[C])")

enum class Op : uint8_t {
#define DLAM_OP_ENUM(name, fmt, doc) name,
  DLAM_OPCODES(DLAM_OP_ENUM)
#undef DLAM_OP_ENUM
      Count
};

const char* opName(Op op);

namespace instr {
// The fields' positions (the diagram above).
constexpr unsigned kAShift = 8, kBShift = 24, kCShift = 40, kTopShift = 56;
constexpr Instr kField = 0xffff;

constexpr Instr make(Op op, uint32_t a, uint32_t b = 0, uint32_t c = 0) {
  return static_cast<Instr>(op) | ((a & kField) << kAShift) | ((b & kField) << kBShift) |
         ((c & kField) << kCShift);
}
constexpr Instr makeBx(Op op, uint32_t a, uint32_t bx) {
  return static_cast<Instr>(op) | ((a & kField) << kAShift) | (static_cast<Instr>(bx) << kBShift);
}
constexpr Op op(Instr i) { return static_cast<Op>(i & 0xff); }
constexpr uint32_t a(Instr i) { return static_cast<uint32_t>((i >> kAShift) & kField); }
constexpr uint32_t b(Instr i) { return static_cast<uint32_t>((i >> kBShift) & kField); }
constexpr uint32_t c(Instr i) { return static_cast<uint32_t>((i >> kCShift) & kField); }
constexpr int32_t sC(Instr i) { return static_cast<int16_t>(c(i)); }
constexpr uint32_t bx(Instr i) { return static_cast<uint32_t>((i >> kBShift) & 0xffffffffu); }
constexpr int32_t sBx(Instr i) { return static_cast<int32_t>(bx(i)); }
inline Instr withSBx(Instr i, int32_t off) {
  return (i & ((Instr{1} << kBShift) - 1)) |
         (static_cast<Instr>(static_cast<uint32_t>(off)) << kBShift);
}
// CAR and CDR that are step `step` of a composition (caar ... cdddr, NativeId `id`):
// C holds both, for the error (0: a plain car or cdr).
constexpr uint32_t cxrStep(uint32_t id, size_t step) {
  return (static_cast<uint32_t>(step) << 8) | id;
}
constexpr uint32_t cxrId(Instr i) { return c(i) & 0xff; }
constexpr uint32_t cxrStepOf(Instr i) { return c(i) >> 8; }
inline Instr withSC(Instr i, int32_t off) {
  return (i & ~(kField << kCShift)) | (static_cast<Instr>(static_cast<uint16_t>(off)) << kCShift);
}

// ---- the top byte: one accessor per meaning ----------------------------------------

// Arithmetic and comparisons: s, the operands swapped from the source order (K forms).
constexpr Instr kSwapped = Instr{1} << 63;
constexpr bool swapped(Instr i) { return (i & kSwapped) != 0; }
// Arithmetic and comparisons: the reverse level (0 .. kMaxLevel) of the operands.
constexpr uint32_t kMaxLevel = 0x7f;
constexpr Instr kLevelBits = Instr{kMaxLevel} << kTopShift;
constexpr uint32_t level(Instr i) { return static_cast<uint32_t>((i & kLevelBits) >> kTopShift); }
constexpr bool hasLevel(Instr i) { return (i & kLevelBits) != 0; }
constexpr Instr withLevel(Instr i, uint32_t level) {
  return i | ((Instr{level} & kMaxLevel) << kTopShift);
}
// CALL and TAILCALL: bits 56-63 flag arguments 0 .. 7 passed untagged (computed for *j,
// which the call applies only if the callee does not take them so: CallFrame::raw).
constexpr uint32_t rawArgs(Instr i) { return static_cast<uint32_t>(i >> kTopShift); }
constexpr Instr withRawArgs(Instr i, uint32_t mask) {
  return i | (static_cast<Instr>(mask & 0xff) << kTopShift);
}
// RETURNN and RETURNR: A (the head) or C (the tail) is a constant's index, not a
// register (a backpropagator's fbar and the end of its list are often constants).
constexpr Instr kHeadK = Instr{1} << kTopShift;
constexpr Instr kTailK = Instr{2} << kTopShift;
constexpr bool headIsK(Instr i) { return (i & kHeadK) != 0; }
constexpr bool tailIsK(Instr i) { return (i & kTailK) != 0; }
// SENSBK: p, its operand x is the product of the likes (none of its listed registers).
// It lists at most five registers (x and four likes): %sens-back's arguments, with the
// sensitivity, are at most six.
constexpr uint32_t kMaxSensBackArgs = 6;
constexpr Instr kProduct = Instr{1} << kTopShift;
constexpr bool isProduct(Instr i) { return (i & kProduct) != 0; }

// JNLT .. JNNUMEQK: the compare-and-jumps.
constexpr bool isCompareJump(Op o) { return o >= Op::JNLT && o <= Op::JNNUMEQK; }
// Compare-and-jumps: h, jump where the comparison holds (a loop's test repeated at its end).
constexpr Instr kJumpIfHolds = Instr{1} << 63;
constexpr bool jumpsIfHolds(Instr i) { return (i & kJumpIfHolds) != 0; }

// ---- the words after RETURNN, RETURNR and SENSBK ------------------------------------

// How many words after a RETURNN, RETURNR or SENSBK list its B registers, four to a word
// (0 for any other instruction): the code walks past them to the next instruction.
constexpr uint32_t listWords(Instr i) {
  Op o = op(i);
  return o == Op::RETURNN || o == Op::RETURNR || o == Op::SENSBK ? (b(i) + 3) / 4 : 0;
}
// Register j of those listed in the words after a RETURNN, RETURNR or SENSBK (words: the first
// of them): 16 bits each, lowest first.
constexpr uint32_t listedReg(const Instr* words, uint32_t j) {
  return static_cast<uint32_t>((words[j / 4] >> (16 * (j % 4))) & kField);
}
}  // namespace instr

}  // namespace dlam

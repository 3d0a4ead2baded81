// opcodes.h — every bytecode instruction, defined once.
//
// An instruction is a 64-bit word: op (8 bits) | A (16) | B (16) | C (16).
// Bx is the 32 bits of B and C together (unsigned: constant and proto indices;
// signed sBx: jump offsets relative to the next instruction). sC is C read as a
// signed 16-bit jump offset. The top bit marks a K-form arithmetic instruction
// whose operands were swapped from the source order ((* 2 x) → MULK x 2), so
// error messages still number the arguments as written; RSUBK and RDIVK keep the
// constant on the left ((- 1 x) → RSUBK x 1), in the source order. Bits 56-62 of
// an arithmetic or comparison instruction give its reverse level: in transformed
// code the operands carry that many reverse tags, which the slow path strips
// (and puts back on the result); bits 56-63 of a CALL or TAILCALL flag arguments
// passed untagged (rawArgs). Registers are frame-relative; K[i] is the proto's
// constant table. 64-bit words (rather than Lua's 32) let a function use up to
// 65535 registers, which reverse-transformed code of large functions needs.
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
  X(CAR, AB, "R[A] = (car R[B])")                                                                \
  X(CDR, AB, "R[A] = (cdr R[B])")                                                                \
  X(NOT, AB, "R[A] = (not R[B])")                                                                \
  X(NULLP, AB, "R[A] = (null? R[B])")                                                            \
  X(PAIRP, AB, "R[A] = (pair? R[B])")                                                            \
  X(EQP, ABC, "R[A] = (eq? R[B] R[C])")                                                          \
  X(ATTACH, ABC, "R[A] = (attach-*j R[B] R[C]): R[B] whose *j is R[C]")                          \
  X(PLUS, ABC, "R[A] = (plus R[B] R[C]): sensitivities added")                                   \
  X(SCAR, AB, "R[A] = (%scar R[B]): car of a sensitivity (zero stays zero)")                     \
  X(SCDR, AB, "R[A] = (%scdr R[B]): cdr of a sensitivity (zero stays zero)")                     \
  X(JINV, ABn, "R[A] = (*j-inverse R[B]), taken C + 1 times")                                    \
  X(STARJ, ABn, "R[A] = (*j R[B]), taken C + 1 times")                                           \
  X(ARGJINV, AB,                                                                                 \
    "R[A] = (*j-inverse R[B]) for parameter B, or R[B] as it is if passed untagged "             \
    "(CallFrame::raw)")                                                                          \
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
constexpr Instr make(Op op, uint32_t a, uint32_t b = 0, uint32_t c = 0) {
  return static_cast<Instr>(op) | (static_cast<Instr>(a & 0xffff) << 8) |
         (static_cast<Instr>(b & 0xffff) << 24) | (static_cast<Instr>(c & 0xffff) << 40);
}
constexpr Instr makeBx(Op op, uint32_t a, uint32_t bx) {
  return static_cast<Instr>(op) | (static_cast<Instr>(a & 0xffff) << 8) |
         (static_cast<Instr>(bx) << 24);
}
constexpr Instr kSwapped = 1ull << 63;
// RETURNN and RETURNR: A (the head) or C (the tail) is a constant's index, not a
// register (a backpropagator's fbar and the end of its list are often constants).
constexpr Instr kHeadK = 1ull << 56;
constexpr Instr kTailK = 1ull << 57;
// The words after a RETURNN or RETURNR that list its B registers, four to a word (0 for
// any other instruction): the code walks past them to the next instruction.
constexpr uint32_t listWords(Instr i) {
  Op o = static_cast<Op>(i & 0xff);
  return o == Op::RETURNN || o == Op::RETURNR ? (static_cast<uint32_t>((i >> 24) & 0xffff) + 3) / 4
                                              : 0;
}
// Register j of those listed in the words after a RETURNN or RETURNR (words: the first
// of them): 16 bits each, lowest first.
constexpr uint32_t listedReg(const Instr* words, uint32_t j) {
  return static_cast<uint32_t>((words[j / 4] >> (16 * (j % 4))) & 0xffff);
}
// CALL and TAILCALL: bits 56-63 flag arguments 0 .. 7 passed untagged (computed for
// *j, which the call applies only if the callee does not take them so: CallFrame::raw).
constexpr uint32_t rawArgs(Instr i) { return static_cast<uint32_t>(i >> 56); }
constexpr Instr withRawArgs(Instr i, uint32_t mask) {
  return i | (static_cast<Instr>(mask & 0xff) << 56);
}
constexpr uint32_t level(Instr i) { return static_cast<uint32_t>((i >> 56) & 0x7f); }
constexpr Instr withLevel(Instr i, uint32_t level) {
  return i | (static_cast<Instr>(level & 0x7f) << 56);
}
constexpr Op op(Instr i) { return static_cast<Op>(i & 0xff); }
constexpr uint32_t a(Instr i) { return static_cast<uint32_t>((i >> 8) & 0xffff); }
constexpr uint32_t b(Instr i) { return static_cast<uint32_t>((i >> 24) & 0xffff); }
constexpr uint32_t c(Instr i) { return static_cast<uint32_t>((i >> 40) & 0xffff); }
constexpr int32_t sC(Instr i) { return static_cast<int16_t>((i >> 40) & 0xffff); }
constexpr uint32_t bx(Instr i) { return static_cast<uint32_t>((i >> 24) & 0xffffffffu); }
constexpr int32_t sBx(Instr i) { return static_cast<int32_t>(bx(i)); }
inline Instr withSBx(Instr i, int32_t off) {
  return (i & 0xffffffull) | (static_cast<Instr>(static_cast<uint32_t>(off)) << 24);
}
inline Instr withSC(Instr i, int32_t off) {
  return (i & ~(0xffffull << 40)) | (static_cast<Instr>(static_cast<uint16_t>(off)) << 40);
}
}  // namespace instr

}  // namespace dlam

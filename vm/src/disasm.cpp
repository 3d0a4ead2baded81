// disasm.cpp — the bytecode listing printed by `dlam --disasm` and `(disasm f)`.
#include <cstdio>

#include "dlam/opcodes.h"
#include "dlam/vm.h"

namespace dlam {

namespace {
enum class Fmt {
  A,
  AB,
  ABC,
  ABK,
  ABx,
  AP,
  sBx,
  AsBx,
  ABsC,
  AKsC,
  ABN,
  ABCu,
  ABU,
  ABn,
  ABL,
  ABR,
  ABV,
  ABP
};

Fmt opFormat(Op op) {
  static const Fmt kFormats[] = {
#define DLAM_OP_FMT(name, fmt, doc) Fmt::fmt,
      DLAM_OPCODES(DLAM_OP_FMT)
#undef DLAM_OP_FMT
  };
  return kFormats[static_cast<size_t>(op)];
}

// How a CALL takes its result apart (CallFrame::split).
std::string splitName(uint8_t mode) {
  if (mode >= kSplitRepOf) return "rep of " + splitName(static_cast<uint8_t>(mode - kSplitRepOf));
  if (mode == 1) return "rep";
  if (mode == 2) return "bp";
  return "bp + " + std::to_string(mode - 2) + " sensitivities";
}
}  // namespace

std::string VM::disassemble(const Proto* p, bool recursive) const {
  std::vector<const Proto*> todo{p};
  std::string out;
  auto* self = const_cast<VM*>(this);
  while (!todo.empty()) {
    const Proto* f = todo.front();
    todo.erase(todo.begin());
    self->ensureBody(const_cast<Proto*>(f));  // (one loaded from the image, not yet run)
    char line[256];
    snprintf(line, sizeof line, "function %s (%s:%u:%u) params=%u%s regs=%u constants=%zu\n",
             f->name.empty() ? "<anonymous>" : f->name.c_str(), f->file.c_str(), f->loc.line,
             f->loc.col, f->nparams, f->hasRest ? "+rest" : "", f->nregs, f->constants.size());
    out += line;
    if (!f->freeVars.empty()) {
      out += "  captures:";
      for (const auto& v : f->freeVars) out += " " + v;
      out += "\n";
    }
    for (size_t i = 0; i < f->code.size(); ++i) {
      Instr ins = f->code[i];
      Op op = instr::op(ins);
      SrcLoc loc = i < f->locs.size() ? f->locs[i] : SrcLoc{};
      std::string operands;
      auto k = [&](uint32_t idx) {
        return idx < f->constants.size() ? self->show(f->constants[idx], true) : std::string("?");
      };
      uint32_t a = instr::a(ins), b = instr::b(ins), c = instr::c(ins);
      size_t extra = 0;  // words after the instruction that belong to it
      // RETURNN's and RETURNR's head and tail: a register, or a constant (kHeadK, kTailK)
      auto head = [&] { return instr::headIsK(ins) ? k(a) : "r" + std::to_string(a); };
      auto tail = [&] { return instr::tailIsK(ins) ? k(c) : "r" + std::to_string(c); };
      // Their listed registers (0 past the end of the code)
      auto listed = [&](uint32_t j) {
        return i + 1 + j / 4 < f->code.size() ? instr::listedReg(&f->code[i + 1], j) : 0;
      };
      switch (opFormat(op)) {
        case Fmt::A:
          operands = "r" + std::to_string(a);
          break;
        case Fmt::AB:
          operands = "r" + std::to_string(a) + " r" + std::to_string(b);
          break;
        case Fmt::ABC:
          operands = "r" + std::to_string(a) + " r" + std::to_string(b) + " r" + std::to_string(c);
          break;
        case Fmt::ABK:
          operands = "r" + std::to_string(a) + " r" + std::to_string(b) + " " + k(c);
          break;
        case Fmt::ABx:
          operands = "r" + std::to_string(a) + " " + k(instr::bx(ins));
          break;
        case Fmt::AP: {
          uint32_t idx = instr::bx(ins);
          operands = "r" + std::to_string(a) + " <function " +
                     (idx < f->protos.size() && !f->protos[idx]->name.empty()
                          ? f->protos[idx]->name
                          : "#" + std::to_string(idx)) +
                     ">";
          break;
        }
        case Fmt::sBx:
          operands = "-> " + std::to_string(static_cast<int64_t>(i) + 1 + instr::sBx(ins));
          break;
        case Fmt::AsBx:
          operands = "r" + std::to_string(a) + " -> " +
                     std::to_string(static_cast<int64_t>(i) + 1 + instr::sBx(ins));
          break;
        case Fmt::ABsC:
          operands = "r" + std::to_string(a) + " r" + std::to_string(b) + " -> " +
                     std::to_string(static_cast<int64_t>(i) + 1 + instr::sC(ins));
          break;
        case Fmt::AKsC:
          operands = "r" + std::to_string(a) + " " + k(b) + " -> " +
                     std::to_string(static_cast<int64_t>(i) + 1 + instr::sC(ins));
          break;
        case Fmt::ABN:
          operands = "r" + std::to_string(a) + " " + std::to_string(b) +
                     (op == Op::CALLP ? " parts" : " args");
          if (c) operands += ", split " + splitName(static_cast<uint8_t>(c));
          if (uint32_t raw = instr::rawArgs(ins)) {  // "untagged 1 3": arguments passed for *j
            operands += ", untagged";
            for (uint32_t j = 0; j < 8; ++j)
              if (raw >> j & 1) operands += " " + std::to_string(j + 1);
          }
          break;
        case Fmt::ABL: {
          operands = head() + " (";
          for (uint32_t j = 0; j < b; ++j) operands += (j ? " r" : "r") + std::to_string(listed(j));
          operands += " . " + tail() + ")";
          extra = instr::listWords(ins);
          break;
        }
        case Fmt::ABV: {  // "r3 r5 (r1 r2)", and "product" where x is the likes' product
          operands = "r" + std::to_string(a) + " r" + std::to_string(c) + " (";
          for (uint32_t j = 0; j < b; ++j) operands += (j ? " r" : "r") + std::to_string(listed(j));
          operands += instr::isProduct(ins) ? ") product" : ")";
          extra = instr::listWords(ins);
          break;
        }
        case Fmt::ABR: {
          // (cons (cons R[A] (x1 ... xk . R[C])) bp): the words hold bp, then x1 .. xk
          operands = "(" + head();
          for (uint32_t j = 1; j < b; ++j) operands += " r" + std::to_string(listed(j));
          operands += " . " + tail() + ") r" + std::to_string(b ? listed(0) : 0);
          extra = instr::listWords(ins);
          break;
        }
        case Fmt::ABP:  // "r1 r0 number?"
          operands = "r" + std::to_string(a) + " r" + std::to_string(b) + " " +
                     (c < static_cast<uint32_t>(NativeId::Count)
                          ? std::string(self->builtin(static_cast<NativeId>(c))->name)
                          : "?");
          break;
        case Fmt::ABCu:
          operands = "r" + std::to_string(a) + " [" + std::to_string(b) + "] r" + std::to_string(c);
          break;
        case Fmt::ABn:
          operands = "r" + std::to_string(a) + " r" + std::to_string(b);
          if (c) operands += " (" + std::to_string(c + 1) + " levels)";
          break;
        case Fmt::ABU:  // one value, or a run: "r1..r3 [0..2]"
          operands = c ? "r" + std::to_string(a) + "..r" + std::to_string(a + c) + " [" +
                             std::to_string(b) + ".." + std::to_string(b + c) + "]"
                       : "r" + std::to_string(a) + " [" + std::to_string(b) + "]";
          break;
      }
      // A compare-and-jump with h (a loop's test repeated at its end) jumps where the
      // comparison holds: JNLT shows as JLT.
      std::string name = opName(op);
      if (instr::isCompareJump(op) && instr::jumpsIfHolds(ins)) name = "J" + name.substr(2);
      snprintf(line, sizeof line, "  %4zu  [%u:%u]  %-10s %s\n", i, loc.line, loc.col, name.c_str(),
               operands.c_str());
      out += line;
      i += extra;
    }
    if (recursive)
      for (const Proto* child : f->protos) todo.push_back(child);
  }
  return out;
}

}  // namespace dlam

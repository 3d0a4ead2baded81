// callconv.h — the analyses of one function's IR that its code generation reads: the
// uses of its variables, and where the calling convention of transformed code applies.
//
// Transformed code checks and takes apart what its calls return and conses lists
// only to pass them on; the VM can skip those pairs. planCalls finds, before any code
// is generated: split calls (a call whose checked result, a rep or a backpropagator's
// result, is only taken apart: CALL with a split mode puts the parts in registers),
// a parameter taken apart along a list (Proto::paramSplit), parts calls (a call whose
// argument is a list consed for it: CALLP), lists returned in parts (RETURNN,
// RETURNR), and untagged arguments and parameters (a loop's (*j v) passed as v, read
// by ARGJINV). codegen.cpp allocates the registers and emits the instructions these
// plans call for; it reads the result (CallPlan) and never changes it.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "anf.h"

namespace dlam {

// ---- calls that compile to opcodes of their own (what codegen emits) -------------

// The comparisons a compare-and-jump fuses: < <= > >= =.
bool isCompare(NativeId id);

// Whether codegen has an opcode for the primitive `id` applied to `n` arguments; any
// other call of a primitive is a call through a window of registers.
bool hasOpcode(NativeId id, size_t n);

// Whether bd, a binary arithmetic primitive or comparison applied under reverse tags
// (transformed code), has an opcode carrying the level in its top bits; else it calls
// the primitive's lifted form.
bool hasLiftedOpcode(const VM& vm, const anf::Bind& bd);

// A call that passes its arguments in a window of consecutive registers (rather than
// compiling to an opcode of its own).
bool usesWindow(const VM& vm, const anf::Bind& bd);

// ---- the plan ------------------------------------------------------------------

// The uses of a variable of the function.
struct VarUse {
  int count = 0;
  int argUses = 0;  // of which as an argument (or the callee) of a call through a window
  const anf::Block* block =
      nullptr;         // the block binding it (none for parameters and captured variables)
  uint32_t depth = 0;  // (its frame in the walk counting the uses)
  size_t last = 0;     // the last binding of that block using it (its size: the result)
  size_t at = 0;       // the binding of that block binding it
};

// A value taken apart into registers: by a split call, or a parameter taken in parts.
struct SplitPlan {
  uint8_t mode;  // the split mode of the CALL (CallFrame::split); 0 for a parameter
  std::vector<std::vector<const anf::Bind*>>
      parts;                            // the takes that become each register of the split
  std::vector<const anf::Bind*> spine;  // the takes and checks on the way, which need no register
};

// A list returned in parts from a block in tail position: the conses, outermost first;
// with `rep`, the outer cons of a rep result (cons list bp) first (RETURNR), else RETURNN.
struct ReturnedList {
  std::vector<const anf::Bind*> chain;
  bool rep = false;
};

struct CallPlan {
  std::unordered_map<const anf::Var*, VarUse> vars;
  // The one parameter taken in parts along a list, if it is.
  std::optional<SplitPlan> paramSplit;
  // Split calls, by their call binding; the bindings after it that they make registers
  // of (the checks, the takes and the spines).
  std::unordered_map<const anf::Bind*, SplitPlan> splits;
  std::unordered_set<const anf::Bind*> splitParts;
  // Calls passing their argument in parts: the parts.
  std::unordered_map<const anf::Bind*, std::vector<anf::Atom>> partsCalls;
  // The blocks in tail position that return a list in parts.
  std::unordered_map<const anf::Block*, ReturnedList> returned;
  // Bindings that compile to nothing where they stand: the takes of split calls and of
  // the parameter split, the conses of parts calls and of returned lists.
  std::unordered_set<const anf::Bind*> ahead;
  // The variables of the (*j v) passed untagged by the call using them (v's register).
  std::unordered_set<const anf::Var*> untagged;
  // The (*j-inverse p) of an untagged parameter p (ARGJINV): p's index.
  std::unordered_map<const anf::Bind*, uint32_t> untaggedParams;

  int uses(const anf::Var* v) const {
    auto it = vars.find(v);
    return it == vars.end() ? 0 : it->second.count;
  }
  // The last binding of its block that uses v (0 if none).
  size_t lastUse(const anf::Var* v) const {
    auto it = vars.find(v);
    return it == vars.end() ? 0 : it->second.last;
  }
};

// Analyses lam's own IR (not the lambdas made in it). The plan is on the heap: the
// code generator, which keeps it, recurses through nested lambdas and conditionals
// under a stack budget (StackGuard), so its frames stay small.
std::unique_ptr<const CallPlan> planCalls(const VM& vm, const anf::Lambda* lam);

}  // namespace dlam

// anf.h — the A-normal-form IR every dlam function is compiled from and keeps.
//
// A function body is a Block: a sequence of bindings, each naming one value
// (a copy of an atom, a call, a closure creation, a conditional whose branches are
// Blocks, a global definition), and a result atom. Lambdas list their free
// variables in order of first occurrence in the source text, which is the order of
// a closure's sensitivity (docs/differentiation.md). Codegen turns this IR into bytecode;
// the reverse-mode transform (compiler/ad) rewrites it into new IR.
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dlam/object.h"
#include "dlam/vm.h"

namespace dlam::anf {

struct Var {
  std::string name;
  uint32_t id = 0;
  bool rec = false;  // bound by letrec / internal define: may be captured before it is initialised
};

struct Atom {
  enum Kind : uint8_t { Local, Global, Const };
  Kind kind = Const;
  Var* var = nullptr;     // Local
  Symbol* sym = nullptr;  // Global
  Value value;            // Const
  SrcLoc loc;
};

struct Block;
struct Lambda;

struct Bind {
  enum Kind : uint8_t {
    Copy,        // dst = atom
    Call,        // dst = (args[0] args[1] ...)
    MakeLambda,  // dst = closure of lambda
    If,          // dst = if atom then thenB else elseB
    Rec,         // start of a letrec group binding recVars (initialised by later bindings)
    DefGlobal,   // global sym = atom (top level only); dst unused
  };
  Kind kind = Copy;
  Var* dst = nullptr;
  SrcLoc loc;
  Atom atom;
  std::vector<Atom> args;
  Lambda* lambda = nullptr;
  Block* thenB = nullptr;
  Block* elseB = nullptr;
  std::vector<Var*> recVars;
  Symbol* sym = nullptr;
  uint16_t level = 0;  // Call of a builtin primitive: applied under this many reverse tags
};

struct Block {
  std::vector<Bind> binds;
  Atom result;
};

struct Lambda {
  std::vector<Var*> params;
  Var* rest = nullptr;
  Block* body = nullptr;
  std::vector<Var*> freeVars;  // first-occurrence order
  std::string name;
  std::string file;
  SrcLoc loc;
  const Lambda* primalOf = nullptr;  // set by the reverse transform: the lambda this one transforms
  bool derived = false;  // made by the reverse transform (a transformed function, a backpropagator)
};

// The `if` that ends block b and gives its value, if there is one: b continues a chain.
inline const Bind* tailIf(const Block* b) {
  if (b->binds.empty() || b->result.kind != Atom::Local) return nullptr;
  const Bind& last = b->binds.back();
  return last.kind == Bind::If && last.dst == b->result.var ? &last : nullptr;
}

// The branch of the `if` bd through which its chain goes on: the else branch if it
// continues a chain (cond, case, or), else the then branch if that does (and), else null.
inline const Block* chainBranch(const Bind& bd) {
  if (tailIf(bd.elseB)) return bd.elseB;
  if (tailIf(bd.thenB)) return bd.thenB;
  return nullptr;
}

// Calls f on block b and on every block nested in it through the branches of its
// conditionals, to any depth, and also through the bodies of the lambdas made in it
// when intoLambdas is set. Each block is visited before the blocks nested in it; the
// order among siblings is unspecified. Iterative: the depth of the IR does not grow
// the C++ stack. Works on const and mutable IR alike (BlockT is Block or const Block).
template <class BlockT, class F>
void forEachBlock(BlockT* b, F&& f, bool intoLambdas = false) {
  std::vector<BlockT*> work{b};
  while (!work.empty()) {
    BlockT* blk = work.back();
    work.pop_back();
    f(blk);
    for (auto& bd : blk->binds) {
      if (bd.thenB) work.push_back(bd.thenB);
      if (bd.elseB) work.push_back(bd.elseB);
      if (intoLambdas && bd.lambda) work.push_back(bd.lambda->body);
    }
  }
}

// Calls f(bind) for every binding of b and of the blocks nested in it as forEachBlock
// visits them (each block's bindings in order), or f(bind, block, index) when f takes
// the block and the binding's index in it too.
template <class BlockT, class F>
void forEachBind(BlockT* b, F&& f, bool intoLambdas = false) {
  forEachBlock(
      b,
      [&](BlockT* blk) {
        for (size_t i = 0; i < blk->binds.size(); ++i) {
          if constexpr (std::is_invocable_v<F&, decltype(blk->binds[i])&, BlockT*, size_t>)
            f(blk->binds[i], blk, i);
          else
            f(blk->binds[i]);
        }
      },
      intoLambdas);
}

// Owns all IR nodes of one compilation unit (a top-level form, or a transform). Nodes
// never move. Each has an allocation of its own: a unit kept for the transform is most
// often one small function, for which chunks of nodes would cost more than its nodes.
struct Module {
  std::vector<std::unique_ptr<Var>> vars;
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<std::unique_ptr<Lambda>> lambdas;
  uint32_t nextId = 0;

  Var* newVar(std::string name) {
    Var* v = vars.emplace_back(std::make_unique<Var>()).get();
    v->name = std::move(name);
    v->id = nextId++;
    return v;
  }
  Block* newBlock() { return blocks.emplace_back(std::make_unique<Block>()).get(); }
  Lambda* newLambda() { return lambdas.emplace_back(std::make_unique<Lambda>()).get(); }
};

// The memory of a lambda's own IR, which its proto keeps for the transform
// (Proto::irBytes): its node and variables, its blocks and their bindings, not the
// lambdas made in it (their protos count theirs). A node also takes its pointer in the
// Module. Iterative over nested branches.
inline uint64_t ownBytes(const Lambda* lam) {
  constexpr uint64_t kOwner = sizeof(void*);
  auto var = [](const Var* v) -> uint64_t {
    return v ? sizeof(Var) + kOwner + heapBytesOf(v->name) : 0;
  };
  uint64_t n = sizeof(Lambda) + kOwner + heapBytesOf(lam->params) + heapBytesOf(lam->freeVars) +
               heapBytesOf(lam->name) + heapBytesOf(lam->file) + var(lam->rest);
  for (const Var* p : lam->params) n += var(p);
  std::vector<const Block*> blocks{lam->body};
  while (!blocks.empty()) {
    const Block* b = blocks.back();
    blocks.pop_back();
    n += sizeof(Block) + kOwner + heapBytesOf(b->binds);
    for (const Bind& bd : b->binds) {
      n += heapBytesOf(bd.args) + heapBytesOf(bd.recVars) + var(bd.dst);
      if (bd.kind == Bind::If) {
        blocks.push_back(bd.thenB);
        blocks.push_back(bd.elseB);
      }
    }
  }
  return n;
}

inline Atom localAtom(Var* v, SrcLoc loc = {}) {
  Atom a;
  a.kind = Atom::Local;
  a.var = v;
  a.loc = loc;
  return a;
}
inline Atom constAtom(Value v, SrcLoc loc = {}) {
  Atom a;
  a.kind = Atom::Const;
  a.value = v;
  a.loc = loc;
  return a;
}
inline Atom globalAtom(Symbol* s, SrcLoc loc = {}) {
  Atom a;
  a.kind = Atom::Global;
  a.sym = s;
  a.loc = loc;
  return a;
}

// The native a callee atom denotes now: a global bound to one, or the native itself as a
// constant (a derived form's callee); nullptr for anything else.
inline Native* calleeNative(const Atom& callee) {
  Value g;
  if (callee.kind == Atom::Global)
    g = callee.sym->global;
  else if (callee.kind == Atom::Const)
    g = callee.value;
  else
    return nullptr;
  return isNative(g) ? asNative(g) : nullptr;
}

// The builtin primitive a callee atom denotes (calleeNative, still the VM's builtin of
// its id); NativeId::None for anything else.
inline NativeId builtinOf(const VM& vm, const Atom& callee) {
  Native* n = calleeNative(callee);
  if (!n) return NativeId::None;
  auto id = static_cast<NativeId>(n->id);
  if (id == NativeId::None || vm.builtin(id) != n) return NativeId::None;
  return id;
}

}  // namespace dlam::anf

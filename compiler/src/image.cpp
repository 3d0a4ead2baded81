// image.cpp — writing and loading the start-up image (dlam/image.h).
//
// An image is a header (magic, format version, imageKey) and five sections:
//   objects  every heap object the prelude's code refers to, each after those it refers
//            to (strings, symbols, pairs, vectors, builtin natives, protos), so that
//            decoding is one pass in order, each object a slot of one rooted table;
//   forms    per top-level form, in order: its proto, and where its IR is;
//   macros   the syntax-rules macros defined at top level (symbol, rules);
//   marks    the count of macro expansions (VM::macroMarks), restored;
//   IR       per form, the ANF IR its protos keep for the reverse transform (vars,
//            lambdas and blocks numbered, flat): last, as it is read only when *j first
//            transforms a proto of the form (ensureIr), its pages untouched until then.
// A symbol is written by name, with whether it is the library's twin of the interned
// symbol of that name (vm/src/library.cpp): loading in library mode makes it again.
// Loading runs the forms' protos in order, so closures, attachments and globals are
// made as loading the source makes them. Nothing here recurses on the data.
#include "dlam/image.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "anf.h"
#include "dlam/builtins.h"
#include "dlam/compiler.h"
#include "dlam/opcodes.h"

namespace dlam {

using namespace anf;

namespace {

constexpr char kMagic[8] = {'d', 'l', 'a', 'm', 'i', 'm', 'g', '\n'};
constexpr uint32_t kFormatVersion = 3;
constexpr size_t kHeaderBytes = sizeof kMagic + 4 + 8;

// The tables the bytecode and the IR name by number.
#define DLAM_IMAGE_OPCODE(name, format, doc) #name " " #format "\n"
constexpr char kOpcodeTable[] = DLAM_OPCODES(DLAM_IMAGE_OPCODE);
#undef DLAM_IMAGE_OPCODE
#define DLAM_IMAGE_PRIMITIVE(id, name, min, max, kind) #id " " name " " #min " " #max " " #kind "\n"
constexpr char kPrimitiveTable[] = DLAM_PRIMITIVES(DLAM_IMAGE_PRIMITIVE);
#undef DLAM_IMAGE_PRIMITIVE

// Mixes n bytes into h, eight at a time (the prelude's text is hashed at every start).
void mix(uint64_t& h, const void* data, size_t n) {
  auto* b = static_cast<const unsigned char*>(data);
  auto step = [&](uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  };
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t w;
    std::memcpy(&w, b, 8);
    step(w);
  }
  uint64_t tail = n;  // the count, so that trailing zero bytes change the hash
  for (size_t i = 0; i < n; ++i) tail = tail << 8 | b[i];
  step(tail);
}

enum Tag : uint8_t { TString, TSymbol, TPair, TNative, TVector, TProto };

class Out {
 public:
  std::string bytes;
  void u8(uint8_t v) { bytes.push_back(static_cast<char>(v)); }
  void uv(uint64_t v) {
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
  }
  void u64(uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), 8); }
  void str(std::string_view s) {
    uv(s.size());
    bytes.append(s);
  }
  void loc(SrcLoc l) {
    uv(l.line);
    uv(l.col);
  }
};

class In {
 public:
  In(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(*p_++);
  }
  uint64_t uv() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = u8();
      if (shift > 63) bad();
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  uint32_t u32v() {
    uint64_t v = uv();
    if (v > UINT32_MAX) bad();
    return static_cast<uint32_t>(v);
  }
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  std::string_view str() {
    uint64_t n = uv();
    need(n);
    std::string_view s(p_, n);
    p_ += n;
    return s;
  }
  SrcLoc loc() {
    SrcLoc l;
    l.line = u32v();
    l.col = u32v();
    return l;
  }
  bool atEnd() const { return p_ == end_; }
  const char* at() const { return p_; }
  [[noreturn]] static void bad() {
    throw Error(ErrorKind::Runtime, "the start-up image is corrupt", "<prelude>", {});
  }

 private:
  void need(uint64_t n) const {
    if (uint64_t(end_ - p_) < n) bad();
  }
  const char* p_;
  const char* end_;
};

// ---- writing ----------------------------------------------------------------

class Writer {
 public:
  // The objects written are kept alive until the image is done: the next forms' objects
  // must not take their addresses, which name them here (index_).
  explicit Writer(VM& vm) : vm_(vm) {
    vm_.rootProviders.push_back([this](std::vector<Obj*>& out) {
      for (const auto& [o, i] : index_) out.push_back(const_cast<Obj*>(o));
    });
  }
  ~Writer() { vm_.rootProviders.pop_back(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // A top-level form, just compiled: its IR first (which numbers its lambdas), then its
  // proto tree.
  void form(Proto* top) {
    Out ir;
    module(static_cast<const Lambda*>(top->ir.get()), ir);
    uint32_t index = object(Value::object(top));
    forms_.uv(index);
    forms_.uv(irs_.bytes.size());
    forms_.uv(ir.bytes.size());
    irs_.bytes += ir.bytes;
    ++nforms_;
  }

  std::string finish(uint64_t key) {
    // The macros, by name (an image is the same from one build to the next).
    std::vector<Symbol*> macros;
    for (const auto& [name, sym] : vm_.symbolTable())
      if (!sym->macro.isUndefined()) macros.push_back(sym);
    std::sort(macros.begin(), macros.end(),
              [](const Symbol* a, const Symbol* b) { return a->name < b->name; });
    Out tail;
    tail.uv(macros.size());
    for (Symbol* s : macros) {
      tail.uv(object(Value::object(s)));
      value(tail, s->macro);
    }
    tail.uv(vm_.macroMarks());
    Out out;
    out.bytes.append(kMagic, sizeof kMagic);
    uint32_t version = kFormatVersion;
    out.bytes.append(reinterpret_cast<const char*>(&version), 4);
    out.u64(key);
    out.uv(nobjects_);
    out.bytes += objects_.bytes;
    out.uv(nforms_);
    out.bytes += forms_.bytes;
    out.bytes += tail.bytes;
    out.bytes += irs_.bytes;
    return std::move(out.bytes);
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what) {
    throw Error(ErrorKind::Runtime, "start-up image: cannot encode " + what, "<prelude>", {});
  }

  void value(Out& o, Value v) {
    if (v.isObject()) {
      o.u8(1);
      o.uv(object(v));
    } else {
      o.u8(0);
      o.u64(v.bits());
    }
  }
  // 0 for none, else the object's index + 1.
  void optObject(Out& o, const Obj* x) { o.uv(x ? object(Value::object(x)) + 1 : 0); }

  template <class F>
  void children(const Obj* o, F&& f) {
    switch (o->type) {
      case ObjType::Pair:
        f(static_cast<const Pair*>(o)->car);
        f(static_cast<const Pair*>(o)->cdr);
        break;
      case ObjType::Proto: {
        auto* p = static_cast<const Proto*>(o);
        for (Value k : p->constants) f(k);
        for (Proto* c : p->protos) f(Value::object(c));
        break;
      }
      default:
        break;
    }
  }

  // The object's index, written (after everything it refers to) if it was not yet.
  uint32_t object(Value root) {
    const Obj* r = root.asObject();
    if (auto it = index_.find(r); it != index_.end()) return it->second;
    std::vector<std::pair<const Obj*, bool>> work{{r, false}};
    std::unordered_set<const Obj*> open;
    while (!work.empty()) {
      auto [o, expanded] = work.back();
      if (index_.count(o)) {
        work.pop_back();
        continue;
      }
      if (!expanded) {
        work.back().second = true;
        if (!open.insert(o).second) unsupported("a cyclic structure");
        children(o, [&](Value c) {
          if (c.isObject() && !index_.count(c.asObject())) work.push_back({c.asObject(), false});
        });
        continue;
      }
      work.pop_back();
      emit(o);
      index_[o] = nobjects_++;
    }
    return index_.at(r);
  }

  void emit(const Obj* o) {
    Out& w = objects_;
    switch (o->type) {
      case ObjType::String:
        w.u8(TString);
        w.str(static_cast<const String*>(o)->view());
        return;
      case ObjType::Symbol: {
        auto* s = static_cast<const Symbol*>(o);
        Symbol* pub = vm_.findSymbol(s->name);
        bool twin = false;
        if (pub != s) {
          auto it = pub ? vm_.libraryTwins().find(pub) : vm_.libraryTwins().end();
          if (it == vm_.libraryTwins().end() || it->second != s)
            unsupported("the uninterned symbol " + s->name);
          twin = true;
        }
        w.u8(TSymbol);
        w.str(s->name);
        w.u8(twin);
        return;
      }
      case ObjType::Pair: {
        auto* p = static_cast<const Pair*>(o);
        if (!p->memo.isNil()) unsupported("a pair with a memo");
        w.u8(TPair);
        value(w, p->car);
        value(w, p->cdr);
        return;
      }
      case ObjType::Native: {
        auto* n = static_cast<const Native*>(o);
        auto id = static_cast<NativeId>(n->id);
        if (id == NativeId::None || vm_.builtin(id) != n)
          unsupported(std::string("the native ") + n->name);
        w.u8(TNative);
        w.uv(n->id);
        return;
      }
      case ObjType::Vector: {
        auto* v = static_cast<const Vector*>(o);
        if (v->rank != 1 || isSparse(v) || !v->memo.isNil()) unsupported("an array");
        w.u8(TVector);
        w.uv(v->aux);
        for (uint32_t i = 0; i < v->aux; ++i) {
          uint64_t bits;
          std::memcpy(&bits, &v->items[i], 8);
          w.u64(bits);
        }
        return;
      }
      case ObjType::Proto:
        proto(static_cast<const Proto*>(o));
        return;
      default:
        unsupported("an object of type " + std::to_string(static_cast<int>(o->type)));
    }
  }

  // A proto: what calls and closures need before it runs, then its body, after its
  // length, which loading skips (Proto::lazyBody) and decodes when it is first run.
  void proto(const Proto* p) {
    if (p->transformed || p->primal || p->adLevel) unsupported("a transformed proto");
    Out& w = objects_;
    w.u8(TProto);
    w.str(p->name);
    w.str(p->file);
    w.loc(p->loc);
    w.uv(p->nparams);
    w.u8(p->hasRest);
    w.u8(p->paramSplit);
    w.u8(p->rawParams);
    w.uv(p->nregs);
    w.u8(p->adInternal);
    if (!p->ir) {
      w.uv(0);
    } else {
      auto it = lambdas_.find(static_cast<const Lambda*>(p->ir.get()));
      if (it == lambdas_.end()) unsupported("a proto whose IR is not its form's");
      w.uv(it->second.first + 1);
      w.uv(it->second.second);
    }
    Out b;
    b.uv(p->callKey);
    b.uv(p->code.size());
    for (Instr i : p->code) b.u64(i);
    b.uv(p->constants.size());
    for (Value k : p->constants) value(b, k);
    b.uv(p->protos.size());
    for (Proto* c : p->protos) b.uv(index_.at(c));
    b.uv(p->captures.size());
    for (const auto& regs : p->captures) {
      b.uv(regs.size());
      for (uint16_t r : regs) b.uv(r);
    }
    b.uv(p->locs.size());
    for (SrcLoc l : p->locs) b.loc(l);
    b.uv(p->freeVars.size());
    for (const std::string& v : p->freeVars) b.str(v);
    w.str(b.bytes);
  }

  // The IR reachable from a form's top lambda, numbered then written.
  void module(const Lambda* top, Out& w) {
    std::unordered_map<const Var*, uint32_t> varIx;
    std::vector<const Var*> vars;
    std::unordered_map<const Lambda*, uint32_t> lamIx;
    std::vector<const Lambda*> lams;
    std::unordered_map<const Block*, uint32_t> blockIx;
    std::vector<const Block*> blocks;
    auto var = [&](const Var* v) {
      if (v && varIx.emplace(v, vars.size()).second) vars.push_back(v);
    };
    auto lam = [&](const Lambda* l) {
      if (l && lamIx.emplace(l, lams.size()).second) lams.push_back(l);
    };
    auto block = [&](const Block* b) {
      if (b && blockIx.emplace(b, blocks.size()).second) blocks.push_back(b);
    };
    auto atom = [&](const Atom& a) { var(a.var); };
    lam(top);
    for (size_t li = 0, bi = 0; li < lams.size() || bi < blocks.size();) {
      if (li < lams.size()) {
        const Lambda* l = lams[li++];
        if (l->primalOf) unsupported("a transformed lambda");
        for (Var* v : l->params) var(v);
        var(l->rest);
        for (Var* v : l->freeVars) var(v);
        block(l->body);
        continue;
      }
      const Block* b = blocks[bi++];
      for (const Bind& bd : b->binds) {
        var(bd.dst);
        atom(bd.atom);
        for (const Atom& a : bd.args) atom(a);
        lam(bd.lambda);
        block(bd.thenB);
        block(bd.elseB);
        for (Var* v : bd.recVars) var(v);
      }
      atom(b->result);
    }
    uint32_t formIx = nforms_;
    for (size_t i = 0; i < lams.size(); ++i) lambdas_[lams[i]] = {formIx, static_cast<uint32_t>(i)};

    auto varRef = [&](const Var* v) { w.uv(v ? varIx.at(v) + 1 : 0); };
    auto atomOut = [&](const Atom& a) {
      w.u8(a.kind);
      varRef(a.var);
      optObject(w, a.sym);
      value(w, a.value);
      w.loc(a.loc);
    };
    w.uv(vars.size());
    for (const Var* v : vars) {
      w.str(v->name);
      w.uv(v->id);
      w.u8(v->rec);
    }
    w.uv(lams.size());
    w.uv(blocks.size());
    for (const Lambda* l : lams) {
      w.uv(l->params.size());
      for (Var* v : l->params) varRef(v);
      varRef(l->rest);
      w.uv(blockIx.at(l->body));
      w.uv(l->freeVars.size());
      for (Var* v : l->freeVars) varRef(v);
      w.str(l->name);
      w.str(l->file);
      w.loc(l->loc);
      w.u8(l->derived);
    }
    for (const Block* b : blocks) {
      w.uv(b->binds.size());
      for (const Bind& bd : b->binds) {
        w.u8(bd.kind);
        varRef(bd.dst);
        w.loc(bd.loc);
        atomOut(bd.atom);
        w.uv(bd.args.size());
        for (const Atom& a : bd.args) atomOut(a);
        w.uv(bd.lambda ? lamIx.at(bd.lambda) + 1 : 0);
        w.uv(bd.thenB ? blockIx.at(bd.thenB) + 1 : 0);
        w.uv(bd.elseB ? blockIx.at(bd.elseB) + 1 : 0);
        w.uv(bd.recVars.size());
        for (Var* v : bd.recVars) varRef(v);
        optObject(w, bd.sym);
        w.uv(bd.level);
      }
      atomOut(b->result);
    }
  }

  VM& vm_;
  std::unordered_map<const Obj*, uint32_t> index_;
  std::unordered_map<const Lambda*, std::pair<uint32_t, uint32_t>> lambdas_;  // form, number
  Out objects_;
  uint32_t nobjects_ = 0;
  Out forms_;
  uint32_t nforms_ = 0;
  Out irs_;  // the forms' IR, last: a start that does not differentiate never reads it
};

// ---- loading ----------------------------------------------------------------

// What the IR of an image's protos is decoded from (VM::imageState): the image, where
// each form's IR starts, the forms decoded so far. The objects of the image's table,
// which the IR and the bodies of protos not yet run name, are VM::imageObjects.
struct ImageState {
  std::string_view bytes;
  std::vector<std::pair<size_t, size_t>> formIr;  // offset and size in bytes
  std::vector<std::shared_ptr<Module>> modules;   // null: not decoded yet
  std::vector<std::vector<Lambda*>> lambdas;
};

std::vector<Lambda*> decodeModule(In& in_, const std::vector<Value>& objects, Module* mod) {
  std::vector<Var*> vars(in_.uv());
  uint32_t maxId = 0;
  for (Var*& v : vars) {
    v = mod->newVar(std::string(in_.str()));
    v->id = in_.u32v();
    v->rec = in_.u8();
    maxId = std::max(maxId, v->id + 1);
  }
  mod->nextId = maxId;
  std::vector<Lambda*> lams(in_.uv());
  for (Lambda*& l : lams) l = mod->newLambda();
  std::vector<Block*> blocks(in_.uv());
  for (Block*& b : blocks) b = mod->newBlock();
  auto var = [&]() -> Var* {
    uint64_t i = in_.uv();
    if (i > vars.size()) In::bad();
    return i ? vars[i - 1] : nullptr;
  };
  auto blockAt = [&](uint64_t i) -> Block* {
    if (i >= blocks.size()) In::bad();
    return blocks[i];
  };
  auto value = [&]() -> Value {
    if (!in_.u8()) return Value::fromBits(in_.u64());
    uint64_t i = in_.uv();
    if (i >= objects.size()) In::bad();
    return objects[i];
  };
  auto atom = [&](Atom& a) {
    uint8_t kind = in_.u8();
    if (kind > Atom::Const) In::bad();
    a.kind = static_cast<Atom::Kind>(kind);
    a.var = var();
    if (uint32_t s = in_.u32v()) {
      if (s > objects.size() || !isSymbol(objects[s - 1])) In::bad();
      a.sym = asSymbol(objects[s - 1]);
    }
    a.value = value();
    a.loc = in_.loc();
  };
  for (Lambda* l : lams) {
    l->params.resize(in_.uv());
    for (Var*& v : l->params) v = var();
    l->rest = var();
    l->body = blockAt(in_.uv());
    l->freeVars.resize(in_.uv());
    for (Var*& v : l->freeVars) v = var();
    l->name = in_.str();
    l->file = in_.str();
    l->loc = in_.loc();
    l->derived = in_.u8();
  }
  for (Block* b : blocks) {
    b->binds.resize(in_.uv());
    for (Bind& bd : b->binds) {
      uint8_t kind = in_.u8();
      if (kind > Bind::DefGlobal) In::bad();
      bd.kind = static_cast<Bind::Kind>(kind);
      bd.dst = var();
      bd.loc = in_.loc();
      atom(bd.atom);
      bd.args.resize(in_.uv());
      for (Atom& a : bd.args) atom(a);
      if (uint64_t i = in_.uv()) {
        if (i > lams.size()) In::bad();
        bd.lambda = lams[i - 1];
      }
      if (uint64_t i = in_.uv()) bd.thenB = blockAt(i - 1);
      if (uint64_t i = in_.uv()) bd.elseB = blockAt(i - 1);
      bd.recVars.resize(in_.uv());
      for (Var*& v : bd.recVars) v = var();
      if (uint32_t s = in_.u32v()) {
        if (s > objects.size() || !isSymbol(objects[s - 1])) In::bad();
        bd.sym = asSymbol(objects[s - 1]);
      }
      bd.level = static_cast<uint16_t>(in_.uv());
    }
    atom(b->result);
  }
  return lams;
}

// The body of a proto loaded from the image (Proto::lazyBody), decoded when it is first
// run or transformed: all of it or nothing, so that a failure (out of memory) leaves it
// to be decoded again.
void loadProtoBody(VM& vm, Proto* p) {
  auto* state = static_cast<ImageState*>(vm.imageState.get());
  if (!state || p->lazyBody > state->bytes.size()) In::bad();
  In in(state->bytes.substr(p->lazyBody - 1));
  const std::vector<Value>& objects = vm.imageObjects;
  auto object = [&]() -> Value {
    uint64_t i = in.uv();
    if (i >= objects.size()) In::bad();
    return objects[i];
  };
  try {
    auto callKey = in.u32v();
    std::vector<Instr> code(in.uv());
    for (Instr& i : code) i = in.u64();
    std::vector<Value> constants(in.uv());
    for (Value& k : constants) k = in.u8() ? object() : Value::fromBits(in.u64());
    std::vector<Proto*> protos(in.uv());
    for (Proto*& c : protos) {
      Value v = object();
      if (!isObj(v, ObjType::Proto)) In::bad();
      c = static_cast<Proto*>(v.asObject());
    }
    std::vector<std::vector<uint16_t>> captures(in.uv());
    for (auto& regs : captures) {
      regs.resize(in.uv());
      for (uint16_t& r : regs) r = static_cast<uint16_t>(in.uv());
    }
    std::vector<SrcLoc> locs(in.uv());
    for (SrcLoc& l : locs) l = in.loc();
    std::vector<std::string> freeVars(in.uv());
    for (std::string& v : freeVars) v = in.str();
    p->code = std::move(code);
    p->constants = std::move(constants);
    p->protos = std::move(protos);
    p->captures = std::move(captures);
    p->locs = std::move(locs);
    p->freeVars = std::move(freeVars);
    p->callKey = callKey;
    p->lazyBody = 0;
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::Limit, "out of memory", "<prelude>", {});
  }
  // (No write barrier: the image's objects were all made with it, in one pass with no
  // collection, so they are as old as it is.)
  vm.noteProtoBytes(p);
}

class Loader {
 public:
  Loader(VM& vm, std::string_view image)
      : base_(image.data()), vm_(vm), in_(image.substr(kHeaderBytes)) {}

  void load(std::string_view image, const std::string& file) {
    uint32_t n = in_.u32v();
    VM::Roots table(vm_, n);
    table_ = &table;
    for (uint32_t i = 0; i < n; ++i) table.set(i, object(i));
    auto state = std::make_shared<ImageState>();
    state->bytes = image;
    uint32_t nforms = in_.u32v();
    std::vector<uint32_t> tops;  // their indices in the table
    for (uint32_t f = 0; f < nforms; ++f) {
      tops.push_back(in_.u32v());
      protoAt(tops.back());
      uint64_t offset = in_.uv();
      state->formIr.emplace_back(offset, in_.uv());
    }
    for (Proto* p : irProtos_)
      if (p->irForm > nforms) In::bad();
    state->modules.resize(nforms);
    state->lambdas.resize(nforms);
    for (uint32_t m = in_.u32v(); m > 0; --m) {
      Value sym = ref();
      Value rules = value();
      if (!isSymbol(sym)) In::bad();
      vm_.setMacro(asSymbol(sym), rules);
      // (and its twin's, as define-syntax does while the library loads: expand.cpp)
      if (vm_.loadingLibrary()) vm_.setMacro(vm_.libraryTwin(asSymbol(sym)), rules);
    }
    vm_.setMacroMarks(in_.u32v());
    // The IR section: the rest of the image.
    auto irBase = static_cast<size_t>(in_.at() - image.data());
    for (auto& [offset, size] : state->formIr) {
      if (offset > image.size() - irBase || size > image.size() - irBase - offset) In::bad();
      offset += irBase;
    }
    // (A second load into the same VM serves the protos of the first too: it is the
    // same image, so the same code.)
    std::vector<Value> objects;
    objects.reserve(n);
    for (uint32_t i = 0; i < n; ++i) objects.push_back(table.get(i));
    vm_.imageObjects = std::move(objects);
    vm_.imageState = std::move(state);
    vm_.loadProtoBody = loadProtoBody;
    for (uint32_t top : tops) {
      vm_.safePoint();
      vm_.currentFile = file;
      // A form's proto is run once, and named by no other proto's body: it goes with
      // the first collection after it ran.
      Value form = vm_.imageObjects[top];
      vm_.imageObjects[top] = Value::nil();
      vm_.runToplevel(static_cast<Proto*>(form.asObject()));
    }
  }

 private:
  Value ref() {
    uint32_t i = in_.u32v();
    if (i >= decoded_) In::bad();
    return table_->get(i);
  }
  Value value() {
    if (in_.u8()) return ref();
    return Value::fromBits(in_.u64());
  }
  Proto* protoAt(uint32_t i) {
    if (i >= decoded_ || !isObj(table_->get(i), ObjType::Proto)) In::bad();
    return static_cast<Proto*>(table_->get(i).asObject());
  }

  Value object(uint32_t self) {
    Value v = objectBody(self);
    decoded_ = self + 1;
    return v;
  }
  Value objectBody(uint32_t self) {
    switch (in_.u8()) {
      case TString:
        return vm_.makeString(in_.str());
      case TSymbol: {
        Symbol* s = vm_.intern(in_.str());
        return Value::object(in_.u8() ? vm_.libraryTwin(s) : s);
      }
      case TPair: {
        Value car = value();
        Value cdr = value();
        return vm_.cons(car, cdr);
      }
      case TNative: {
        uint64_t id = in_.uv();
        if (id == 0 || id >= static_cast<uint64_t>(NativeId::Count)) In::bad();
        Native* n = vm_.builtin(static_cast<NativeId>(id));
        if (!n) In::bad();
        return Value::object(n);
      }
      case TVector: {
        uint32_t n = in_.u32v();
        Vector* v = vm_.makeVector(n);
        for (uint32_t i = 0; i < n; ++i) {
          uint64_t bits = in_.u64();
          std::memcpy(&v->items[i], &bits, 8);
        }
        return Value::object(v);
      }
      case TProto:
        return Value::object(proto(self));
      default:
        In::bad();
    }
  }

  // Made young and filled before anything else is allocated: no write barrier needed.
  // Its body stays in the image until it is first run (loadProtoBody).
  Proto* proto(uint32_t self) {
    Proto* p = vm_.makeProto();
    table_->set(self, Value::object(p));
    p->name = in_.str();
    p->file = in_.str();
    p->loc = in_.loc();
    p->nparams = static_cast<uint16_t>(in_.uv());
    p->hasRest = in_.u8();
    p->paramSplit = in_.u8();
    p->rawParams = in_.u8();
    p->nregs = static_cast<uint16_t>(in_.uv());
    p->adInternal = in_.u8();
    if ((p->irForm = in_.u32v())) {
      p->irLambda = in_.u32v();
      irProtos_.push_back(p);
    }
    std::string_view body = in_.str();
    auto at = static_cast<uint64_t>(body.data() - base_);
    if (at >= UINT32_MAX) In::bad();
    p->lazyBody = static_cast<uint32_t>(at + 1);
    p->callKey = kLazyCallKey;
    vm_.noteProtoBytes(p);
    return p;
  }

  const char* base_;  // the image's first byte (Proto::lazyBody counts from there)
  VM& vm_;
  In in_;
  VM::Roots* table_ = nullptr;
  uint32_t decoded_ = 0;  // the objects of the table made so far
  std::vector<Proto*> irProtos_;
};

}  // namespace

uint64_t imageKey(std::string_view prelude) {
  uint64_t h = 14695981039346656037ull;
  uint32_t facts[] = {kFormatVersion,
                      sizeof(Value),
                      sizeof(Instr),
                      sizeof(SrcLoc),
                      sizeof(Proto),
                      sizeof(Bind),
                      sizeof(Lambda),
                      sizeof(Atom),
                      sizeof(Var),
                      sizeof(Native),
                      sizeof(Symbol),
                      sizeof(Pair),
                      static_cast<uint32_t>(NativeId::Count)};
  mix(h, facts, sizeof facts);
  mix(h, kOpcodeTable, sizeof kOpcodeTable);
  mix(h, kPrimitiveTable, sizeof kPrimitiveTable);
  mix(h, prelude.data(), prelude.size());
  return h;
}

std::string writeImage(VM& vm, std::string_view prelude, const std::string& file) {
  Writer w(vm);
  evalSourceRecording(vm, prelude, file, [&](Proto* top) { w.form(top); });
  return w.finish(imageKey(prelude));
}

bool loadImage(VM& vm, std::string_view image, std::string_view prelude, const std::string& file) {
  if (image.size() < kHeaderBytes || std::memcmp(image.data(), kMagic, sizeof kMagic) != 0)
    return false;
  uint32_t version;
  uint64_t key;
  std::memcpy(&version, image.data() + sizeof kMagic, 4);
  std::memcpy(&key, image.data() + sizeof kMagic + 4, 8);
  if (version != kFormatVersion || key != imageKey(prelude)) return false;
  try {
    Loader(vm, image).load(image, file);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::Limit, "out of memory", file, {});
  }
  return true;
}

void ensureIr(VM& vm, Proto* p) {
  vm.ensureBody(p);  // (the transform walks its child protos)
  if (p->ir || !p->irForm) return;
  auto* state = static_cast<ImageState*>(vm.imageState.get());
  if (!state || p->irForm > state->modules.size()) In::bad();
  uint32_t form = p->irForm - 1;
  if (!state->modules[form]) {
    auto [offset, size] = state->formIr[form];
    auto mod = std::make_shared<Module>();
    In in(state->bytes.substr(offset, size));
    state->lambdas[form] = decodeModule(in, vm.imageObjects, mod.get());
    if (!in.atEnd()) In::bad();
    state->modules[form] = std::move(mod);
  }
  const auto& lambdas = state->lambdas[form];
  if (p->irLambda >= lambdas.size()) In::bad();
  const Lambda* lam = lambdas[p->irLambda];
  p->ir = std::shared_ptr<const void>(state->modules[form], lam);
  p->irBytes = ownBytes(lam);
  vm.noteProtoBytes(p);
}

}  // namespace dlam

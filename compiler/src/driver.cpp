// driver.cpp — evalSource / evalFile / compileSource: read, expand, compile and run
// top-level forms one at a time, splicing top-level `begin` and `include` (also when a
// macro use expands into one). A failed C++ allocation anywhere in there (std::bad_alloc)
// leaves as the error the GC heap gives when it runs out: a limit error "out of memory",
// located at the form.
#include <new>
#include <vector>

#include "codegen.h"
#include "dlam/compiler.h"
#include "dlam/syntax.h"
#include "expand.h"
#include "macros.h"
#include "records.h"

namespace dlam {

namespace {

std::string dirOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// For a handler of std::bad_alloc. (If even this error cannot be made, the new
// std::bad_alloc goes on, and the entry points report it as "out of memory" too.)
[[noreturn]] void outOfMemory(const std::string& file, SrcLoc loc) {
  throw Error(ErrorKind::Limit, "out of memory", file, loc);
}

class Toplevel {
 public:
  Toplevel(VM& vm, const std::function<void(Value)>* onValue, bool run)
      : vm_(vm), onValue_(onValue), run_(run), last_(vm, Value::voidValue()) {}
  ~Toplevel() { vm_.countExternal(-static_cast<int64_t>(counted_)); }
  Toplevel(const Toplevel&) = delete;
  Toplevel& operator=(const Toplevel&) = delete;

  void source(std::string_view text, const std::string& file) {
    std::vector<Sx*> forms;
    // The syntax read (and made by macros) counts against the heap limit (countSyntax).
    // The bytes counted hold garbage not yet collected: when they are past half the
    // limit, a collection first, if no dlam code is running.
    uint64_t limit = vm_.config().heapLimitMb << 20;
    if (limit && vm_.gcStats().liveBytes > limit / 2 && vm_.idle()) vm_.collectGarbage();
    countSyntax();
    try {
      forms = readAll(arena_, text, file);
    } catch (const std::bad_alloc&) {
      outOfMemory(file, {});
    }
    countSyntax();
    ExpandOptions opts{file, dirOf(file), !vm_.config().sandbox};
    for (Sx* f : forms) form(f, opts);
  }

  Value last() const { return last_.get(); }
  std::vector<Proto*> protos;
  std::function<void(Proto*)> onCompiled;  // sees each form's proto before it runs

 private:
  // The syntax read and made so far counts in the heap (VM::countExternal) until the
  // source is done: the code compiled from it, and what it runs, share the limit with
  // it. The arena may then grow by the room the heap leaves (SxArena::allowMore).
  void countSyntax() {
    vm_.countExternal(static_cast<int64_t>(arena_.bytes() - counted_));
    counted_ = arena_.bytes();
    uint64_t limit = vm_.config().heapLimitMb << 20, live = vm_.gcStats().liveBytes;
    arena_.allowMore(!limit         ? UINT64_MAX
                     : limit > live ? limit - live
                                    : 0,
                     vm_.config().heapLimitMb);
  }

  static bool isLibrary(const std::string& file) {
    return file == "<prelude>" || file == "<primitive>";
  }

  // A definition of the library's own (its name starts with %): part of the AD
  // machinery, whose calls of transformed code are not observed (Proto::adInternal).
  static bool definesInternal(const Sx* f) {
    if (!isForm(f, "define") || f->items.size() < 2) return false;
    const Sx* n = f->items[1];
    if (n->kind == Sx::List && !n->items.empty()) n = n->items[0];
    return n->kind == Sx::Symbol && !n->text.empty() && n->text[0] == '%';
  }
  static void markInternal(Proto* root) {
    std::vector<Proto*> work{root};
    while (!work.empty()) {
      Proto* p = work.back();
      work.pop_back();
      p->adInternal = true;
      for (Proto* c : p->protos) work.push_back(c);
    }
  }

  static bool isForm(const Sx* x, const char* kw) {
    return x->kind == Sx::List && !x->items.empty() && x->items[0]->isSymbol(kw);
  }

  // The standard library being loaded: every global its code names (called, read or
  // defined) becomes the library's twin of that symbol (VM::libraryTwin), in the IR
  // that codegen compiles and that *j transforms later.
  void bindToLibrary(anf::Lambda* top) {
    auto twin = [&](anf::Atom& a) {
      if (a.kind == anf::Atom::Global) a.sym = vm_.libraryTwin(a.sym);
    };
    anf::forEachBlock(
        top->body,
        [&](anf::Block* b) {
          for (anf::Bind& bd : b->binds) {
            twin(bd.atom);
            for (anf::Atom& a : bd.args) twin(a);
            if (bd.kind == anf::Bind::DefGlobal) bd.sym = vm_.libraryTwin(bd.sym);
          }
          twin(b->result);
        },
        /*intoLambdas=*/true);
  }

  // Errors raised on the way that carry no location of their own (the heap limit,
  // reached expanding a macro use or compiling) belong to the form.
  void form(Sx* f, const ExpandOptions& opts) {
    try {
      formBody(f, opts);
    } catch (const std::bad_alloc&) {
      outOfMemory(opts.file, f->loc);
    } catch (Error& e) {
      if (e.file.empty() || !e.loc.known()) {
        e.file = opts.file;
        e.loc = f->loc;
      }
      throw;
    }
  }

  void formBody(Sx* f, const ExpandOptions& opts) {
    // A macro use is expanded first: it may become a begin, an include or a definition.
    ExpansionBudget budget;
    while (f->kind == Sx::List && !f->items.empty() && f->items[0]->kind == Sx::Symbol) {
      Symbol* s = vm_.findSymbol(f->items[0]->text);
      if (!s || s->macro.isUndefined()) break;
      f = expandMacro(vm_, arena_, s->macro, f, opts.file, budget);
      countSyntax();
    }
    if (isForm(f, "define-record-type")) f = expandRecordType(arena_, f, opts.file);
    if (isForm(f, "begin")) {
      for (size_t i = 1; i < f->items.size(); ++i) form(f->items[i], opts);
      return;
    }
    if (isForm(f, "include")) {
      if (!opts.allowInclude)
        throw Error(ErrorKind::Syntax, "include: not allowed in the sandbox", opts.file, f->loc);
      if (f->items.size() != 2 || f->items[1]->kind != Sx::String)
        throw Error(ErrorKind::Syntax, "include: expected (include \"file\")", opts.file, f->loc);
      if (++includeDepth_ > 64)
        throw Error(ErrorKind::Syntax, "include: nested too deeply (an include cycle?)", opts.file,
                    f->loc);
      std::string path = f->items[1]->text;
      if (!path.empty() && path[0] != '/') path = opts.baseDir + "/" + path;
      std::string text = readSourceFile(path, "include: ", opts.file, f->loc);
      source(text, path);
      --includeDepth_;
      return;
    }
    vm_.safePoint();
    auto mod = std::make_shared<anf::Module>();
    anf::Lambda* lam = expandToplevel(vm_, *mod, f, arena_, opts);
    if (vm_.loadingLibrary()) bindToLibrary(lam);
    countSyntax();
    Proto* proto = compileLambda(vm_, mod, lam);
    if (vm_.loadingLibrary() && definesInternal(f)) markInternal(proto);
    if (onCompiled) onCompiled(proto);
    if (!run_) {
      protos.push_back(proto);
      protoRoots_.push_back(std::make_unique<VM::Root>(vm_, Value::object(proto)));
      return;
    }
    vm_.currentFile = opts.file;
    Value v;
    try {
      v = vm_.runToplevel(proto);
    } catch (Error& e) {
      // When the form tail-called into library code, no frame of the script is left:
      // the error then belongs to the form being evaluated (as one with no location
      // does: form()).
      if (isLibrary(e.file) && !isLibrary(opts.file)) {
        e.file = opts.file;
        e.loc = f->loc;
      }
      throw;
    }
    last_.set(v);
    if (!v.isVoid() && onValue_ && *onValue_) (*onValue_)(v);
  }

  VM& vm_;
  const std::function<void(Value)>* onValue_;
  bool run_;
  SxArena arena_;
  uint64_t counted_ = 0;  // the arena's bytes counted in the heap (countSyntax)
  VM::Root last_;
  std::vector<std::unique_ptr<VM::Root>> protoRoots_;
  int includeDepth_ = 0;
};

}  // namespace

Value evalSource(VM& vm, std::string_view source, const std::string& file,
                 const std::function<void(Value)>& onValue) {
  try {
    Toplevel t(vm, &onValue, true);
    t.source(source, file);
    return t.last();
  } catch (const std::bad_alloc&) {
    outOfMemory(file, {});
  }
}

Value evalSourceRecording(VM& vm, std::string_view source, const std::string& file,
                          const std::function<void(Proto*)>& onCompiled) {
  try {
    Toplevel t(vm, nullptr, true);
    t.onCompiled = onCompiled;
    t.source(source, file);
    return t.last();
  } catch (const std::bad_alloc&) {
    outOfMemory(file, {});
  }
}

Value evalFile(VM& vm, const std::string& path, const std::function<void(Value)>& onValue) {
  std::string text;
  try {
    text = readSourceFile(path, "", path, {});
  } catch (const std::bad_alloc&) {
    outOfMemory(path, {});
  }
  return evalSource(vm, text, path, onValue);
}

bool readDatum(VM& vm, std::string_view text, const std::string& file, SrcLoc start, Value& out,
               size_t& used) {
  try {
    // The syntax lives only until it is converted: it may take the room the heap leaves.
    SxArena arena;
    uint64_t limit = vm.config().heapLimitMb << 20, live = vm.gcStats().liveBytes;
    arena.allowMore(!limit ? UINT64_MAX : limit > live ? limit - live : 0, vm.config().heapLimitMb);
    Sx* datum = readOne(arena, text, file, start, used);
    if (!datum) return false;
    out = quoteDatum(vm, datum);
    return true;
  } catch (const std::bad_alloc&) {
    outOfMemory(file, start);
  }
}

std::vector<Proto*> compileSource(VM& vm, std::string_view source, const std::string& file) {
  try {
    Toplevel t(vm, nullptr, false);
    t.source(source, file);
    return t.protos;
  } catch (const std::bad_alloc&) {
    outOfMemory(file, {});
  }
}

}  // namespace dlam

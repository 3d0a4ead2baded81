// records.cpp — define-record-type, checked and expanded into definitions (records.h).
#include "records.h"

#include <unordered_map>
#include <vector>

#include "dlam/error.h"

namespace dlam {

namespace {

class RecordForm {
 public:
  RecordForm(SxArena& arena, const Sx* form, const std::string& file)
      : arena_(arena), form_(form), file_(file), loc_(form->loc) {}

  Sx* expand() {
    const auto& items = form_->items;
    if (form_->tail || items.size() < 4)
      fail(form_->loc,
           "define-record-type: expected (define-record-type name (constructor field ...) "
           "predicate (field accessor) ...)");
    const Sx* type = items[1];
    if (type->kind != Sx::Symbol)
      fail(type->loc, "define-record-type: expected a name for the type");
    name_ = type->text;
    // The fields and their accessors.
    std::vector<const Sx*> fields, accessors;
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 4; i < items.size(); ++i) {
      const Sx* spec = items[i];
      if (spec->kind != Sx::List || spec->tail || spec->items.empty() ||
          spec->items[0]->kind != Sx::Symbol)
        fail(spec->loc, who() + "expected a field as (field accessor)");
      const Sx* field = spec->items[0];
      if (spec->items.size() == 3)
        fail(spec->items[2]->loc,
             who() + "field '" + field->text + "' has a modifier '" + spec->items[2]->text +
                 "', but dlam is a pure language: a record cannot be changed (make a new one)");
      if (spec->items.size() != 2 || spec->items[1]->kind != Sx::Symbol)
        fail(spec->loc, who() + "expected the field '" + field->text + "' as (field accessor)");
      if (!index.emplace(field->text, fields.size()).second)
        fail(field->loc, who() + "duplicate field '" + field->text + "'");
      fields.push_back(field);
      accessors.push_back(spec->items[1]);
    }
    // The constructor: its name and the fields its arguments set.
    const Sx* ctor = items[2];
    if (ctor->kind != Sx::List || ctor->tail || ctor->items.empty() ||
        ctor->items[0]->kind != Sx::Symbol)
      fail(ctor->loc, who() + "expected the constructor as (name field ...)");
    std::vector<Sx*> argIndices;
    std::vector<bool> set(fields.size());
    for (size_t i = 1; i < ctor->items.size(); ++i) {
      const Sx* f = ctor->items[i];
      if (f->kind != Sx::Symbol) fail(f->loc, who() + "expected a field name in the constructor");
      auto it = index.find(f->text);
      if (it == index.end())
        fail(f->loc, who() + "the constructor's argument '" + f->text + "' is not a field");
      if (set[it->second])
        fail(f->loc, who() + "the constructor sets the field '" + f->text + "' twice");
      set[it->second] = true;
      argIndices.push_back(number(static_cast<double>(it->second)));
    }
    const Sx* pred = items[3];
    if (pred->kind != Sx::Symbol) fail(pred->loc, who() + "expected a name for the predicate");

    Sx* out = list({symbol("begin")});
    std::vector<Sx*> names;
    for (const Sx* f : fields) names.push_back(copy(f));
    out->items.push_back(
        define(type, list({library("%make-record-type"), quote(copy(type)), quote(list(names))})));
    out->items.push_back(
        define(ctor->items[0], list({library("%record-constructor*"), copy(type),
                                     quote(copy(ctor->items[0])), quote(list(argIndices))})));
    out->items.push_back(
        define(pred, list({library("%record-predicate"), copy(type), quote(copy(pred))})));
    for (size_t i = 0; i < fields.size(); ++i)
      out->items.push_back(
          define(accessors[i], list({library("%record-accessor"), copy(type),
                                     quote(copy(accessors[i])), number(static_cast<double>(i))})));
    return out;
  }

 private:
  [[noreturn]] void fail(SrcLoc loc, const std::string& msg) const {
    throw Error(ErrorKind::Syntax, msg, file_, loc);
  }
  std::string who() const { return "define-record-type " + name_ + ": "; }

  Sx* make(Sx::Kind kind) { return arena_.make(kind, loc_); }
  Sx* symbol(const char* name) {
    Sx* s = make(Sx::Symbol);
    s->text = name;
    return s;
  }
  // The library's own global `name` (Sx::kLibraryMark), whatever the program binds.
  Sx* library(const char* name) {
    Sx* s = symbol(name);
    s->mark = Sx::kLibraryMark;
    return s;
  }
  // A symbol of the form, with its mark (a macro may have put it in).
  Sx* copy(const Sx* sym) {
    Sx* s = arena_.make(Sx::Symbol, sym->loc);
    s->text = sym->text;
    s->mark = sym->mark;
    return s;
  }
  Sx* number(double x) {
    Sx* n = make(Sx::Number);
    n->number = x;
    return n;
  }
  Sx* list(std::vector<Sx*> items) {
    Sx* l = make(Sx::List);
    l->items = std::move(items);
    return l;
  }
  Sx* quote(Sx* datum) { return list({symbol("quote"), datum}); }
  Sx* define(const Sx* name, Sx* value) { return list({symbol("define"), copy(name), value}); }

  SxArena& arena_;
  const Sx* form_;
  const std::string& file_;
  SrcLoc loc_;
  std::string name_;
};

}  // namespace

Sx* expandRecordType(SxArena& arena, const Sx* form, const std::string& file) {
  return RecordForm(arena, form, file).expand();
}

}  // namespace dlam

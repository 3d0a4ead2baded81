// dict.cpp — the order of dict keys and the persistent AVL tree of a dict's entries
// (dlam/dict.h). The recursion here follows one path of a balanced tree: at most
// 1.44 log2(n + 2) levels.
#include "dlam/dict.h"

#include <algorithm>
#include <cstring>

#include "dlam/vm.h"

namespace dlam {

int keyRank(Value v) {
  if (v.isNumber()) return v.asNumber() != v.asNumber() ? -1 : 0;
  if (v.isChar()) return 1;
  if (isString(v)) return 2;
  if (isSymbol(v)) return 3;
  return -1;
}

namespace {
int compareBytes(std::string_view a, std::string_view b) {
  int c = a.compare(b);
  return c < 0 ? -1 : c > 0;
}
}  // namespace

int compareKeys(Value a, Value b) {
  if (a == b) return 0;
  int ra = keyRank(a), rb = keyRank(b);
  if (ra != rb) return ra < rb ? -1 : 1;
  switch (ra) {
    case 0: {
      double x = a.asNumber(), y = b.asNumber();
      return x < y ? -1 : x > y;
    }
    case 1:
      return a.asChar() < b.asChar() ? -1 : a.asChar() > b.asChar();
    case 2:
      return compareBytes(asString(a)->view(), asString(b)->view());
    default:
      return compareBytes(asSymbol(a)->name, asSymbol(b)->name);
  }
}

namespace {

DictNode* node(Value v) { return static_cast<DictNode*>(v.asObject()); }
uint32_t height(Value v) { return v.isObject() ? node(v)->aux : 0; }

Value makeNode(VM& vm, Value key, Value value, Value left, Value right) {
  auto* n = static_cast<DictNode*>(vm.allocate(ObjType::DictNode, sizeof(DictNode)));
  n->key = key;
  n->value = value;
  n->left = left;
  n->right = right;
  n->aux = std::max(height(left), height(right)) + 1;
  return Value::object(n);
}

// A node of key and value over left and right, whose heights differ by at most 2,
// rebalanced by one or two rotations.
Value balance(VM& vm, Value key, Value value, Value left, Value right) {
  uint32_t hl = height(left), hr = height(right);
  if (hl > hr + 1) {
    DictNode* l = node(left);
    if (height(l->left) >= height(l->right))
      return makeNode(vm, l->key, l->value, l->left, makeNode(vm, key, value, l->right, right));
    DictNode* lr = node(l->right);
    return makeNode(vm, lr->key, lr->value, makeNode(vm, l->key, l->value, l->left, lr->left),
                    makeNode(vm, key, value, lr->right, right));
  }
  if (hr > hl + 1) {
    DictNode* r = node(right);
    if (height(r->right) >= height(r->left))
      return makeNode(vm, r->key, r->value, makeNode(vm, key, value, left, r->left), r->right);
    DictNode* rl = node(r->left);
    return makeNode(vm, rl->key, rl->value, makeNode(vm, key, value, left, rl->left),
                    makeNode(vm, r->key, r->value, rl->right, r->right));
  }
  return makeNode(vm, key, value, left, right);
}

Value insert(VM& vm, Value at, Value key, Value value, bool& added) {
  if (!at.isObject()) {
    added = true;
    return makeNode(vm, key, value, Value::nil(), Value::nil());
  }
  DictNode* n = node(at);
  int c = compareKeys(key, n->key);
  if (c == 0) return makeNode(vm, n->key, value, n->left, n->right);
  if (c < 0) return balance(vm, n->key, n->value, insert(vm, n->left, key, value, added), n->right);
  return balance(vm, n->key, n->value, n->left, insert(vm, n->right, key, value, added));
}

// The tree without its least entry, which goes to *min.
Value removeMin(VM& vm, Value at, DictNode** min) {
  DictNode* n = node(at);
  if (!n->left.isObject()) {
    *min = n;
    return n->right;
  }
  return balance(vm, n->key, n->value, removeMin(vm, n->left, min), n->right);
}

Value remove(VM& vm, Value at, Value key, bool& removed) {
  if (!at.isObject()) return at;
  DictNode* n = node(at);
  int c = compareKeys(key, n->key);
  if (c < 0) {
    Value l = remove(vm, n->left, key, removed);
    return removed ? balance(vm, n->key, n->value, l, n->right) : at;
  }
  if (c > 0) {
    Value r = remove(vm, n->right, key, removed);
    return removed ? balance(vm, n->key, n->value, n->left, r) : at;
  }
  removed = true;
  if (!n->left.isObject()) return n->right;
  if (!n->right.isObject()) return n->left;
  DictNode* min = nullptr;
  Value r = removeMin(vm, n->right, &min);
  return balance(vm, min->key, min->value, n->left, r);
}

Dict* newDict(VM& vm, Value root, uint32_t size) {
  auto* d = static_cast<Dict*>(vm.allocate(ObjType::Dict, sizeof(Dict)));
  d->root = root;
  d->memo = Value::nil();
  d->zero = Value::nil();
  d->aux = size;
  return d;
}

}  // namespace

Dict* makeDict(VM& vm) { return newDict(vm, Value::nil(), 0); }

Value dictLookup(const Dict* d, Value key) {
  Value at = d->root;
  while (at.isObject()) {
    DictNode* n = node(at);
    int c = compareKeys(key, n->key);
    if (c == 0) return n->value;
    at = c < 0 ? n->left : n->right;
  }
  return Value::undefined();
}

Dict* dictSet(VM& vm, const Dict* d, Value key, Value value) {
  bool added = false;
  Value root = insert(vm, d->root, key, value, added);
  return newDict(vm, root, d->aux + (added ? 1 : 0));
}

Dict* dictRemove(VM& vm, const Dict* d, Value key) {
  bool removed = false;
  Value root = remove(vm, d->root, key, removed);
  if (!removed) return const_cast<Dict*>(d);
  return newDict(vm, root, d->aux - 1);
}

Dict* dictWithValues(VM& vm, const Dict* d, const Value* values) {
  // The shape is copied first (pre-order), then the values are filled in in key order.
  size_t next = 0;
  Value root = Value::nil();
  if (d->root.isObject()) {
    struct Copy {
      const DictNode* from;
      Value* into;
    };
    std::vector<Copy> work{{node(d->root), &root}};
    while (!work.empty()) {
      Copy c = work.back();
      work.pop_back();
      Value n = makeNode(vm, c.from->key, Value::nil(), Value::nil(), Value::nil());
      node(n)->aux = c.from->aux;
      *c.into = n;
      if (c.from->right.isObject()) work.push_back({node(c.from->right), &node(n)->right});
      if (c.from->left.isObject()) work.push_back({node(c.from->left), &node(n)->left});
    }
    // The values, in key order.
    std::vector<DictNode*> path;
    Value at = root;
    for (;;) {
      while (at.isObject()) {
        path.push_back(node(at));
        at = path.back()->left;
      }
      if (path.empty()) break;
      DictNode* n = path.back();
      path.pop_back();
      n->value = values[next++];
      at = n->right;
    }
  }
  return newDict(vm, root, d->aux);
}

Dict* dictZeroSkeleton(VM& vm, const Dict* d) {
  std::vector<Value> zeros(d->size(), Value::zero());
  Dict* z = dictWithValues(vm, d, zeros.data());
  std::vector<Value> work{z->root};
  while (!work.empty()) {
    Value at = work.back();
    work.pop_back();
    if (!at.isObject()) continue;
    node(at)->flags |= kZeroTree;
    work.push_back(node(at)->left);
    work.push_back(node(at)->right);
  }
  return z;
}

namespace {
// The sum of two subtrees (see dictPlusShared); undefined if they do not match.
Value plusShared(VM& vm, Value a, Value b) {
  if (!a.isObject() || !b.isObject()) return a.isObject() || b.isObject() ? Value::undefined() : a;
  if (node(a)->flags & kZeroTree) return b;
  if (node(b)->flags & kZeroTree) return a;
  DictNode *x = node(a), *y = node(b);
  if (x->aux != y->aux || compareKeys(x->key, y->key) != 0) return Value::undefined();
  Value sum;
  if (x->value.isZero()) {
    sum = y->value;
  } else if (y->value.isZero()) {
    sum = x->value;
  } else if (x->value.isNumber() && y->value.isNumber()) {
    sum = Value::number(x->value.asNumber() + y->value.asNumber());
  } else {
    return Value::undefined();
  }
  if (!(sum.isNumber() || sum.isZero())) return Value::undefined();
  Value l = plusShared(vm, x->left, y->left);
  if (l.isUndefined()) return l;
  Value r = plusShared(vm, x->right, y->right);
  if (r.isUndefined()) return r;
  return makeNode(vm, x->key, sum, l, r);
}
}  // namespace

Value dictPlusShared(VM& vm, const Dict* a, const Dict* b) {
  if (a->size() != b->size()) return Value::undefined();
  Value root = plusShared(vm, a->root, b->root);
  if (root.isUndefined()) return root;
  return Value::object(newDict(vm, root, a->size()));
}

bool sameKeys(const Dict* a, const Dict* b, const std::function<void(Value, Value)>& f) {
  if (a->size() != b->size()) return false;
  // The same shape first, node by node.
  std::vector<std::pair<Value, Value>> work{{a->root, b->root}}, pairs;
  bool sameShape = true;
  while (sameShape && !work.empty()) {
    auto [x, y] = work.back();
    work.pop_back();
    if (!x.isObject() || !y.isObject()) {
      sameShape = x.isObject() == y.isObject();
      continue;
    }
    DictNode *m = node(x), *n = node(y);
    if (m->aux != n->aux || compareKeys(m->key, n->key) != 0) {
      sameShape = false;
      continue;
    }
    if (m->flags & kZeroTree) continue;
    pairs.emplace_back(m->value, n->value);
    work.emplace_back(m->left, n->left);
    work.emplace_back(m->right, n->right);
  }
  if (!sameShape) {
    std::vector<std::pair<Value, Value>> ea, eb;
    forEachEntry(a, [&](Value k, Value v) { ea.emplace_back(k, v); });
    forEachEntry(b, [&](Value k, Value v) { eb.emplace_back(k, v); });
    pairs.clear();
    for (size_t i = 0; i < ea.size(); ++i) {
      if (compareKeys(ea[i].first, eb[i].first) != 0) return false;
      pairs.emplace_back(ea[i].second, eb[i].second);
    }
  }
  for (auto& [x, y] : pairs) f(x, y);
  return true;
}

}  // namespace dlam

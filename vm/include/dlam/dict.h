// dict.h — dicts (object.h: Dict, DictNode): the order of their keys and the persistent
// AVL tree that holds their entries.
//
// A dict never changes: setting or removing a key copies the path from the root to it
// (O(log n) new nodes) and shares the rest with the dict it came from. The tree's height
// is at most 1.44 log2(n + 2), so the functions here that follow one path down the tree
// recurse at most that deep (under 50 levels for any dict that fits in memory); walks over
// every entry use an explicit stack.
//
// Keys are numbers (compared by value; 0 and -0 are one key, NaN is not a key), strings
// (by their bytes) and symbols (by their names), in that order: every number comes before
// every string, every string before every symbol. Characters, once the VM has a type for
// them, take rank 1 (between numbers and strings): keyRank is the one place to say so.
#pragma once
#include <functional>
#include <vector>

#include "dlam/object.h"

namespace dlam {

class VM;

// The rank of a key's kind (0 numbers, 2 strings, 3 symbols), or -1 if v cannot be a key.
// A key is taken without its reverse tags (untagged) before it gets here.
int keyRank(Value v);
// <0, 0 or >0 as a comes before, is the same key as, or comes after b (both keys).
int compareKeys(Value a, Value b);

// The entry of `key` in d: its value, or undefined if d has no such key.
Value dictLookup(const Dict* d, Value key);

// A new dict: d with key set to value (replaced, or added), or with key removed (d itself
// if it has no such key).
Dict* dictSet(VM& vm, const Dict* d, Value key, Value value);
Dict* dictRemove(VM& vm, const Dict* d, Value key);
// An empty dict.
Dict* makeDict(VM& vm);

// Calls f(key, value) for every entry, in key order (iteratively).
template <class F>
void forEachEntry(const Dict* d, F f) {
  std::vector<const DictNode*> stack;
  Value at = d->root;
  for (;;) {
    while (at.isObject()) {
      stack.push_back(static_cast<const DictNode*>(at.asObject()));
      at = stack.back()->left;
    }
    if (stack.empty()) return;
    const DictNode* n = stack.back();
    stack.pop_back();
    f(n->key, n->value);
    at = n->right;
  }
}

// A dict of d's keys (and the shape of its tree) with values[i] for its i-th entry in key
// order. No collection runs while it builds (natives do not collect).
Dict* dictWithValues(VM& vm, const Dict* d, const Value* values);

// A dict of d's keys (and shape) whose values are all the symbolic zero, its nodes
// flagged kZeroTree: what the sensitivity of one entry is made from (%dict-onehot: set
// that entry), so that such sensitivities share all their nodes but one path.
Dict* dictZeroSkeleton(VM& vm, const Dict* d);

// Whether a and b have the same keys. Calls f(value of a, value of b) for the entries of
// the same key, except where a subtree of a's tree is one of zeros (kZeroTree) at the
// place of a subtree of b's with the same key at its root and the same height: that is
// taken to be a subtree of zeros made from b's keys (so checking the sensitivity of one
// entry of a dict against the dict costs O(log n)). Trees of other shapes are compared
// entry by entry in key order.
bool sameKeys(const Dict* a, const Dict* b, const std::function<void(Value, Value)>& f);

// The sum of two dict sensitivities of the same keys and the same tree shape whose values
// are numbers or symbolic zeros, made along the nodes the two do not share as zero
// subtrees (kZeroTree): O(log n) for one entry's sensitivity added to another. Undefined
// if the two are not such (plus then takes the general way).
Value dictPlusShared(VM& vm, const Dict* a, const Dict* b);

}  // namespace dlam

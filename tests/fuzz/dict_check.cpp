// dict_check.cpp — checks that the fuzzers' dictionary (dlam.dict) names every public
// global and macro the standard library defines, so that a new surface (arrays, forward
// mode, records, ports ...) reaches the text targets' mutations as whole words, not only
// through the seeds. Prints the names missing from the dictionary, in its format, and
// exits 1 if there are any: paste them into dlam.dict (names starting with % are the
// library's internals and are left out, as are the hidden names, starting with \x01).
//
//   dlam_dict_check tests/fuzz/dlam.dict
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

// The entries of a libFuzzer dictionary: the text between the quotes of each line
// `name="..."` or `"..."`, with \\ and \" unescaped (other escapes are kept as written).
std::set<std::string, std::less<>> readDictionary(const char* path, bool& ok) {
  std::set<std::string, std::less<>> words;
  std::ifstream in(path);
  ok = static_cast<bool>(in);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t q = line.find('"');
    size_t e = line.rfind('"');
    if (q == std::string::npos || e <= q) continue;
    std::string w;
    for (size_t i = q + 1; i < e; ++i) {
      if (line[i] == '\\' && i + 1 < e && (line[i + 1] == '\\' || line[i + 1] == '"')) ++i;
      w += line[i];
    }
    words.insert(w);
  }
  return words;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DICT\n", argv[0]);
    return 2;
  }
  bool ok = false;
  std::set<std::string, std::less<>> words = readDictionary(argv[1], ok);
  if (!ok) {
    std::fprintf(stderr, "dict_check: cannot read %s\n", argv[1]);
    return 2;
  }
  dlam::VM vm;
  dlam::openStdlib(vm);
  std::vector<std::string> missing;
  for (const auto& [name, sym] : vm.symbolTable()) {
    if (sym->global.isUndefined() && sym->macro.isUndefined()) continue;
    if (name.empty() || name[0] == '%' || static_cast<unsigned char>(name[0]) < 0x20) continue;
    if (words.count(name)) continue;
    missing.emplace_back(name);
  }
  std::sort(missing.begin(), missing.end());
  for (const std::string& name : missing) {
    std::string escaped;
    for (char c : name) {
      if (c == '\\' || c == '"') escaped += '\\';
      escaped += c;
    }
    std::printf("\"%s\"\n", escaped.c_str());
  }
  if (!missing.empty())
    std::fprintf(stderr, "dict_check: %zu public names are missing from %s (printed above)\n",
                 missing.size(), argv[1]);
  return missing.empty() ? 0 : 1;
}

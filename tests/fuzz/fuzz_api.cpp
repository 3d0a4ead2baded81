// fuzz_api.cpp — random sequences of C API calls (dlam.h) on up to three VMs at once.
//
// The input is a program for a small interpreter: each operation is a byte choosing the
// call, then bytes choosing its VM, handles, numbers, configs and source text. Handles
// come from a pool holding, for each, the VM it belongs to and whether it is still
// valid; an operation may also pass NULL, a released handle, a handle of another VM or
// an arbitrary bit pattern. Host functions registered by the input call back into the
// API (dlam_call, dlam_eval, dlam_set_error, returning foreign or released handles).
// Every VM's configuration keeps an instruction limit, so no input runs forever.
//
// Checked: no crash or sanitizer report; every status is one of dlam_status;
// dlam_last_error is never NULL, is empty after a success and not after a failure;
// a released handle or one of another live VM is DLAM_ERR_API; buffer-size protocols
// (dlam_to_string, dlam_to_numbers) report the length and store nothing past the
// capacity; and the gradient of a reference function defined when the VM was made,
// x * sin(y), is exact whatever the input did to the VM. At the end every VM is freed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dlam.h"
#include "fuzz_common.h"

namespace {

using dlam::fuzz::fail;

// The bytes of the input, read front to back; past the end everything reads as 0.
struct Bytes {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint32_t u32() { return u8() | (u8() << 8) | (u8() << 16) | (uint32_t(u8()) << 24); }
  uint64_t u64() { return u32() | (uint64_t(u32()) << 32); }
  double num() {
    uint8_t k = u8();
    if (k < 200) return (static_cast<int>(u8()) - 128) / 16.0;
    double d;
    uint64_t bits = u64();
    std::memcpy(&d, &bits, sizeof d);
    return d;  // any double: NaN, infinities, denormals
  }
  std::string text(size_t max) {
    size_t len = std::min<size_t>(u8() % (max + 1), n);
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

const char* const kSnippets[] = {
    "(define (f x y) (* x (sin y)))",
    "(define (g . xs) xs)",
    "(define k (lambda (x) (h0 x)))",
    "(define n (lambda (x y) (hn x y)))",
    "(lambda (x) (* x x))",
    "(list 1 2.5 \"s\" 'sym #t)",
    "(vector 1 2 3)",
    "(exit 3)",
    "(exit #f)",
    "(error \"boom\" 1 2)",
    "(let loop () (loop))",
    "(define (deep n) (if (= n 0) 0 (+ 1 (deep (- n 1))))) (deep 100000)",
    "(make-list 10000000 1)",
    "(raise 'oops)",
    "(h1 1 2 3)",
    "(h2 (lambda (z) (h3 z)) 4)",
    "(gradient (lambda (x) (hn x x)))",
    "((gradient (lambda (x) (hn x (* x x)))) 1.5)",
    "((gradient (lambda (x) (h0 x))) 2)",
    "(string->symbol \"abc\")",
    "(display \"out\") (newline)",
    "(define",
    ")",
    "(void)",
    "'()",
    "(cons 1 2)",
    "(*j 1)",
    "(let ((p (open-input-string \"(a b) 1\"))) (read p))",
    "(format \"~a ~s ~%\" 1 \"x\")",
    "(open-input-file \"/etc/passwd\")",
};
constexpr size_t kNumSnippets = sizeof(kSnippets) / sizeof(kSnippets[0]);

constexpr int kMaxVms = 3;
constexpr size_t kMaxHandles = 64;
constexpr int kMaxOps = 200;

struct HandleRec {
  int vm;  // index into State::vms
  dlam_val h;
  bool valid;
};

struct State;
State* current = nullptr;  // the state the host functions see

struct VmRec {
  dlam_vm* vm = nullptr;
  dlam_val ref = nullptr;  // the reference function x * sin(y), or null (broken config)
  bool broken = false;     // made with an invalid config: every call fails
};

struct State {
  Bytes in;
  VmRec vms[kMaxVms];
  std::vector<HandleRec> handles;
  int hostDepth = 0;

  void checkStatus(dlam_vm* vm, int st, const char* what) {
    if (st < DLAM_OK || st > DLAM_EXIT) fail(std::string(what) + ": status out of range");
    const char* e = dlam_last_error(vm);
    if (!e) fail(std::string(what) + ": dlam_last_error is NULL");
    // Inside a host function the host's own calls may leave messages of nested runs; the
    // rule holds for the outermost calls.
    if (hostDepth == 0 && vm) {
      if (st == DLAM_OK && *e) fail(std::string(what) + ": an error after success: " + e);
      if (st != DLAM_OK && !*e) fail(std::string(what) + ": no message after a failure");
    }
  }

  int pickVm() { return in.u8() % kMaxVms; }
  dlam_vm* vmAt(int i) { return vms[i].vm; }

  void add(int vm, dlam_val h) {
    if (!h) return;
    if (handles.size() >= kMaxHandles) {
      // the pool is full: release the oldest valid one of that VM
      for (auto it = handles.begin(); it != handles.end(); ++it)
        if (it->valid && vms[it->vm].vm) {
          dlam_release(vms[it->vm].vm, it->h);
          handles.erase(it);
          break;
        }
      if (handles.size() >= kMaxHandles) handles.erase(handles.begin());
    }
    handles.push_back({vm, h, true});
  }

  // A handle for VM i: usually a valid one of its own; sometimes NULL, a released one,
  // one of another VM, or garbage. *expectApi: the call must fail with DLAM_ERR_API.
  dlam_val pickHandle(int i, bool* expectApi) {
    *expectApi = false;
    uint8_t k = in.u8();
    if (k < 8) {
      *expectApi = true;
      return nullptr;
    }
    if (k < 12) return reinterpret_cast<dlam_val>(static_cast<uintptr_t>(in.u64()));
    if (k < 16 && vms[i].ref) return vms[i].ref;
    if (handles.empty()) {
      *expectApi = true;
      return nullptr;
    }
    const HandleRec& r = handles[in.u8() % handles.size()];
    if (!r.valid && vms[r.vm].vm && r.vm == i) *expectApi = true;  // released
    if (r.vm != i && vms[r.vm].vm) *expectApi = true;              // another live VM's
    return r.h;
  }

  void invalidateVm(int i) {
    for (HandleRec& r : handles)
      if (r.vm == i) r.valid = false;
    vms[i] = VmRec{};
  }

  void releaseHandle(int i, dlam_val h) {
    for (HandleRec& r : handles)
      if (r.h == h && r.vm == i) r.valid = false;
  }
};

void checkApi(State& s, dlam_vm* vm, int st, bool expectApi, const char* what) {
  s.checkStatus(vm, st, what);
  // A broken VM answers with its error before it looks at the handle.
  bool broken = false;
  for (const VmRec& r : s.vms) broken = broken || (r.vm == vm && r.broken);
  if (expectApi && vm && !broken && st != DLAM_ERR_API)
    fail(std::string(what) + ": an invalid handle was accepted (status " + std::to_string(st) +
         ")");
}

// Host functions: ud selects what they do.
dlam_status host(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result, void* ud) {
  State& s = *current;
  auto what = reinterpret_cast<uintptr_t>(ud);
  if (s.hostDepth > 20) {
    dlam_set_error(vm, "too deep");
    return DLAM_ERR_RUNTIME;
  }
  ++s.hostDepth;
  dlam_status st = DLAM_OK;
  switch (what) {
    case 0:  // identity
      if (argc > 0) *result = argv[0];
      break;
    case 1:  // fails
      dlam_set_error(vm, "host failure");
      st = s.in.u8() & 1 ? DLAM_ERR_RUNTIME : DLAM_ERR_LIMIT;
      break;
    case 2:  // calls its first argument on the others
      if (argc > 0) st = dlam_call(vm, argv[0], argc - 1, argv + 1, result);
      break;
    case 3: {  // evaluates a snippet, returns its value
      dlam_val r = nullptr;
      st = dlam_eval(vm, kSnippets[s.in.u8() % kNumSnippets], "host", &r);
      *result = r;
      break;
    }
    case 4:  // returns a handle of the pool (maybe another VM's, maybe released)
      if (!s.handles.empty()) *result = s.handles[s.in.u8() % s.handles.size()].h;
      break;
    case 5:  // releases its arguments, then returns one
      for (int i = 0; i < argc; ++i) dlam_release(vm, argv[i]);
      if (argc > 0) *result = argv[0];
      break;
    default:  // fails after a nested failure, without a message of its own
      st = dlam_eval(vm, "(car 1)", "host", nullptr);
      break;
  }
  --s.hostDepth;
  return st;
}

double numeric(const double* x, void*) { return x[0] * x[1] + std::sin(x[0]); }
void numericVjp(const double* x, double ybar, double* xbar, void*) {
  xbar[0] = ybar * (x[1] + std::cos(x[0]));
  xbar[1] = ybar * x[0];
}

void writeNothing(void*, int, const char*, size_t) {}

void newVm(State& s, int i) {
  if (s.vms[i].vm) {
    dlam_free(s.vms[i].vm);
    s.invalidateVm(i);
  }
  dlam_config cfg;
  dlam_config_init(&cfg);
  cfg.write = writeNothing;
  uint8_t k = s.in.u8();
  cfg.heap_limit_mb = 8 + s.in.u8() % 57;
  cfg.stack_limit = 1 + s.in.u32() % 20000;
  cfg.instruction_limit = 1 + s.in.u32() % 300000;
  cfg.file_io = 0;
  const char* const path[] = {"/nonexistent", nullptr};
  bool broken = false;
  if (k < 16) {
    broken = true;
    switch (k % 6) {
      case 0:
        cfg.heap_limit_mb = 0;
        break;
      case 1:
        cfg.stack_limit = 0;
        break;
      case 2:
        cfg.ffi_enabled = 7;
        break;
      case 3:
        cfg.include_path = path + 1;  // one NULL entry
        cfg.include_path_len = 1;
        break;
      case 4:
        cfg.heap_limit_mb = (size_t{1} << 40) + 1;
        break;
      default:
        cfg.file_io = 2;
        break;
    }
  } else if (k < 24) {
    cfg.include_path = path;
    cfg.include_path_len = 1;
  }
  dlam_vm* vm = dlam_new_with(&cfg);
  if (!vm) fail("dlam_new_with returned NULL");
  s.vms[i].vm = vm;
  s.vms[i].broken = broken;
  const char* e = dlam_last_error(vm);
  dlam_val r = nullptr;
  int st = dlam_eval(vm, "(define (%fz-ref x y) (* x (sin y))) %fz-ref", "<ref>", &r);
  if (broken) {
    if (st != DLAM_ERR_CONFIG) fail("a VM with an invalid config ran code");
    if (!*dlam_last_error(vm)) fail("a broken VM without a message");
    return;
  }
  (void)e;
  // A stack limit of a few frames stops the library's loading: the VM is then broken
  // (every call fails with that limit error).
  if (st == DLAM_ERR_LIMIT) {
    s.vms[i].broken = true;
    return;
  }
  if (st != DLAM_OK) fail(std::string("the reference function: ") + dlam_last_error(vm));
  s.vms[i].ref = r;
  for (int h = 0; h < 4; ++h) {
    char name[4] = {'h', static_cast<char>('0' + h), 0, 0};
    uintptr_t what = h < 3 ? h : 3 + s.in.u8() % 4;
    if (dlam_register(vm, name, h == 1 ? -1 : (h == 0 ? 1 : -1), host,
                      reinterpret_cast<void*>(what)) != DLAM_OK)
      fail(std::string("dlam_register failed: ") + dlam_last_error(vm));
  }
  if (dlam_register_numeric(vm, "hn", 2, numeric, s.in.u8() & 1 ? numericVjp : nullptr, nullptr) !=
      DLAM_OK)
    fail("dlam_register_numeric failed");
}

// The reference function's gradient at (x, y) is (sin y, x cos y), exactly as computed.
void checkReference(State& s, int i) {
  VmRec& v = s.vms[i];
  if (!v.vm || !v.ref) return;
  double x[2] = {s.in.num(), s.in.num()};
  if (!std::isfinite(x[0]) || !std::isfinite(x[1]) || std::fabs(x[1]) > 1e6) return;
  double y = 0, g[2] = {0, 0};
  int st = dlam_value_and_gradient(v.vm, v.ref, 2, x, &y, g);
  s.checkStatus(v.vm, st, "dlam_value_and_gradient(ref)");
  if (st != DLAM_OK) {
    // Only the VM's limits may stop it (a host function may have set a tiny heap...).
    if (st != DLAM_ERR_LIMIT)
      fail(std::string("the reference gradient failed: ") + dlam_last_error(v.vm));
    return;
  }
  double ey = x[0] * std::sin(x[1]), g0 = std::sin(x[1]), g1 = x[0] * std::cos(x[1]);
  auto close = [](double a, double b) {
    return a == b || std::fabs(a - b) <= 1e-12 * std::max(1.0, std::fabs(b));
  };
  if (!close(y, ey) || !close(g[0], g0) || !close(g[1], g1))
    fail("the reference gradient is wrong");
}

void step(State& s) {
  uint8_t op = s.in.u8() % 24;
  int i = s.pickVm();
  dlam_vm* vm = s.vmAt(i);
  bool api = false;
  switch (op) {
    case 0:
      newVm(s, i);
      return;
    case 1:
      if (vm) {
        dlam_free(vm);
        s.invalidateVm(i);
      }
      return;
    case 2: {  // eval a snippet or the input's own text
      if (!vm) return;
      std::string src = s.in.u8() & 1 ? kSnippets[s.in.u8() % kNumSnippets] : s.in.text(120);
      dlam_val r = nullptr;
      int st = dlam_eval(vm, src.c_str(), s.in.u8() & 1 ? nullptr : "chunk", &r);
      s.checkStatus(vm, st, "dlam_eval");
      if ((st == DLAM_OK) != (r != nullptr)) fail("dlam_eval: result and status disagree");
      if (st == DLAM_EXIT && dlam_exit_code(vm) < 0) fail("negative exit code");
      s.add(i, r);
      return;
    }
    case 3: {
      const char* names[] = {"f", "g", "k", "n", "car", "h0", "hn", "undefined-name", "", "+"};
      dlam_val r = dlam_get_global(vm, names[s.in.u8() % 10]);
      const char* e = dlam_last_error(vm);
      if (!e || (r && *e)) fail("dlam_get_global: a value and an error");
      s.add(i, r);
      return;
    }
    case 4: {
      dlam_val h = s.pickHandle(i, &api);
      int st = dlam_set_global(vm, s.in.u8() & 1 ? "f" : "x", h);
      checkApi(s, vm, st, api, "dlam_set_global");
      return;
    }
    case 5: {  // call with 0..3 arguments
      bool a0, a1 = false, a2 = false;
      dlam_val fn = s.pickHandle(i, &a0);
      int argc = s.in.u8() % 4;
      dlam_val argv[3];
      bool any = false;
      for (int k = 0; k < argc; ++k) {
        argv[k] = s.pickHandle(i, &a1);
        a2 = a2 || a1;
      }
      any = a0 || a2;
      dlam_val r = nullptr;
      int st = dlam_call(vm, fn, argc, argc ? argv : nullptr, s.in.u8() & 1 ? &r : nullptr);
      checkApi(s, vm, st, any, "dlam_call");
      s.add(i, r);
      return;
    }
    case 6: {
      dlam_val fn = s.pickHandle(i, &api);
      double x[3] = {s.in.num(), s.in.num(), s.in.num()};
      double out = 0;
      dlam_val r = nullptr;
      int st = dlam_call_numbers(vm, fn, s.in.u8() % 4, x, &out, s.in.u8() & 1 ? &r : nullptr);
      checkApi(s, vm, st, api, "dlam_call_numbers");
      s.add(i, r);
      return;
    }
    case 7: {
      double xs[8];
      size_t n = s.in.u8() % 9;
      for (size_t k = 0; k < n; ++k) xs[k] = s.in.num();
      uint8_t k = s.in.u8() % 4;
      dlam_val r = k == 0   ? dlam_number(vm, n ? xs[0] : 0)
                   : k == 1 ? dlam_list_of_numbers(vm, n ? xs : nullptr, n)
                   : k == 2 ? dlam_vector_of_numbers(vm, n ? xs : nullptr, n)
                            : dlam_boolean(vm, n);
      if (vm && !r && !*dlam_last_error(vm)) fail("making a value failed without a message");
      s.add(i, r);
      return;
    }
    case 8: {
      dlam_val h = s.pickHandle(i, &api);
      double d;
      int st = dlam_to_number(vm, h, &d);
      checkApi(s, vm, st, api, "dlam_to_number");
      return;
    }
    case 9: {
      dlam_val h = s.pickHandle(i, &api);
      size_t cap = s.in.u8() % 10, count = 12345;
      double out[10];
      for (double& d : out) d = -7.25;
      int st = dlam_to_numbers(vm, h, cap ? out : nullptr, cap, &count);
      checkApi(s, vm, st, api, "dlam_to_numbers");
      for (size_t k = cap; k < 10; ++k)
        if (out[k] != -7.25) fail("dlam_to_numbers wrote past its capacity");
      if (st == DLAM_OK && count > cap) fail("dlam_to_numbers: OK with more than capacity");
      return;
    }
    case 10: {
      dlam_val h = s.pickHandle(i, &api);
      int t = dlam_type_of(vm, h);
      if (t < -1 || t > DLAM_TYPE_OTHER) fail("dlam_type_of out of range");
      if (api && vm && !s.vms[i].broken && t != -1) fail("dlam_type_of accepted a bad handle");
      return;
    }
    case 11: {
      dlam_val h = s.pickHandle(i, &api);
      char buf[40];
      std::memset(buf, 'Z', sizeof buf);
      size_t cap = s.in.u8() % 33, len = 99999;
      int st = dlam_to_string(vm, h, s.in.u8() & 1, cap ? buf : nullptr, cap, &len);
      checkApi(s, vm, st, api, "dlam_to_string");
      for (size_t k = cap; k < sizeof buf; ++k)
        if (buf[k] != 'Z') fail("dlam_to_string wrote past its capacity");
      if (st == DLAM_OK && (len >= cap || std::strlen(buf) != len))
        fail("dlam_to_string: wrong length");
      return;
    }
    case 12: {
      dlam_val h = s.pickHandle(i, &api);
      if (h && h == s.vms[i].ref) return;  // the reference stays
      dlam_release(vm, h);
      if (!dlam_last_error(vm)) fail("dlam_release: dlam_last_error is NULL");
      s.releaseHandle(i, h);
      return;
    }
    case 13: {
      dlam_val h = s.pickHandle(i, &api);
      dlam_val r = dlam_dup(vm, h);
      if (api && r && vm) fail("dlam_dup of a bad handle");
      s.add(i, r);
      return;
    }
    case 14: {
      dlam_val fn = s.pickHandle(i, &api);
      size_t n = s.in.u8() % 4;
      double x[3] = {s.in.num(), s.in.num(), s.in.num()}, y = 0, g[3] = {0, 0, 0};
      int st = dlam_value_and_gradient(vm, fn, n, n ? x : nullptr, s.in.u8() & 1 ? &y : nullptr,
                                       n ? g : nullptr);
      checkApi(s, vm, st, api, "dlam_value_and_gradient");
      return;
    }
    case 15:
      checkReference(s, i);
      return;
    case 16: {
      const char* names[] = {"h0", "h1", "h2", "h3", "", "car", nullptr};
      int arity = static_cast<int>(s.in.u8() % 260) - 2;
      int st = dlam_register(vm, names[s.in.u8() % 7], arity, s.in.u8() < 8 ? nullptr : host,
                             reinterpret_cast<void*>(uintptr_t(s.in.u8() % 7)));
      s.checkStatus(vm, st, "dlam_register");
      return;
    }
    case 17: {
      int st = dlam_register_numeric(
          vm, s.in.u8() & 1 ? "hn" : "hm", static_cast<int>(s.in.u8() % 4) * 2 - 1,
          s.in.u8() < 8 ? nullptr : numeric, s.in.u8() & 1 ? numericVjp : nullptr, nullptr);
      s.checkStatus(vm, st, "dlam_register_numeric");
      return;
    }
    case 18:
      dlam_interrupt(vm);
      return;
    case 19:
      dlam_set_error(vm, "not inside a host function");
      (void)dlam_last_error(vm);
      return;
    case 20:
      (void)dlam_exit_code(vm);
      if (!dlam_last_error(vm)) fail("dlam_last_error is NULL");
      return;
    case 21: {  // run a missing file
      dlam_val r = nullptr;
      int st = dlam_run_file(vm, "/nonexistent/x.dlam", &r);
      s.checkStatus(vm, st, "dlam_run_file");
      if (vm && st == DLAM_OK) fail("a missing file ran");
      return;
    }
    default:
      checkReference(s, i);
      return;
  }
}

// Making a VM loads the library (most of an input's time under ASan), so the first VM
// of an input is kept for the next one when the input leaves it alive (its handles of the
// pool released), up to kInputsPerVm inputs; the globals an input defined stay. With
// DLAM_FUZZ_FRESH=1 every input starts with a new VM (to confirm a finding alone).
constexpr int kInputsPerVm = 500;

bool fresh() {
  static const bool f = [] {
    const char* v = std::getenv("DLAM_FUZZ_FRESH");
    return v && *v && *v != '0';
  }();
  return f;
}

// The VM kept from one input to the next, freed at exit so that LeakSanitizer sees
// everything it owns released.
VmRec kept;

void freeKept() {
  if (kept.vm) dlam_free(kept.vm);
  kept = VmRec{};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool atExit = (std::atexit(freeKept), true);
  (void)atExit;
  static int uses = 0;
  State s{Bytes{data, size}, {}, {}, 0};
  current = &s;
  if (kept.vm && !fresh() && ++uses < kInputsPerVm) {
    s.vms[0] = kept;
  } else {
    if (kept.vm) dlam_free(kept.vm);
    uses = 0;
    newVm(s, 0);
  }
  kept = VmRec{};
  for (int n = 0; n < kMaxOps && !s.in.empty(); ++n) step(s);
  for (int i = 0; i < kMaxVms; ++i) checkReference(s, i);
  VmRec& first = s.vms[0];
  if (first.vm && first.ref && !first.broken && !fresh()) {
    for (const HandleRec& r : s.handles)
      if (r.vm == 0 && r.valid) dlam_release(first.vm, r.h);
    kept = first;
    first = VmRec{};
  }
  for (int i = 0; i < kMaxVms; ++i)
    if (s.vms[i].vm) dlam_free(s.vms[i].vm);
  // The NULL VM: every function fails cleanly.
  if (dlam_eval(nullptr, "1", nullptr, nullptr) != DLAM_ERR_API) fail("dlam_eval(NULL)");
  current = nullptr;
  return 0;
}

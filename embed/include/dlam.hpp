// dlam.hpp — a thin C++ wrapper of the C API (dlam.h): RAII and exceptions.
//
//   dlam::Vm vm;                                   // dlam_new(NULL)
//   vm.eval("(define (f x y) (* x (sin y)))");
//   dlam::Val f = vm.global("f");                  // released when f goes out of scope
//   std::vector<double> g;
//   double y = vm.valueAndGradient(f, {2, 0}, g);  // y = 0, g = {0, 2}
//   double z = f(3.0, 1.0).number();               // calls f
//
// Errors throw dlam::Exception (status() and what() = dlam_last_error). Exceptions
// exist only on this side: the library itself is C and never throws. Host functions
// registered through the wrapper are plain C callbacks; one that throws (a dlam::Exception
// from a nested call, or any other) fails its call with a runtime error naming it (dlam.h).
// A Val must not outlive the Vm it came from. Header-only; the C header is the contract.
#ifndef DLAM_HPP
#define DLAM_HPP

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dlam.h"

namespace dlam {

// Thrown by the wrapper when a C API call fails. (Not named Error: the library's
// internal namespace has a dlam::Error, and a static link must not see two.)
class Exception : public std::runtime_error {
 public:
  Exception(dlam_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  dlam_status status() const noexcept { return status_; }

 private:
  dlam_status status_;
};

namespace detail {
inline void check(dlam_vm* vm, dlam_status s) {
  if (s != DLAM_OK) throw Exception(s, dlam_last_error(vm));
}
inline dlam_val checkVal(dlam_vm* vm, dlam_val h) {
  if (!h) throw Exception(DLAM_ERR_RUNTIME, dlam_last_error(vm));
  return h;
}
}  // namespace detail

// An owned handle to a dlam value (released by the destructor). Copying duplicates the handle.
class Val {
 public:
  Val() noexcept = default;
  // Adopts the handle h of vm (which the Val will release).
  Val(dlam_vm* vm, dlam_val h) noexcept : vm_(vm), h_(h) {}
  ~Val() { reset(); }
  Val(Val&& o) noexcept : vm_(o.vm_), h_(std::exchange(o.h_, nullptr)) {}
  Val& operator=(Val&& o) noexcept {
    if (this != &o) {
      reset();
      vm_ = o.vm_;
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Val(const Val& o)
      : vm_(o.vm_), h_(o.h_ ? detail::checkVal(o.vm_, dlam_dup(o.vm_, o.h_)) : nullptr) {}
  Val& operator=(const Val& o) {
    if (this != &o) *this = Val(o);
    return *this;
  }

  void reset() noexcept {
    if (h_) dlam_release(vm_, h_);
    h_ = nullptr;
  }
  dlam_val get() const noexcept { return h_; }
  dlam_vm* vm() const noexcept { return vm_; }
  // Gives up ownership: the caller must dlam_release the handle.
  dlam_val release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  double number() const {
    double x = 0;
    detail::check(vm_, dlam_to_number(vm_, h_, &x));
    return x;
  }
  std::vector<double> numbers() const {
    size_t n = 0;
    dlam_status s = dlam_to_numbers(vm_, h_, nullptr, 0, &n);
    if (s != DLAM_OK && s != DLAM_ERR_API) detail::check(vm_, s);
    std::vector<double> out(n);
    detail::check(vm_, dlam_to_numbers(vm_, h_, out.data(), out.size(), &n));
    return out;
  }

  // Calls the procedure with the given arguments (Vals or numbers).
  Val call(const std::vector<Val>& args) const {
    std::vector<dlam_val> hs;
    hs.reserve(args.size());
    for (const Val& a : args) hs.push_back(a.get());
    dlam_val r = nullptr;
    detail::check(vm_, dlam_call(vm_, h_, static_cast<int>(hs.size()), hs.data(), &r));
    return Val(vm_, r);
  }
  template <class... Args>
  Val operator()(Args&&... args) const {
    return call(std::vector<Val>{arg(std::forward<Args>(args))...});
  }

 private:
  Val arg(const Val& v) const { return v; }
  Val arg(double x) const { return Val(vm_, detail::checkVal(vm_, dlam_number(vm_, x))); }

  dlam_vm* vm_ = nullptr;
  dlam_val h_ = nullptr;
};

// An owned VM (dlam_free in the destructor). Movable, not copyable.
class Vm {
 public:
  // Defaults, or the Lua configuration file at config_path. Throws dlam::Exception
  // (DLAM_ERR_CONFIG for a bad configuration, DLAM_ERR_LIMIT when out of memory).
  explicit Vm(const char* config_path = nullptr) : vm_(dlam_new(config_path)) { checkMade(); }
  explicit Vm(const std::string& config_path) : Vm(config_path.c_str()) {}
  // A VM with the settings of cfg (dlam_new_with); a bad setting throws DLAM_ERR_CONFIG.
  explicit Vm(const dlam_config& cfg) : vm_(dlam_new_with(&cfg)) { checkMade(); }
  ~Vm() { dlam_free(vm_); }
  Vm(Vm&& o) noexcept : vm_(std::exchange(o.vm_, nullptr)) {}
  Vm& operator=(Vm&& o) noexcept {
    if (this != &o) {
      dlam_free(vm_);
      vm_ = std::exchange(o.vm_, nullptr);
    }
    return *this;
  }
  Vm(const Vm&) = delete;
  Vm& operator=(const Vm&) = delete;

  dlam_vm* get() const noexcept { return vm_; }

  // The value of the last form of source.
  Val eval(const std::string& source, const std::string& chunk = "<eval>") {
    dlam_val r = nullptr;
    detail::check(vm_, dlam_eval(vm_, source.c_str(), chunk.c_str(), &r));
    return Val(vm_, r);
  }
  Val runFile(const std::string& path) {
    dlam_val r = nullptr;
    detail::check(vm_, dlam_run_file(vm_, path.c_str(), &r));
    return Val(vm_, r);
  }
  // An empty Val if the global is undefined.
  Val global(const std::string& name) {
    dlam_val h = dlam_get_global(vm_, name.c_str());
    if (!h && dlam_last_error(vm_)[0] != '\0') throw Exception(DLAM_ERR_API, dlam_last_error(vm_));
    return Val(vm_, h);
  }
  void setGlobal(const std::string& name, const Val& v) {
    detail::check(vm_, dlam_set_global(vm_, name.c_str(), v.get()));
  }
  Val number(double x) { return Val(vm_, detail::checkVal(vm_, dlam_number(vm_, x))); }
  Val list(const std::vector<double>& xs) {
    return Val(vm_, detail::checkVal(vm_, dlam_list_of_numbers(vm_, xs.data(), xs.size())));
  }
  // Returns the value; gradient receives d fn / d x.
  double valueAndGradient(const Val& fn, const std::vector<double>& x,
                          std::vector<double>& gradient) {
    std::vector<double> g(x.size());
    double y = 0;
    detail::check(vm_, dlam_value_and_gradient(vm_, fn.get(), x.size(), x.data(), &y, g.data()));
    gradient = std::move(g);
    return y;
  }
  void registerFunction(const std::string& name, int arity, dlam_host_fn fn, void* ud = nullptr) {
    detail::check(vm_, dlam_register(vm_, name.c_str(), arity, fn, ud));
  }
  void registerNumeric(const std::string& name, int arity, dlam_numeric_fn fn,
                       dlam_numeric_vjp vjp = nullptr, void* ud = nullptr) {
    detail::check(vm_, dlam_register_numeric(vm_, name.c_str(), arity, fn, vjp, ud));
  }
  // Thread-safe (see dlam_interrupt).
  void interrupt() noexcept { dlam_interrupt(vm_); }
  // The status of the last (exit [status]): a call whose code ran it threw an Exception
  // with status DLAM_EXIT (see dlam_exit_code).
  int exitCode() const noexcept { return dlam_exit_code(vm_); }

 private:
  // A VM that could not be made (out of memory, a bad configuration) throws.
  void checkMade() {
    if (!vm_) throw Exception(DLAM_ERR_LIMIT, "dlam_new: out of memory");
    const char* err = dlam_last_error(vm_);
    if (err[0] != '\0') {
      Exception e(DLAM_ERR_CONFIG, err);
      dlam_free(vm_);
      vm_ = nullptr;
      throw e;
    }
  }

  dlam_vm* vm_;
};

}  // namespace dlam

#endif  // DLAM_HPP

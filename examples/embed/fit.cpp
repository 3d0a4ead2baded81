// fit.cpp — a C++ host (dlam.hpp) fitting y = a tanh(b t) to data it makes, through a host
// function that brings its derivative, with the VM's output captured by the host.
//
// The VM is made from a dlam_config whose write callback collects what the script prints.
// The host registers `host-tanh` (std::tanh) with its vector-Jacobian product, hands dlam the
// data, and minimises the loss by gradient descent (Vm::valueAndGradient). It checks the fit
// and the captured output itself (exit status 0). Run by ctest as api.example_fit_cpp.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dlam.hpp"

int main() {
  std::vector<double> ts, ys;
  for (int i = 0; i <= 20; ++i) {
    ts.push_back(-1 + i / 10.0);
    ys.push_back(1.5 * std::tanh(2.0 * ts.back()));  // the data: a = 1.5, b = 2
  }
  std::string printed;
  dlam_config cfg;
  dlam_config_init(&cfg);
  cfg.heap_limit_mb = 64;
  cfg.write = [](void* ud, int, const char* bytes, size_t n) {
    static_cast<std::string*>(ud)->append(bytes, n);
  };
  cfg.write_ud = &printed;
  try {
    dlam::Vm vm(cfg);
    vm.registerNumeric(
        "host-tanh", 1, [](const double* x, void*) { return std::tanh(x[0]); },
        [](const double* x, double ybar, double* xbar, void*) {
          double t = std::tanh(x[0]);
          xbar[0] = ybar * (1 - t * t);
        });
    vm.setGlobal("ts", vm.list(ts));
    vm.setGlobal("ys", vm.list(ys));
    vm.eval(
        "(define (loss a b)\n"
        "  (fold-left + 0 (map (lambda (t y) (let ((r (- (* a (host-tanh (* b t))) y))) (* r r)))\n"
        "                      ts ys)))\n",
        "fit");
    dlam::Val loss = vm.global("loss");
    std::vector<double> p{1, 1}, g;
    double value = 0;
    for (int step = 0; step < 4000; ++step) {
      value = vm.valueAndGradient(loss, p, g);
      p[0] -= 0.02 * g[0];
      p[1] -= 0.02 * g[1];
    }
    vm.eval("(display \"fitted\")");
    std::printf("a = %.4f, b = %.4f, loss = %.2e; the script printed \"%s\"\n", p[0], p[1], value,
                printed.c_str());
    return std::fabs(p[0] - 1.5) < 1e-3 && std::fabs(p[1] - 2) < 1e-3 && printed == "fitted" ? 0
                                                                                             : 1;
  } catch (const dlam::Exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

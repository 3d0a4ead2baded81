// The logistic map x <- r x (1 - x) iterated N times from x = 0.5, as a function of r
// (bench/dlam/logistic.dlam), at r = 3.2. Usage: logistic MODE N REPS, MODE = f |
// derivative | grad. f prints the value; derivative (forward mode: the map on a dual
// number r + ε) and grad (reverse mode by hand: the forward sweep stores each x_k, the
// backward sweep runs the chain rule down them) print "value derivative".
#include "common.h"

namespace {

using bench::Dual;

// The map on doubles (f), or on dual numbers r + ε (derivative).
template <class T>
T logistic(T r, long n) {
  T x = 0.5;
  for (long k = 0; k < n; ++k) x = r * x * (T(1) - x);
  return x;
}

// The adjoint of x_N is 1; going down, r̄ += x̄ x_k (1 - x_k), x̄ <- x̄ r (1 - 2 x_k).
double logisticGrad(double r, long n, std::vector<double>& tape) {
  double x = 0.5;
  for (long k = 0; k < n; ++k) {
    tape[k] = x;
    x = r * x * (1 - x);
  }
  double xbar = 1, rbar = 0;
  for (long k = n; k-- > 0;) {
    double xk = tape[k];
    rbar += xbar * xk * (1 - xk);
    xbar *= r * (1 - 2 * xk);
  }
  return rbar;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | derivative | grad");
  const double r = 3.2;
  volatile double sink = 0;
  (void)sink;
  if (!std::strcmp(a.mode, "f")) {
    double y = 0;
    for (long k = 0; k < a.reps; ++k) {
      bench::clobber();
      y = logistic(r, a.n);
      sink = y;
    }
    std::printf("%.17g\n", y);
    return 0;
  }
  double d = 0;
  if (!std::strcmp(a.mode, "derivative")) {
    for (long k = 0; k < a.reps; ++k) {
      bench::clobber();
      d = logistic(Dual(r, 1), a.n).d;
      sink = d;
    }
  } else if (!std::strcmp(a.mode, "grad")) {
    std::vector<double> tape(a.n);
    for (long k = 0; k < a.reps; ++k) {
      bench::clobber();
      d = logisticGrad(r, a.n, tape);
      sink = d;
    }
  } else {
    return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  }
  bench::printResult(logistic(r, a.n), d);
}

// Hand-written extended Rosenbrock: value, gradient and Hessian-vector product.
//   f(x) = sum_{i=0}^{n-2} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2
// Usage: rosenbrock MODE N REPS, MODE = f | grad | hvp | dump.  Repeats the computation
// REPS times (run.py times REPS and 1 and divides the difference), then prints
// "f" (MODE f) or "f checksum" (grad: of the gradient, hvp: of H v); dump: the
// gradient's, then f and every gradient element, one a line (for checking others).
#include "common.h"

static double rosen(const double* x, long n) {
  double acc = 0;
  for (long i = 0; i + 1 < n; ++i) {
    double t = x[i + 1] - x[i] * x[i], u = 1 - x[i];
    acc = acc + 100 * (t * t) + u * u;
  }
  return acc;
}

static void rosenGrad(const double* x, long n, double* g) {
  for (long i = 0; i < n; ++i) g[i] = 0;
  for (long i = 0; i + 1 < n; ++i) {
    double t = x[i + 1] - x[i] * x[i], u = 1 - x[i];
    g[i] += -400 * x[i] * t - 2 * u;
    g[i + 1] += 200 * t;
  }
}

// H is tridiagonal: H_ii = [i<n-1](1200 x_i^2 - 400 x_{i+1} + 2) + [i>0] 200,
// H_{i,i+1} = H_{i+1,i} = -400 x_i.
static void rosenHvp(const double* x, const double* v, long n, double* hv) {
  for (long i = 0; i < n; ++i) hv[i] = 0;
  for (long i = 0; i + 1 < n; ++i) {
    double d = 1200 * x[i] * x[i] - 400 * x[i + 1] + 2, o = -400 * x[i];
    hv[i] += d * v[i] + o * v[i + 1];
    hv[i + 1] += o * v[i] + 200 * v[i + 1];
  }
}

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | grad | hvp | dump");
  std::vector<double> x = bench::rosenX(a.n), v = bench::hvpV(a.n), out(a.n);
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "f")) {
    double y = 0;
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      y = rosen(x.data(), a.n);
      sink = y;
    }
    std::printf("%.17g\n", y);
    return 0;
  }
  bool hvp = !std::strcmp(a.mode, "hvp"), dump = !std::strcmp(a.mode, "dump");
  if (!hvp && !dump && std::strcmp(a.mode, "grad"))
    return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  for (long r = 0; r < a.reps; ++r) {
    bench::clobber();
    if (hvp)
      rosenHvp(x.data(), v.data(), a.n, out.data());
    else
      rosenGrad(x.data(), a.n, out.data());
    sink = out[0];
  }
  (void)sink;
  if (dump) {
    std::printf("%.17g\n", rosen(x.data(), a.n));
    for (long i = 0; i < a.n; ++i) std::printf("%.17g\n", out[i]);
    return 0;
  }
  bench::printResult(rosen(x.data(), a.n), bench::checksum(out.data(), a.n));
}

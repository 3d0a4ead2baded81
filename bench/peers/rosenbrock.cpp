// Hand-written extended Rosenbrock: value, gradient, Hessian-vector product, Hessian and
// directional derivative.
//   f(x) = sum_{i=0}^{n-2} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2
// Usage: rosenbrock MODE N REPS, MODE = f | grad | hvp | hvp-dual | hessian | jvp | dump.
// Repeats the computation REPS times (run.py times REPS and 1 and divides the
// difference), then prints "f" (MODE f), "f checksum" (grad: of the gradient; hvp and
// hvp-dual: of H v; hessian: the checksum of the rows' checksums, as
// bench/dlam/rosenbrock.dlam), or "f jvp" (jvp: the derivative along v). hvp is the
// tridiagonal H v written out by hand; hvp-dual is forward over reverse done by the
// compiler: the hand gradient run on dual numbers x + εv (the hyperdual way), jvp the
// function on dual numbers. dump: f and every gradient element, one a line.
#include "common.h"

using bench::Dual;

template <class T>
static T rosen(const T* x, long n) {
  T acc = 0;
  for (long i = 0; i + 1 < n; ++i) {
    T t = x[i + 1] - x[i] * x[i], u = T(1) - x[i];
    acc = acc + T(100) * (t * t) + u * u;
  }
  return acc;
}

template <class T>
static void rosenGrad(const T* x, long n, T* g) {
  for (long i = 0; i < n; ++i) g[i] = 0;
  for (long i = 0; i + 1 < n; ++i) {
    T t = x[i + 1] - x[i] * x[i], u = T(1) - x[i];
    g[i] += T(-400) * x[i] * t - T(2) * u;
    g[i + 1] += T(200) * t;
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

// The dense n x n Hessian, row-major, from the formulas above.
static void rosenHessian(const double* x, long n, double* h) {
  for (long k = 0; k < n * n; ++k) h[k] = 0;
  for (long i = 0; i + 1 < n; ++i) {
    h[i * n + i] += 1200 * x[i] * x[i] - 400 * x[i + 1] + 2;
    h[(i + 1) * n + i + 1] += 200;
    h[i * n + i + 1] = h[(i + 1) * n + i] = -400 * x[i];
  }
}

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | grad | hvp | hvp-dual | hessian | jvp | dump");
  std::vector<double> x = bench::rosenX(a.n), v = bench::hvpV(a.n), out(a.n);
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "jvp") || !std::strcmp(a.mode, "hvp-dual")) {
    bool jvp = a.mode[0] == 'j';
    std::vector<Dual> xd(a.n), gd(a.n);
    for (long i = 0; i < a.n; ++i) xd[i] = Dual(x[i], v[i]);
    Dual y;
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      if (jvp) {
        y = rosen(xd.data(), a.n);
        sink = y.d;
      } else {
        rosenGrad(xd.data(), a.n, gd.data());
        sink = gd[0].d;
      }
    }
    if (jvp) return bench::printResult(y.v, y.d), 0;
    for (long i = 0; i < a.n; ++i) out[i] = gd[i].d;
    bench::printResult(rosen(x.data(), a.n), bench::checksum(out.data(), a.n));
    return 0;
  }
  if (!std::strcmp(a.mode, "hessian")) {
    std::vector<double> h(a.n * a.n);
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      rosenHessian(x.data(), a.n, h.data());
      sink = h[0];
    }
    for (long i = 0; i < a.n; ++i) out[i] = bench::checksum(&h[i * a.n], a.n);
    bench::printResult(rosen(x.data(), a.n), bench::checksum(out.data(), a.n));
    return 0;
  }
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

// Extended Rosenbrock written the way NumPy evaluates it: one loop per array operation,
// each writing a freshly allocated temporary, as bench/dlam/rosen-array.dlam and
// bench/python/rosen_array_torch.py compute it (the fused hand loop is rosenbrock.cpp):
//   f(x) = sum_{i=0}^{n-2} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2
// at x_i = 0.5 + 0.001 (i mod 1000). Slices are views, as NumPy's basic slices are (no
// copy); every other operation allocates its result (std::vector<double>). The gradient
// is reverse mode written the same way, as an array library's autograd runs it: the
// forward pass keeps its temporaries, then each operation's reverse rule is again whole-
// array operations with temporaries (t*t gives g*t to each factor, the two summed; a
// slice's reverse adds, in place, into a zero array of x's size).
// Usage: rosen_array MODE N REPS, MODE = f | grad; prints "f" or "f checksum".
#include <malloc.h>

#include "common.h"

namespace {

using Vec = std::vector<double>;

// A view of n doubles (a slice): what NumPy's x[1:] and x[:-1] are.
struct View {
  const double* p;
  long n;
};

View view(const Vec& v) { return {v.data(), static_cast<long>(v.size())}; }

template <class F>
Vec map2(View a, View b, F f) {
  Vec r(a.n);
  for (long i = 0; i < a.n; ++i) r[i] = f(a.p[i], b.p[i]);
  return r;
}

template <class F>
Vec map1(View a, F f) {
  Vec r(a.n);
  for (long i = 0; i < a.n; ++i) r[i] = f(a.p[i]);
  return r;
}

Vec add(View a, View b) {
  return map2(a, b, [](double x, double y) { return x + y; });
}
Vec sub(View a, View b) {
  return map2(a, b, [](double x, double y) { return x - y; });
}
Vec mul(View a, View b) {
  return map2(a, b, [](double x, double y) { return x * y; });
}
Vec scale(double k, View a) {
  return map1(a, [k](double x) { return k * x; });
}
Vec rsub(double k, View a) {
  return map1(a, [k](double x) { return k - x; });
}
Vec neg(View a) {
  return map1(a, [](double x) { return -x; });
}
double sum(View a) {
  double s = 0;
  for (long i = 0; i < a.n; ++i) s += a.p[i];
  return s;
}

// The forward pass, its temporaries kept for the reverse one.
struct Forward {
  View a, x1;     // x[:-1], x[1:]
  Vec sq, t, u;   // a*a, x1 - sq, 1 - a
  Vec tt, h, uu;  // t*t, 100*tt, u*u
  Vec s;          // h + uu
  double f;
};

Forward forward(const Vec& x) {
  long n = static_cast<long>(x.size());
  Forward r;
  r.a = {x.data(), n - 1};
  r.x1 = {x.data() + 1, n - 1};
  r.sq = mul(r.a, r.a);
  r.t = sub(r.x1, view(r.sq));
  r.u = rsub(1, r.a);
  r.tt = mul(view(r.t), view(r.t));
  r.h = scale(100, view(r.tt));
  r.uu = mul(view(r.u), view(r.u));
  r.s = add(view(r.h), view(r.uu));
  r.f = sum(view(r.s));
  return r;
}

// The gradient: each forward operation's reverse, last to first.
Vec gradient(const Vec& x, double& f) {
  long n = static_cast<long>(x.size());
  Forward fw = forward(x);
  f = fw.f;
  Vec gs(n - 1, 1.0);                  // sum: the seed broadcast
  View gh = view(gs), guu = view(gs);  // s = h + uu: the same array to both
  Vec mu = mul(guu, view(fw.u));       // uu = u*u
  Vec gu = add(view(mu), view(mu));
  Vec gtt = scale(100, gh);             // h = 100 tt
  Vec mt = mul(view(gtt), view(fw.t));  // tt = t*t
  Vec gt = add(view(mt), view(mt));
  Vec gsq = neg(view(gt));        // t = x1 - sq
  Vec ma = mul(view(gsq), fw.a);  // sq = a*a
  Vec gaSq = add(view(ma), view(ma));
  Vec gaU = neg(view(gu));  // u = 1 - a
  Vec ga = add(view(gaSq), view(gaU));
  Vec g(n, 0.0);  // the slices: g[:-1] += ga; g[1:] += gt (NumPy adds in place)
  for (long i = 0; i < n - 1; ++i) g[i] += ga[i];
  for (long i = 0; i < n - 1; ++i) g[i + 1] += gt[i];
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | grad");
  // Freed temporaries stay in the process for the next ones (as in dlam's arena), not
  // given back to the kernel and faulted in again, zeroed, at each operation: glibc
  // serves 8 MB blocks with mmap and trims its heap by default, which made the
  // evaluation (all its temporaries freed at the end) slower than the gradient.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  Vec x = bench::rosenX(a.n);
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "f")) {
    double y = 0;
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      y = forward(x).f;
      sink = y;
    }
    std::printf("%.17g\n", y);
    return 0;
  }
  if (std::strcmp(a.mode, "grad")) return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  Vec g;
  double f = 0;
  for (long r = 0; r < a.reps; ++r) {
    bench::clobber();
    g = gradient(x, f);
    sink = g[0];
  }
  (void)sink;
  bench::printResult(f, bench::checksum(g.data(), a.n));
}

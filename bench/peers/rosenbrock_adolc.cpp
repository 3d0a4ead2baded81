// Extended Rosenbrock differentiated by ADOL-C (operator overloading on a tape).
// Usage: rosenbrock_adolc MODE N REPS, MODE =
//   tape    -- retape every call: trace_on, evaluate on adoubles, trace_off, gradient()
//   replay  -- record the tape once, then gradient() REPS times (the recording is in
//              every run, so run.py's REPS-minus-1 difference cancels it)
//   hvp     -- record once, hess_vec() REPS times (second order on the same tape)
// Runs in the temporary directory, where ADOL-C would put tape files too large for
// its memory buffers.
// Prints "f checksum" like bench/peers/rosenbrock.cpp.
#include <adolc/adolc.h>

#include "common.h"

template <class T>
static T rosen(const T* x, long n) {
  T acc = 0;
  for (long i = 0; i + 1 < n; ++i) {
    T t = x[i + 1] - x[i] * x[i], u = 1 - x[i];
    acc = acc + 100 * (t * t) + u * u;
  }
  return acc;
}

static double record(short tag, const std::vector<double>& x) {
  long n = static_cast<long>(x.size());
  double y = 0;
  trace_on(tag);
  {
    std::vector<adouble> ax(n);
    for (long i = 0; i < n; ++i) ax[i] <<= x[i];
    adouble ay = rosen(ax.data(), n);
    ay >>= y;
  }
  trace_off();
  return y;
}

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "tape | replay | hvp");
  bench::toTempDir();
  std::vector<double> x = bench::rosenX(a.n), v = bench::hvpV(a.n), out(a.n);
  const short tag = 1;
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "tape")) {
    for (long r = 0; r < a.reps; ++r) {
      record(tag, x);
      gradient(tag, static_cast<int>(a.n), x.data(), out.data());
      sink = out[0];
    }
  } else if (!std::strcmp(a.mode, "replay") || !std::strcmp(a.mode, "hvp")) {
    bool hvp = a.mode[0] == 'h';
    record(tag, x);
    for (long r = 0; r < a.reps; ++r) {
      if (hvp)
        hess_vec(tag, static_cast<int>(a.n), x.data(), v.data(), out.data());
      else
        gradient(tag, static_cast<int>(a.n), x.data(), out.data());
      sink = out[0];
    }
  } else {
    return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  }
  (void)sink;
  bench::printResult(rosen(x.data(), a.n), bench::checksum(out.data(), a.n));
}

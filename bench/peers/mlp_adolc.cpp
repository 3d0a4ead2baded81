// MLP 2-16-16-1 loss (as bench/peers/mlp.cpp) differentiated by ADOL-C.
// Usage: mlp_adolc MODE N REPS (N ignored), MODE =
//   tape    -- retape every call: trace_on, evaluate on adoubles, trace_off, gradient()
//   replay  -- record once, gradient() REPS times
// Prints "loss checksum".
#include <adolc/adolc.h>

#include "common.h"

using bench::kH;
using bench::kIn;
using bench::kSamples;
using bench::kWeights;

constexpr int kL1 = 0, kL2 = kH * (kIn + 1), kL3 = kL2 + kH * (kH + 1);

template <class T>
static T loss(const T* w, const bench::MlpData& d) {
  T acc = 0;
  for (int k = 0; k < kSamples; ++k) {
    const double* x = &d.x[2 * k];
    T h1[kH], h2[kH];
    for (int j = 0; j < kH; ++j) {
      const T* wj = w + kL1 + j * (kIn + 1);
      T s = 0;
      for (int i = 0; i < kIn; ++i) s = s + wj[i] * x[i];
      h1[j] = tanh(s + wj[kIn]);
    }
    for (int j = 0; j < kH; ++j) {
      const T* wj = w + kL2 + j * (kH + 1);
      T s = 0;
      for (int i = 0; i < kH; ++i) s = s + wj[i] * h1[i];
      h2[j] = tanh(s + wj[kH]);
    }
    T s = 0;
    for (int i = 0; i < kH; ++i) s = s + w[kL3 + i] * h2[i];
    T e = (s + w[kL3 + kH]) - d.t[k];
    acc = acc + e * e;
  }
  return acc / kSamples;
}

static double record(short tag, const std::vector<double>& w, const bench::MlpData& d) {
  double y = 0;
  trace_on(tag);
  {
    std::vector<adouble> aw(kWeights);
    for (int i = 0; i < kWeights; ++i) aw[i] <<= w[i];
    adouble ay = loss(aw.data(), d);
    ay >>= y;
  }
  trace_off();
  return y;
}

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "tape | replay");
  bench::toTempDir();
  bench::MlpData d = bench::mlpData();
  std::vector<double> g(kWeights);
  const short tag = 2;
  volatile double sink = 0;
  bool tape = !std::strcmp(a.mode, "tape");
  if (!tape && std::strcmp(a.mode, "replay"))
    return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  if (!tape) record(tag, d.w, d);
  for (long r = 0; r < a.reps; ++r) {
    if (tape) record(tag, d.w, d);
    gradient(tag, kWeights, d.w.data(), g.data());
    sink = g[0];
  }
  (void)sink;
  bench::printResult(loss(d.w.data(), d), bench::checksum(g.data(), kWeights));
}

// Hand-written MLP 2-16-16-1 (tanh, tanh, linear), mean squared error over 256
// samples, gradient by hand-written backpropagation.  Data and weight layout:
// bench/peers/common.h.  Usage: mlp MODE N REPS, MODE = f | grad (N is ignored).
// Prints "loss" (f) or "loss checksum" (grad).
#include "common.h"

using bench::kH;
using bench::kIn;
using bench::kSamples;
using bench::kWeights;

// Offsets of the three layers in the flat weight vector.
constexpr int kL1 = 0, kL2 = kH * (kIn + 1), kL3 = kL2 + kH * (kH + 1);

static double loss(const double* w, const bench::MlpData& d) {
  double acc = 0;
  for (int k = 0; k < kSamples; ++k) {
    const double* x = &d.x[2 * k];
    double h1[kH], h2[kH];
    for (int j = 0; j < kH; ++j) {
      const double* wj = w + kL1 + j * (kIn + 1);
      double s = 0;
      for (int i = 0; i < kIn; ++i) s = s + wj[i] * x[i];
      h1[j] = std::tanh(s + wj[kIn]);
    }
    for (int j = 0; j < kH; ++j) {
      const double* wj = w + kL2 + j * (kH + 1);
      double s = 0;
      for (int i = 0; i < kH; ++i) s = s + wj[i] * h1[i];
      h2[j] = std::tanh(s + wj[kH]);
    }
    double s = 0;
    for (int i = 0; i < kH; ++i) s = s + w[kL3 + i] * h2[i];
    double e = (s + w[kL3 + kH]) - d.t[k];
    acc = acc + e * e;
  }
  return acc / kSamples;
}

static void lossGrad(const double* w, const bench::MlpData& d, double* g) {
  for (int i = 0; i < kWeights; ++i) g[i] = 0;
  for (int k = 0; k < kSamples; ++k) {
    const double* x = &d.x[2 * k];
    double h1[kH], h2[kH];
    for (int j = 0; j < kH; ++j) {
      const double* wj = w + kL1 + j * (kIn + 1);
      double s = 0;
      for (int i = 0; i < kIn; ++i) s = s + wj[i] * x[i];
      h1[j] = std::tanh(s + wj[kIn]);
    }
    for (int j = 0; j < kH; ++j) {
      const double* wj = w + kL2 + j * (kH + 1);
      double s = 0;
      for (int i = 0; i < kH; ++i) s = s + wj[i] * h1[i];
      h2[j] = std::tanh(s + wj[kH]);
    }
    double s = 0;
    for (int i = 0; i < kH; ++i) s = s + w[kL3 + i] * h2[i];
    double e = (s + w[kL3 + kH]) - d.t[k];
    // backward
    double dy = 2 * e / kSamples;
    double dh2[kH], dh1[kH] = {0};
    for (int i = 0; i < kH; ++i) {
      g[kL3 + i] += dy * h2[i];
      dh2[i] = dy * w[kL3 + i];
    }
    g[kL3 + kH] += dy;
    for (int j = 0; j < kH; ++j) {
      double dz = dh2[j] * (1 - h2[j] * h2[j]);
      double* gj = g + kL2 + j * (kH + 1);
      const double* wj = w + kL2 + j * (kH + 1);
      for (int i = 0; i < kH; ++i) {
        gj[i] += dz * h1[i];
        dh1[i] += dz * wj[i];
      }
      gj[kH] += dz;
    }
    for (int j = 0; j < kH; ++j) {
      double dz = dh1[j] * (1 - h1[j] * h1[j]);
      double* gj = g + kL1 + j * (kIn + 1);
      for (int i = 0; i < kIn; ++i) gj[i] += dz * x[i];
      gj[kIn] += dz;
    }
  }
}

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | grad");
  bench::MlpData d = bench::mlpData();
  std::vector<double> g(kWeights);
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "f")) {
    double y = 0;
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      y = loss(d.w.data(), d);
      sink = y;
    }
    std::printf("%.17g\n", y);
    return 0;
  }
  if (std::strcmp(a.mode, "grad")) return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  for (long r = 0; r < a.reps; ++r) {
    bench::clobber();
    lossGrad(d.w.data(), d, g.data());
    sink = g[0];
  }
  (void)sink;
  bench::printResult(loss(d.w.data(), d), bench::checksum(g.data(), kWeights));
}

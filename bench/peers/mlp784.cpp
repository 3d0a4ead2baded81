// Hand-written MLP 784-128-10 over a batch of 128: h = tanh(X W1 + b1), z = h W2 + b2,
// loss = (sum_b logsumexp(z_b) - sum_b z_b[label_b]) / 128 (softmax cross-entropy), and
// its gradient with respect to W1, b1, W2, b2 by hand-written backpropagation over whole
// matrices.  The three matrix products of a pass go through cblas_dgemm of OpenBLAS's
// serial build, the BLAS that dlam's `dot` calls; the rest is loops.  Data:
// bench/peers/common.h (mlp784Data).
// Usage: mlp784 MODE N REPS (N ignored), MODE = f | grad | dump.  Prints "loss" (f),
// "loss checksum" (grad; the checksum over W1, b1, W2, b2 flattened in that order), or
// (dump) the loss and then every gradient element, one a line.
#include <cblas.h>

#include <algorithm>

#include "common.h"

using bench::kBatch;
using bench::kCls;
using bench::kHid;
using bench::kImg;

namespace {

struct Work {
  std::vector<double> h = std::vector<double>(kBatch * kHid);  // hidden activations
  std::vector<double> z = std::vector<double>(kBatch * kCls);  // logits
  std::vector<double> dz = std::vector<double>(kBatch * kCls);
  std::vector<double> dh = std::vector<double>(kBatch * kHid);
};

// C (m n) = A (m k) B (k n), row-major, optionally transposing A or B.
void gemm(bool ta, bool tb, int m, int n, int k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0, a, ta ? m : k, b, tb ? k : n, 0.0, c, n);
}

void forward(const bench::Mlp784Data& d, Work& w) {
  gemm(false, false, kBatch, kHid, kImg, d.x.data(), d.w1.data(), w.h.data());
  for (int b = 0; b < kBatch; ++b)
    for (int j = 0; j < kHid; ++j) w.h[b * kHid + j] = std::tanh(w.h[b * kHid + j] + d.b1[j]);
  gemm(false, false, kBatch, kCls, kHid, w.h.data(), d.w2.data(), w.z.data());
  for (int b = 0; b < kBatch; ++b)
    for (int c = 0; c < kCls; ++c) w.z[b * kCls + c] += d.b2[c];
}

// logsumexp of one row of logits, the maximum subtracted first.
double logsumexp(const double* z) {
  double m = z[0];
  for (int c = 1; c < kCls; ++c) m = std::max(m, z[c]);
  double s = 0;
  for (int c = 0; c < kCls; ++c) s += std::exp(z[c] - m);
  return m + std::log(s);
}

double lossFromLogits(const bench::Mlp784Data& d, const Work& w) {
  double lse = 0, picked = 0;
  for (int b = 0; b < kBatch; ++b) {
    lse += logsumexp(&w.z[b * kCls]);
    picked += w.z[b * kCls + d.label[b]];
  }
  return (lse - picked) / kBatch;
}

double loss(const bench::Mlp784Data& d, Work& w) {
  forward(d, w);
  return lossFromLogits(d, w);
}

// g: W1, b1, W2, b2 flattened (kImg*kHid + kHid + kHid*kCls + kCls).
void lossGrad(const bench::Mlp784Data& d, Work& w, double* g) {
  double* gw1 = g;
  double* gb1 = gw1 + kImg * kHid;
  double* gw2 = gb1 + kHid;
  double* gb2 = gw2 + kHid * kCls;
  forward(d, w);
  // dz = (softmax(z) - onehot(label)) / batch
  for (int b = 0; b < kBatch; ++b) {
    const double* z = &w.z[b * kCls];
    double l = logsumexp(z);
    for (int c = 0; c < kCls; ++c)
      w.dz[b * kCls + c] = (std::exp(z[c] - l) - (c == d.label[b] ? 1.0 : 0.0)) / kBatch;
  }
  gemm(true, false, kHid, kCls, kBatch, w.h.data(), w.dz.data(), gw2);  // h^T dz
  for (int c = 0; c < kCls; ++c) gb2[c] = 0;
  for (int b = 0; b < kBatch; ++b)
    for (int c = 0; c < kCls; ++c) gb2[c] += w.dz[b * kCls + c];
  gemm(false, true, kBatch, kHid, kCls, w.dz.data(), d.w2.data(), w.dh.data());  // dz W2^T
  for (int j = 0; j < kHid; ++j) gb1[j] = 0;
  for (int b = 0; b < kBatch; ++b)
    for (int j = 0; j < kHid; ++j) {
      double hj = w.h[b * kHid + j];
      double da = w.dh[b * kHid + j] * (1 - hj * hj);
      w.dh[b * kHid + j] = da;
      gb1[j] += da;
    }
  gemm(true, false, kImg, kHid, kBatch, d.x.data(), w.dh.data(), gw1);  // X^T da
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args a = bench::parseArgs(argc, argv, "f | grad | dump");
  bench::Mlp784Data d = bench::mlp784Data();
  Work w;
  constexpr long kN = kImg * kHid + kHid + kHid * kCls + kCls;  // 101770
  std::vector<double> g(kN);
  volatile double sink = 0;
  if (!std::strcmp(a.mode, "f")) {
    double y = 0;
    for (long r = 0; r < a.reps; ++r) {
      bench::clobber();
      y = loss(d, w);
      sink = y;
    }
    std::printf("%.17g\n", y);
    return 0;
  }
  bool dump = !std::strcmp(a.mode, "dump");
  if (!dump && std::strcmp(a.mode, "grad")) return std::fprintf(stderr, "bad mode %s\n", a.mode), 2;
  for (long r = 0; r < a.reps; ++r) {
    bench::clobber();
    lossGrad(d, w, g.data());
    sink = g[0];
  }
  (void)sink;
  if (dump) {
    std::printf("%.17g\n", loss(d, w));
    for (long i = 0; i < kN; ++i) std::printf("%.17g\n", g[i]);
    return 0;
  }
  bench::printResult(loss(d, w), bench::checksum(g.data(), kN));
}

// Shared set-up for the gradient benchmark peers (bench/peers/*.cpp).
// Every implementation (dlam, C++, ADOL-C, PyTorch, Lua) builds the same inputs
// the same way and prints the same checksums; see bench/README.md, "gradients".
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace bench {

// Command line of every peer: PROG MODE N REPS.
struct Args {
  const char* mode;
  long n;
  long reps;
};

inline Args parseArgs(int argc, char** argv, const char* modes) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODE N REPS   (MODE: %s)\n", argv[0], modes);
    std::exit(2);
  }
  return Args{argv[1], std::atol(argv[2]), std::atol(argv[3])};
}

// Rosenbrock input: x_i = 0.5 + 0.001 * (i mod 1000).
inline std::vector<double> rosenX(long n) {
  std::vector<double> x(n);
  for (long i = 0; i < n; ++i) x[i] = 0.5 + 0.001 * static_cast<double>(i % 1000);
  return x;
}

// Direction of the Hessian-vector product: v_i = 1 - 0.01 * (i mod 7).
inline std::vector<double> hvpV(long n) {
  std::vector<double> v(n);
  for (long i = 0; i < n; ++i) v[i] = 1.0 - 0.01 * static_cast<double>(i % 7);
  return v;
}

// Checksum of a gradient (or any vector): sum_i g_i * (1 + (i mod 7)), left to right.
inline double checksum(const double* g, long n) {
  double c = 0;
  for (long i = 0; i < n; ++i) c += g[i] * static_cast<double>(1 + i % 7);
  return c;
}

// Park-Miller LCG: s <- 16807 s mod (2^31 - 1); u = s / (2^31 - 1).  Exact in
// doubles (16807 s < 2^46), so every language draws the same numbers.
struct Lcg {
  double s = 42;
  double next() {
    const double m = 2147483647.0;
    double p = s * 16807.0;
    s = p - m * std::floor(p / m);
    return s / m;
  }
};

// MLP 2-16-16-1: per unit, its input weights then its bias, layer after layer.
constexpr int kIn = 2, kH = 16, kSamples = 256;
constexpr int kWeights = kH * (kIn + 1) + kH * (kH + 1) + (kH + 1);  // 337

struct MlpData {
  std::vector<double> w;  // kWeights, in [-0.5, 0.5)
  std::vector<double> x;  // kSamples * 2, in [-1, 1)
  std::vector<double> t;  // kSamples targets: sin(2 x0) cos(x1)
};

inline MlpData mlpData() {
  MlpData d;
  Lcg r;
  for (int i = 0; i < kWeights; ++i) d.w.push_back(r.next() - 0.5);
  for (int k = 0; k < kSamples; ++k) {
    double x0 = 2 * r.next() - 1;
    double x1 = 2 * r.next() - 1;
    d.x.push_back(x0);
    d.x.push_back(x1);
    d.t.push_back(std::sin(2 * x0) * std::cos(x1));
  }
  return d;
}

// MLP 784-128-10 (bench/peers/mlp784.cpp, dlam/mlp-784.dlam, python/mlp_784_torch.py):
// tanh hidden layer, softmax cross-entropy over a batch of 128.  The inputs and weights
// come from one formula in every language, exact in doubles: with k the row-major
// index into the array and q(k, a, m) = ((k a) mod m) / m,
//   W1 (784 128) = 0.1 (q(k, 37, 1009) - 0.5),   b1 (128) = 0.01 ((j mod 7) - 3),
//   W2 (128 10)  = 0.2 (q(k, 53, 1013) - 0.5),   b2 (10)  = 0.02 ((c mod 5) - 2),
//   X (128 784)  = ((97 k) mod 256) / 255,       label of sample b = (7 b + 3) mod 10.
constexpr int kImg = 784, kHid = 128, kCls = 10, kBatch = 128;

inline double modq(long k, long a, long m) {
  return static_cast<double>((k * a) % m) / static_cast<double>(m);
}

struct Mlp784Data {
  std::vector<double> w1, b1, w2, b2;  // (784 128), (128), (128 10), (10)
  std::vector<double> x;               // (128 784)
  std::vector<int> label;              // (128)
};

inline Mlp784Data mlp784Data() {
  Mlp784Data d;
  for (long k = 0; k < kImg * kHid; ++k) d.w1.push_back(0.1 * (modq(k, 37, 1009) - 0.5));
  for (long j = 0; j < kHid; ++j) d.b1.push_back(0.01 * static_cast<double>(j % 7 - 3));
  for (long k = 0; k < kHid * kCls; ++k) d.w2.push_back(0.2 * (modq(k, 53, 1013) - 0.5));
  for (long c = 0; c < kCls; ++c) d.b2.push_back(0.02 * static_cast<double>(c % 5 - 2));
  for (long k = 0; k < kBatch * kImg; ++k)
    d.x.push_back(static_cast<double>((97 * k) % 256) / 255.0);
  for (int b = 0; b < kBatch; ++b) d.label.push_back((7 * b + 3) % 10);
  return d;
}

// A dual number v + d ε (ε² = 0): forward mode by operator overloading (the
// forward-mode peers: rosenbrock.cpp's jvp and hvp-dual, logistic.cpp's derivative).
struct Dual {
  double v = 0, d = 0;
  Dual() = default;
  Dual(double value, double tangent = 0) : v(value), d(tangent) {}
};
inline Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
inline Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
inline Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
inline Dual& operator+=(Dual& a, Dual b) { return a = a + b; }

// Keeps the optimiser from dropping repeated pure computations.
inline void clobber() { asm volatile("" ::: "memory"); }

// ADOL-C writes tape files into the current directory when a tape outgrows its
// buffers: keep them out of bench/.
inline void toTempDir() {
  std::error_code ec;
  std::filesystem::current_path(std::filesystem::temp_directory_path(ec), ec);
}

inline void printResult(double value, double sum) { std::printf("%.17g %.17g\n", value, sum); }

}  // namespace bench

// exp for float, shared by the fused kernels (selective_scan.cpp, ssd_scan.cpp): Cody-Waite range
// reduction and a degree-6 polynomial (~1 ulp), written with plain arithmetic so that the channel loops
// vectorise.  sexp<T>: fexp for float, std::exp for double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dlmlab_kernels {

inline float fexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float k = (x * 1.44269504088896341f + magic) - magic;
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

template <typename T> inline T sexp(T x);
template <> inline float sexp<float>(float x) { return fexp(x); }
template <> inline double sexp<double>(double x) { return std::exp(x); }

}  // namespace dlmlab_kernels

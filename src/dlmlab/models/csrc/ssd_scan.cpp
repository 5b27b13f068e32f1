// Fused Mamba-2 (SSD) scan on CPU, forward and backward (see dlmlab/models/ssd_fused.py).
//
//   S_t = exp(dt_t A_h) S_{t-1} + B_t (dt_t x_t)^T,   y_t = S_t^T C_t + D_h x_t      (per batch b, head h)
//
// Shapes: x, y [Bs,T,H,P]; dt [Bs,T,H]; A, D [H]; B, C [Bs,T,G,N] (head h reads group h / (H/G));
// checkpoints hck [Bs,H,nck-1,P,N] (the state before every chunk-th step but the first, which is 0).  Work items are (batch,
// head) pairs; the state of one item is a local array, so [Bs,T,H,P,N] is never stored: [N][P] in
// the forward (vectorised over P: y_t needs no horizontal sums), [P][N] in the backward (vectorised
// over N: dB_t, dC_t need none).  The backward recomputes one chunk of states from its checkpoint
// and runs the adjoint recurrence in reverse time.  dB, dC are written per head and summed over the heads of a
// group afterwards, dA, dD per (batch, head) and summed over the batch afterwards, both in a
// fixed order: results do not depend on the number of threads.
#include "fast_exp.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace {

// GCC/Clang vector extension: one 64-byte vector of T (split into narrower registers where needed).
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(64)));
  static constexpr int L = 64 / sizeof(T);
};

template <typename V, typename T>
inline V vload(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <typename V, typename T>
inline void vstore(T* p, const V& v) { std::memcpy(p, &v, sizeof(V)); }

// Sum of the lanes of a 64-byte vector by halving (deterministic order).
template <typename T>
inline T hsum(const typename Vec<T>::type& v) {
  typedef T V32 __attribute__((vector_size(32)));
  typedef T V16 __attribute__((vector_size(16)));
  V32 a, b;
  std::memcpy(&a, &v, 32);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + 32, 32);
  a += b;
  V16 c, d;
  std::memcpy(&c, &a, 16);
  std::memcpy(&d, reinterpret_cast<const char*>(&a) + 16, 16);
  c += d;
  T r = c[0];
  for (int l = 1; l < int(16 / sizeof(T)); ++l) r += c[l];
  return r;
}

// Scratch arrays of one work item, each starting on a 64-byte boundary (whole-vector loads and
// stores of the state then never straddle two cache lines).
template <typename T>
struct Scratch {
  std::vector<T> mem;
  std::vector<int64_t> offs;
  explicit Scratch(std::initializer_list<int64_t> sizes) {
    const int64_t a = 64 / sizeof(T);
    int64_t total = a;
    for (int64_t n : sizes) { offs.push_back(total); total += (n + a - 1) / a * a; }
    mem.assign(total, T(0));
  }
  T* operator[](int i) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(mem.data());
    const uintptr_t first = (base + 63) / 64 * 64;
    return reinterpret_cast<T*>(first) + (offs[i] - 64 / int64_t(sizeof(T)));
  }
};

struct Sz {
  int64_t Bs, T, H, P, G, N, R, chunk, nck;
};

// Inputs; x, B, C may be strided over (batch, time) (e.g. slices of one projection): element
// [b,t,h,p] of x is x[b * xb + t * xt + h * P + p], [b,t,g,n] of B is B[b * Bb + t * Bt + g * N + n].
template <typename T>
struct Ptr {
  const T *x, *dt, *A, *B, *C, *D;
  int64_t xb, xt, Bb, Bt, Cb, Ct;
};

// One (batch, head) item forward, state S [N][P] (vectorised over P); PC = P when known at compile
// time (0: runtime P).  Checkpoints are written transposed, [P][N], the layout of the backward.
template <typename T, int PC>
void forward_item(const Sz& s, int64_t b, int64_t h, const Ptr<T>& in, T* y, T* hck, T* S, T* u, T* yv) {
  const int64_t P = PC ? PC : s.P, N = s.N, H = s.H, g = h / s.R;
  std::fill(S, S + N * P, T(0));
  const T Ah = in.A[h], Dh = in.D[h];
  for (int64_t t = 0; t < s.T; ++t) {
    if (hck && t % s.chunk == 0 && t > 0) {
      T* dst = hck + ((b * H + h) * (s.nck - 1) + t / s.chunk - 1) * N * P;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < P; ++p) dst[p * N + n] = S[n * P + p];
    }
    const int64_t row = (b * s.T + t) * H + h;
    const T dtv = in.dt[row], a = std::exp(dtv * Ah);
    const T* xr = in.x + b * in.xb + t * in.xt + h * P;
    const T* Br = in.B + b * in.Bb + t * in.Bt + g * N;
    const T* Cr = in.C + b * in.Cb + t * in.Ct + g * N;
    for (int64_t p = 0; p < P; ++p) { u[p] = dtv * xr[p]; yv[p] = Dh * xr[p]; }
    if constexpr (PC > 0 && PC % Vec<T>::L == 0) {
      // P known: u and the y accumulators stay in registers.
      using V = typename Vec<T>::type;
      constexpr int K = PC / Vec<T>::L, VL = Vec<T>::L;
      // y is summed over n in four interleaved partial sums (n mod 4), added at the end: shorter
      // dependency chains than one running sum.
      constexpr int J = 4;
      V vu[K], vy[J][K];
      for (int k = 0; k < K; ++k) {
        vu[k] = vload<V>(u + k * VL);
        for (int j = 0; j < J; ++j) vy[j][k] = V{};
      }
      const V av = V{} + a;
      int64_t n = 0;
      for (; n + J <= N; n += J)
        for (int j = 0; j < J; ++j) {
          const T bn = Br[n + j], cn = Cr[n + j];
          T* Sn = S + (n + j) * P;
          for (int k = 0; k < K; ++k) {
            const V v = av * vload<V>(Sn + k * VL) + vu[k] * bn;
            vstore(Sn + k * VL, v);
            vy[j][k] += v * cn;
          }
        }
      for (; n < N; ++n) {
        const T bn = Br[n], cn = Cr[n];
        T* Sn = S + n * P;
        for (int k = 0; k < K; ++k) {
          const V v = av * vload<V>(Sn + k * VL) + vu[k] * bn;
          vstore(Sn + k * VL, v);
          vy[0][k] += v * cn;
        }
      }
      for (int k = 0; k < K; ++k)
        vstore(yv + k * VL, vload<V>(yv + k * VL) + ((vy[0][k] + vy[1][k]) + (vy[2][k] + vy[3][k])));
    } else {
      for (int64_t n = 0; n < N; ++n) {
        const T bn = Br[n], cn = Cr[n];
        T* __restrict__ Sn = S + n * P;
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) {
          const T v = std::fma(a, Sn[p], bn * u[p]);
          Sn[p] = v;
          yv[p] += cn * v;
        }
      }
    }
    std::copy(yv, yv + P, y + row * P);
  }
}

template <typename T>
struct Grads {
  T *gx, *gdt, *gB, *gC, *gA_part, *gD_part;  // gB, gC [Bs,T,G,N] (contiguous); gA_part, gD_part [Bs,H]
};

// One (batch, head) item backward, given gy = dL/dy; states and adjoints are [P][N] (vectorised
// over N, so dB and dC need no horizontal sums); NC = N when known at compile time (0: runtime N).
template <typename T, int NC>
void backward_item(const Sz& s, int64_t b, int64_t h, const Ptr<T>& in, const T* gy, const T* hck,
                   const Grads<T>& g, T* Sbuf, T* Gs, T* ubuf, T* abuf, T* dB, T* dC, T* dav) {
  const int64_t N = NC ? NC : s.N, P = s.P, H = s.H, NP = N * P, L = s.chunk, grp = h / s.R;
  const T Ah = in.A[h], Dh = in.D[h];
  std::fill(Gs, Gs + NP, T(0));
  T a_next = T(0), gA = T(0), gD = T(0);
  for (int64_t c = s.nck - 1; c >= 0; --c) {
    const int64_t t0 = c * L, len = std::min(L, s.T - t0);
    if (c == 0) {
      std::fill(Sbuf, Sbuf + NP, T(0));
    } else {
      const T* src = hck + ((b * H + h) * (s.nck - 1) + c - 1) * NP;
      std::copy(src, src + NP, Sbuf);
    }
    for (int64_t i = 0; i < len; ++i) {  // recompute the states of this chunk (the forward's operations)
      const int64_t t = t0 + i, row = (b * s.T + t) * H + h;
      const T dtv = in.dt[row], a = std::exp(dtv * Ah);
      const T* xr = in.x + b * in.xb + t * in.xt + h * P;
      const T* Br = in.B + b * in.Bb + t * in.Bt + grp * N;
      T* ui = ubuf + i * P;
      for (int64_t p = 0; p < P; ++p) ui[p] = dtv * xr[p];
      abuf[i] = a;
      const T* __restrict__ Sp = Sbuf + i * NP;
      T* __restrict__ Sn = Sbuf + (i + 1) * NP;
      for (int64_t p = 0; p < P; ++p) {
        const T up = ui[p];
#pragma omp simd
        for (int64_t n = 0; n < N; ++n) Sn[p * N + n] = std::fma(a, Sp[p * N + n], Br[n] * up);
      }
    }
    for (int64_t i = len - 1; i >= 0; --i) {
      const int64_t t = t0 + i, row = (b * s.T + t) * H + h;
      const T dtv = in.dt[row];
      const T* xr = in.x + b * in.xb + t * in.xt + h * P;
      const T* gyr = gy + row * P;
      const T* __restrict__ Br = in.B + b * in.Bb + t * in.Bt + grp * N;
      const T* __restrict__ Cr = in.C + b * in.Cb + t * in.Ct + grp * N;
      const T* ui = ubuf + i * P;
      const T* __restrict__ St = Sbuf + (i + 1) * NP;
      const T* __restrict__ Sp = Sbuf + i * NP;
      T ddt = T(0), dd = T(0), da = T(0);
      T* gxr = g.gx + row * P;
      if constexpr (NC > 0 && NC % Vec<T>::L == 0) {
        // N known: the N-vectors of B, C and the dB, dC, d(a) accumulators stay in registers.
        using V = typename Vec<T>::type;
        constexpr int K = NC / Vec<T>::L, VL = Vec<T>::L;
        V vB[K], vC[K], aB[K], aC[K], aA[K];
        const V an = V{} + a_next;
        for (int k = 0; k < K; ++k) {
          vB[k] = vload<V>(Br + k * VL); vC[k] = vload<V>(Cr + k * VL);
          aB[k] = V{}; aC[k] = V{}; aA[k] = V{};
        }
        for (int64_t p = 0; p < P; ++p) {
          const T gyp = gyr[p], up = ui[p];
          T* Gp = Gs + p * N;
          V acc = V{};
          for (int k = 0; k < K; ++k) {
            const V gv = an * vload<V>(Gp + k * VL) + vC[k] * gyp;
            vstore(Gp + k * VL, gv);
            aC[k] += vload<V>(St + p * N + k * VL) * gyp;
            aB[k] += gv * up;
            aA[k] += gv * vload<V>(Sp + p * N + k * VL);
            acc += gv * vB[k];
          }
          const T du = hsum<T>(acc);
          ddt += du * xr[p];
          dd += gyp * xr[p];
          gxr[p] = du * dtv + Dh * gyp;
        }
        V sA = aA[0];
        for (int k = 1; k < K; ++k) sA += aA[k];
        da = hsum<T>(sA);
        for (int k = 0; k < K; ++k) { vstore(dB + k * VL, aB[k]); vstore(dC + k * VL, aC[k]); }
      } else {
        for (int64_t n = 0; n < N; ++n) { dB[n] = T(0); dC[n] = T(0); dav[n] = T(0); }
        for (int64_t p = 0; p < P; ++p) {
          const T gyp = gyr[p], up = ui[p];
          T* __restrict__ Gp = Gs + p * N;
          const T* __restrict__ Stp = St + p * N;
          const T* __restrict__ Spp = Sp + p * N;
          T du = T(0);
#pragma omp simd reduction(+ : du)
          for (int64_t n = 0; n < N; ++n) {
            const T gv = std::fma(a_next, Gp[n], Cr[n] * gyp);
            Gp[n] = gv;
            dC[n] += Stp[n] * gyp;
            dB[n] += gv * up;
            dav[n] += gv * Spp[n];
            du += gv * Br[n];
          }
          ddt += du * xr[p];
          dd += gyp * xr[p];
          gxr[p] = du * dtv + Dh * gyp;
        }
        for (int64_t n = 0; n < N; ++n) da += dav[n];
      }
      // the heads of a group run one after another in one work item: the first writes, the rest add
      T* oB = g.gB + ((b * s.T + t) * s.G + grp) * N;
      T* oC = g.gC + ((b * s.T + t) * s.G + grp) * N;
      if (h % s.R == 0) {
        std::copy(dB, dB + N, oB);
        std::copy(dC, dC + N, oC);
      } else {
        for (int64_t n = 0; n < N; ++n) { oB[n] += dB[n]; oC[n] += dC[n]; }
      }
      g.gdt[row] = ddt + da * abuf[i] * Ah;
      gA += da * abuf[i] * dtv;
      gD += dd;
      a_next = abuf[i];
    }
  }
  g.gA_part[b * H + h] = gA;
  g.gD_part[b * H + h] = gD;
}

Sz sizes(const at::Tensor& x, const at::Tensor& B, int64_t chunk) {
  Sz s;
  s.Bs = x.size(0); s.T = x.size(1); s.H = x.size(2); s.P = x.size(3);
  s.G = B.size(2); s.N = B.size(3); s.R = s.H / s.G;
  s.chunk = chunk; s.nck = (s.T + chunk - 1) / chunk;
  return s;
}

template <typename T>
Ptr<T> ptrs(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
            const at::Tensor& D) {
  auto rows_ok = [](const at::Tensor& t) { return t.stride(3) == 1 && (t.size(2) == 1 || t.stride(2) == t.size(3)); };
  TORCH_CHECK(rows_ok(x), "ssd: x needs contiguous [H,P] rows");
  TORCH_CHECK(rows_ok(B) && rows_ok(C), "ssd: B and C need contiguous [G,N] rows");
  TORCH_CHECK(dt.is_contiguous() && A.is_contiguous() && D.is_contiguous(), "ssd: dt, A, D must be contiguous");
  return Ptr<T>{x.data_ptr<T>(), dt.data_ptr<T>(), A.data_ptr<T>(), B.data_ptr<T>(), C.data_ptr<T>(), D.data_ptr<T>(),
                x.stride(0), x.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1)};
}

// Calls f with std::integral_constant<int, v> for the common sizes v (0: any other size).
template <typename F>
void dispatch_size(int64_t v, F&& f) {
  if (v == 16) f(std::integral_constant<int, 16>{});
  else if (v == 32) f(std::integral_constant<int, 32>{});
  else if (v == 64) f(std::integral_constant<int, 64>{});
  else if (v == 128) f(std::integral_constant<int, 128>{});
  else f(std::integral_constant<int, 0>{});
}

std::vector<at::Tensor> ssd_forward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                    const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                    int64_t chunk, bool keep) {
  const Sz s = sizes(x, B, chunk);
  at::Tensor y = at::empty({s.Bs, s.T, s.H, s.P}, x.options());
  at::Tensor hck = keep ? at::empty({s.Bs, s.H, s.nck - 1, s.P, s.N}, x.options()) : at::empty({0}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "ssd_forward", [&] {
    using T = scalar_t;
    const Ptr<T> in = ptrs<T>(x, dt, A, B, C, D);
    T* py = y.data_ptr<T>();
    T* ph = keep ? hck.data_ptr<T>() : nullptr;
    dispatch_size(s.P, [&](auto pc) {
      at::parallel_for(0, s.Bs * s.H, 1, [&](int64_t lo, int64_t hi) {
        Scratch<T> w({s.N * s.P, s.P, s.P});
        for (int64_t i = lo; i < hi; ++i)
          forward_item<T, decltype(pc)::value>(s, i / s.H, i % s.H, in, py, ph, w[0], w[1], w[2]);
      });
    });
  });
  return {y, hck};
}

std::vector<at::Tensor> ssd_backward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                     const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                                     const at::Tensor& gy, const at::Tensor& hck, int64_t chunk) {
  const Sz s = sizes(x, B, chunk);
  at::Tensor gx = at::empty({s.Bs, s.T, s.H, s.P}, x.options()), gdt = at::empty_like(dt);
  at::Tensor gAp = at::empty({s.Bs, s.H}, x.options()), gDp = at::empty_like(gAp);
  at::Tensor gB = at::empty({s.Bs, s.T, s.G, s.N}, x.options()), gC = at::empty_like(gB);
  at::Tensor gA = at::empty_like(A), gD = at::empty_like(D);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "ssd_backward", [&] {
    using T = scalar_t;
    const Ptr<T> in = ptrs<T>(x, dt, A, B, C, D);
    const Grads<T> g{gx.data_ptr<T>(), gdt.data_ptr<T>(), gB.data_ptr<T>(), gC.data_ptr<T>(),
                     gAp.data_ptr<T>(), gDp.data_ptr<T>()};
    const T* pgy = gy.data_ptr<T>();
    const T* ph = hck.data_ptr<T>();
    dispatch_size(s.N, [&](auto nc) {
      // work items: (batch, group); the heads of the group in order (dB, dC summed over them)
      at::parallel_for(0, s.Bs * s.G, 1, [&](int64_t lo, int64_t hi) {
        const int64_t NP = s.N * s.P, L = s.chunk;
        Scratch<T> w({(L + 1) * NP, NP, L * s.P, L, s.N, s.N, s.N});
        for (int64_t i = lo; i < hi; ++i)
          for (int64_t r = 0; r < s.R; ++r)
            backward_item<T, decltype(nc)::value>(s, i / s.G, (i % s.G) * s.R + r, in, pgy, ph, g, w[0], w[1], w[2],
                                                  w[3], w[4], w[5], w[6]);
      });
    });
    const T *pAp = gAp.data_ptr<T>(), *pDp = gDp.data_ptr<T>();
    T *pA = gA.data_ptr<T>(), *pD = gD.data_ptr<T>();
    for (int64_t h = 0; h < s.H; ++h) {
      T sa = T(0), sd = T(0);
      for (int64_t b = 0; b < s.Bs; ++b) { sa += pAp[b * s.H + h]; sd += pDp[b * s.H + h]; }
      pA[h] = sa;
      pD[h] = sd;
    }
  });
  return {gx, gdt, gA, gB, gC, gD};
}

// ---------------------------------------------------------------- gated RMSNorm of the Mamba-2 block
// out = w * n,  n = h * rstd,  h = y * silu(z),  rstd = 1 / sqrt(mean_group(h^2) + eps), per row and
// group of gs columns.  y, z [R,D] (rows may be strided, columns contiguous), w [D] -> out [R,D],
// rstd [R,D/gs].  The backward's weight gradient is summed per block of rows, then over the blocks
// in order (independent of the thread count).

using dlmlab_kernels::fexp;  // fast_exp.h
using dlmlab_kernels::sexp;

template <typename T>
inline T sigm(T z) { return T(1) / (T(1) + sexp<T>(-z)); }

constexpr int64_t ROWS = 32;  // rows per block of the weight-gradient sum

template <typename T>
void gn_forward_row(const T* yr, const T* zr, const T* w, T* out, T* rstd, T* h, int64_t D, int64_t gs, T eps) {
#pragma omp simd
  for (int64_t d = 0; d < D; ++d) h[d] = yr[d] * (zr[d] * sigm<T>(zr[d]));
  for (int64_t g = 0; g < D / gs; ++g) {
    T ss = T(0);
#pragma omp simd reduction(+ : ss)
    for (int64_t d = g * gs; d < (g + 1) * gs; ++d) ss += h[d] * h[d];
    const T rs = T(1) / std::sqrt(ss / T(gs) + eps);
    rstd[g] = rs;
#pragma omp simd
    for (int64_t d = g * gs; d < (g + 1) * gs; ++d) out[d] = w[d] * (h[d] * rs);
  }
}

// One row of the backward; adds go * n to acc (the weight gradient of this block of rows).
template <typename T>
void gn_backward_row(const T* yr, const T* zr, const T* w, const T* rstd, const T* gr, T* gy, T* gz, T* acc,
                     T* sg, T* n, T* gn, int64_t D, int64_t gs) {
  for (int64_t g = 0; g < D / gs; ++g) {
    const T rs = rstd[g];
    T dot = T(0);
#pragma omp simd reduction(+ : dot)
    for (int64_t d = g * gs; d < (g + 1) * gs; ++d) {
      const T s = sigm<T>(zr[d]);
      sg[d] = s;
      n[d] = yr[d] * (zr[d] * s) * rs;
      gn[d] = gr[d] * w[d];
      dot += gn[d] * n[d];
      acc[d] += gr[d] * n[d];
    }
    const T m = dot / T(gs);
#pragma omp simd
    for (int64_t d = g * gs; d < (g + 1) * gs; ++d) {
      const T gh = rs * (gn[d] - n[d] * m), s = sg[d];
      gy[d] = gh * (zr[d] * s);
      gz[d] = gh * yr[d] * (s * (T(1) + zr[d] * (T(1) - s)));
    }
  }
}

std::vector<at::Tensor> gated_norm_forward(const at::Tensor& y, const at::Tensor& z, const at::Tensor& w,
                                           int64_t gs, double eps) {
  const int64_t R = y.size(0), D = y.size(1), ng = D / gs;
  at::Tensor out = at::empty({R, D}, y.options()), rstd = at::empty({R, ng}, y.options());
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "gated_norm_forward", [&] {
    using T = scalar_t;
    const T *py = y.data_ptr<T>(), *pz = z.data_ptr<T>(), *pw = w.data_ptr<T>();
    const int64_t sy = y.stride(0), sz = z.stride(0);
    T *po = out.data_ptr<T>(), *pr = rstd.data_ptr<T>();
    at::parallel_for(0, R, 16, [&](int64_t lo, int64_t hi) {
      std::vector<T> hb(D);
      for (int64_t r = lo; r < hi; ++r)
        gn_forward_row<T>(py + r * sy, pz + r * sz, pw, po + r * D, pr + r * ng, hb.data(), D, gs, T(eps));
    });
  });
  return {out, rstd};
}

std::vector<at::Tensor> gated_norm_backward(const at::Tensor& y, const at::Tensor& z, const at::Tensor& w,
                                            const at::Tensor& rstd, const at::Tensor& go, int64_t gs) {
  const int64_t R = y.size(0), D = y.size(1), ng = D / gs, nb = (R + ROWS - 1) / ROWS;
  at::Tensor gy = at::empty({R, D}, y.options()), gz = at::empty({R, D}, y.options());
  at::Tensor part = at::empty({nb, D}, y.options()), gw = at::empty({D}, y.options());
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "gated_norm_backward", [&] {
    using T = scalar_t;
    const T *py = y.data_ptr<T>(), *pz = z.data_ptr<T>(), *pw = w.data_ptr<T>(), *pr = rstd.data_ptr<T>();
    const T* pg = go.data_ptr<T>();
    const int64_t sy = y.stride(0), sz = z.stride(0);
    T *pgy = gy.data_ptr<T>(), *pgz = gz.data_ptr<T>(), *pp = part.data_ptr<T>();
    at::parallel_for(0, nb, 1, [&](int64_t blo, int64_t bhi) {
      std::vector<T> sb(D), nbuf(D), gnb(D);
      for (int64_t blk = blo; blk < bhi; ++blk) {
        T* acc = pp + blk * D;
        std::fill(acc, acc + D, T(0));
        for (int64_t r = blk * ROWS; r < std::min(R, (blk + 1) * ROWS); ++r)
          gn_backward_row<T>(py + r * sy, pz + r * sz, pw, pr + r * ng, pg + r * D, pgy + r * D, pgz + r * D, acc,
                             sb.data(), nbuf.data(), gnb.data(), D, gs);
      }
    });
    T* pgw = gw.data_ptr<T>();
    std::fill(pgw, pgw + D, T(0));
    for (int64_t blk = 0; blk < nb; ++blk)
      for (int64_t d = 0; d < D; ++d) pgw[d] += pp[blk * D + d];
  });
  return {gy, gz, gw};
}

}  // namespace

TORCH_LIBRARY(dlmlab_ssd, m) {
  m.def("forward(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor D, int chunk, bool keep) -> Tensor[]",
        &ssd_forward);
  m.def("backward(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor D, Tensor gy, Tensor hck, int chunk)"
        " -> Tensor[]", &ssd_backward);
  m.def("gated_norm_forward(Tensor y, Tensor z, Tensor w, int gs, float eps) -> Tensor[]", &gated_norm_forward);
  m.def("gated_norm_backward(Tensor y, Tensor z, Tensor w, Tensor rstd, Tensor go, int gs) -> Tensor[]",
        &gated_norm_backward);
}

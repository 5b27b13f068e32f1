// Fused Mamba-1 selective scan on CPU, forward and backward (see dlmlab/models/fused_scan.py).
//
//   h_t = exp(dt_t A) * h_{t-1} + dt_t u_t B_t,   y_t = sum_n C_t[n] h_t[n]      (per batch b, channel d)
//   out_t = (y_t + D u_t) * silu(z_t)    (without z: out_t = y_t + D u_t)
//
// Shapes: u, dt, z, out [Bs,T,Di]; At = A^T [N,Di]; B, C [Bs,T,N]; D [Di]; checkpoints hck [Bs,nck,N,Di]
// (the state before every chunk-th step).  Work items are (batch, block of W channels); the state
// of one item is a local [N][W] array, vectorised over the W channels, so [Bs,T,Di,N] is never
// stored.  The backward (work items: batch rows) recomputes one chunk of states and exp(dt A)
// from its checkpoint, then runs the adjoint recurrence in reverse time.  Sums over channels (dB,
// dC) run over the blocks in order, sums over the batch (dA, dD) are reduced afterwards in a fixed
// order: results do not depend on the number of threads (built with FMA contraction, so CPUs with
// and without FMA may differ by rounding).  Also here: the causal depthwise Conv1D + SiLU of the
// Mamba block in the [Bs,T,Di] layout (conv_silu_*).
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
#include <vector>

namespace {

constexpr int W = 64;  // channels per work item (four AVX-512 float vectors)

using dlmlab_kernels::fexp;  // fast_exp.h
using dlmlab_kernels::sexp;



struct Dims {
  int64_t Bs, T, Di, N, nblk, chunk, nck;
};

inline Dims dims_of(const at::Tensor& u, const at::Tensor& At, int64_t chunk) {
  Dims s;
  s.Bs = u.size(0); s.T = u.size(1); s.Di = u.size(2); s.N = At.size(0);
  s.nblk = (s.Di + W - 1) / W; s.chunk = chunk; s.nck = (s.T + chunk - 1) / chunk;
  return s;
}

// Copy W channels starting at d0 (wn of them valid) into a zero-padded local vector.
template <typename T>
inline void load_lanes(T* __restrict__ dst, const T* __restrict__ src, int64_t wn) {
  if (wn == W) {
    for (int w = 0; w < W; ++w) dst[w] = src[w];
  } else {
    for (int w = 0; w < W; ++w) dst[w] = w < wn ? src[w] : T(0);
  }
}

// Store the first wn of W lanes.
template <typename T>
inline void store_lanes(T* __restrict__ dst, const T* __restrict__ src, int64_t wn) {
  if (wn == W) {
    for (int w = 0; w < W; ++w) dst[w] = src[w];
  } else {
    for (int w = 0; w < wn; ++w) dst[w] = src[w];
  }
}

// Sum each row of p [N][W] over its W lanes with a fixed pairwise tree; row sums end in p[n*W].
template <typename T>
inline void tree_sum_rows(T* p, int64_t N) {
  for (int half = W / 2; half >= 1; half /= 2)
    for (int64_t n = 0; n < N; ++n)
      for (int w = 0; w < half; ++w) p[n * W + w] += p[n * W + w + half];
}

// Inputs shared by forward and backward.
template <typename T>
struct In {
  const T *u, *dt, *At, *B, *C, *D;
};

template <typename T>
inline T sigmoid(T z) { return T(1) / (T(1) + sexp<T>(-z)); }

// out = ys * silu(z) on [lo, hi) (contiguous sweeps, vectorised; out may be ys).
template <typename T>
void gate(const T* z, const T* ys, T* out, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) out[i] = ys[i] * (z[i] * sigmoid<T>(z[i]));
}

// g *= d softplus(raw) / d raw = sigmoid(raw) (1 above the threshold, as torch) on [lo, hi).
template <typename T>
void softplus_backward_range(const T* __restrict__ raw, T* __restrict__ g, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const T sg = sigmoid<T>(raw[i]), m = raw[i] > T(20) ? T(1) : T(0);
    g[i] = g[i] * (sg + m * (T(1) - sg));
  }
}

// Backward of out = ys * silu(z) on [lo, hi): gz, and gys (the gradient the scan receives).
template <typename T>
void gate_backward(const T* __restrict__ z, const T* __restrict__ ys, const T* __restrict__ gout,
                   T* __restrict__ gz, T* __restrict__ gys, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const T sg = sigmoid<T>(z[i]);
    gz[i] = gout[i] * ys[i] * sg * (T(1) + z[i] * (T(1) - sg));
    gys[i] = gout[i] * (z[i] * sg);
  }
}

template <typename T>
void forward_item(const Dims& s, int64_t b, int64_t blk, const In<T>& in, T* out, T* hck) {
  const int64_t N = s.N, Di = s.Di, d0 = blk * W, wn = std::min<int64_t>(W, Di - d0);
  std::vector<T> h(N * W, T(0)), a(N * W, T(0));
  for (int64_t n = 0; n < N; ++n) load_lanes(&a[n * W], in.At + n * Di + d0, wn);
  alignas(64) T xdt[W], xu[W], x[W], yv[W], dv[W];
  load_lanes(dv, in.D + d0, wn);
  for (int64_t t = 0; t < s.T; ++t) {
    if (hck && t % s.chunk == 0) {
      T* dst = hck + ((b * s.nck + t / s.chunk) * N) * Di + d0;
      for (int64_t n = 0; n < N; ++n)
        for (int w = 0; w < wn; ++w) dst[n * Di + w] = h[n * W + w];
    }
    const int64_t row = (b * s.T + t) * Di + d0;
    load_lanes(xdt, in.dt + row, wn);
    load_lanes(xu, in.u + row, wn);
    for (int w = 0; w < W; ++w) { x[w] = xdt[w] * xu[w]; yv[w] = T(0); }
    const T* Bt = in.B + (b * s.T + t) * N;
    const T* Ct = in.C + (b * s.T + t) * N;
    for (int64_t n = 0; n < N; ++n) {
      const T bn = Bt[n], cn = Ct[n];
      T* hn = &h[n * W];
      const T* an = &a[n * W];
#pragma GCC ivdep
      for (int w = 0; w < W; ++w) {
        T hv = sexp<T>(xdt[w] * an[w]) * hn[w] + x[w] * bn;
        hn[w] = hv;
        yv[w] += cn * hv;
      }
    }
    for (int w = 0; w < W; ++w) yv[w] = yv[w] + dv[w] * xu[w];
    store_lanes(out + row, yv, wn);
  }
}

// Gradient outputs: gu, gdt [Bs,T,Di]; gB, gC [Bs,T,N]; per-batch partial sums gA_part [Bs,N,Di]
// and gD_part [Bs,Di], reduced over the batch afterwards in a fixed order.
template <typename T>
struct Grads {
  T *gu, *gdt, *gB, *gC, *gA_part, *gD_part;
};

// The backward of batch row b, all channels, given gys = dL/d(y + D u).  Time runs backwards chunk by chunk; inside a chunk
// every channel block recomputes its states from its checkpoint and runs the adjoint
// recurrence, adding its share of dB_t, dC_t into accB / accC [L][N][W] (blocks in order), which
// are summed over the W lanes once per chunk.
template <typename T>
void backward_batch(const Dims& s, int64_t b, const In<T>& in, const T* gys, const T* hck, const Grads<T>& g) {
  const int64_t N = s.N, Di = s.Di, L = s.chunk, NW = N * W, nblk = s.nblk;
  std::vector<T> a(nblk * NW, T(0)), carry(nblk * NW, T(0)), gA(nblk * NW, T(0));
  std::vector<T> dv(nblk * W, T(0)), gD(nblk * W, T(0));
  std::vector<T> H((L + 1) * NW), E(L * NW), xdt(L * W), xu(L * W), accB(L * NW), accC(L * NW);
  for (int64_t k = 0; k < nblk; ++k) {
    const int64_t d0 = k * W, wn = std::min<int64_t>(W, Di - d0);
    for (int64_t n = 0; n < N; ++n) load_lanes(&a[k * NW + n * W], in.At + n * Di + d0, wn);
    load_lanes(&dv[k * W], in.D + d0, wn);
  }
  alignas(64) T x[W], gyv[W], gx[W], gdtA[W];
  for (int64_t c = s.nck - 1; c >= 0; --c) {
    const int64_t t0 = c * L, len = std::min(L, s.T - t0);
    std::fill(accB.begin(), accB.end(), T(0));
    std::fill(accC.begin(), accC.end(), T(0));
    for (int64_t k = 0; k < nblk; ++k) {
      const int64_t d0 = k * W, wn = std::min<int64_t>(W, Di - d0);
      const T* ak = &a[k * NW];
      const T* dk = &dv[k * W];
      const T* src = hck + ((b * s.nck + c) * N) * Di + d0;
      for (int64_t n = 0; n < N; ++n) load_lanes(&H[n * W], src + n * Di, wn);
      for (int64_t i = 0; i < len; ++i) {  // recompute the chunk's states and exp(dt A)
        const int64_t row = (b * s.T + t0 + i) * Di + d0;
        T* xd = &xdt[i * W];
        T* xv = &xu[i * W];
        load_lanes(xd, in.dt + row, wn);
        load_lanes(xv, in.u + row, wn);
        for (int w = 0; w < W; ++w) x[w] = xd[w] * xv[w];
        const T* Bt = in.B + (b * s.T + t0 + i) * N;
        for (int64_t n = 0; n < N; ++n) {
          const T bn = Bt[n];
          const T* hp = &H[i * NW + n * W];
          T* hn = &H[(i + 1) * NW + n * W];
          T* en = &E[i * NW + n * W];
          const T* an = ak + n * W;
#pragma GCC ivdep
          for (int w = 0; w < W; ++w) {
            T e = sexp<T>(xd[w] * an[w]);
            en[w] = e;
            hn[w] = e * hp[w] + x[w] * bn;
          }
        }
      }
      for (int64_t i = len - 1; i >= 0; --i) {  // adjoint: G_t = gy_t C_t + exp(dt_{t+1} A) G_{t+1}
        const int64_t t = t0 + i, row = (b * s.T + t) * Di + d0;
        const T* xd = &xdt[i * W];
        const T* xv = &xu[i * W];
        load_lanes(gyv, gys + row, wn);
        T* gDk = &gD[k * W];
        for (int w = 0; w < W; ++w) {
          x[w] = xd[w] * xv[w]; gx[w] = T(0); gdtA[w] = T(0);
          gDk[w] += gyv[w] * xv[w];
        }
        const T* Bt = in.B + (b * s.T + t) * N;
        const T* Ct = in.C + (b * s.T + t) * N;
        for (int64_t n = 0; n < N; ++n) {
          const T bn = Bt[n], cn = Ct[n];
          const T* hp = &H[i * NW + n * W];
          const T* hn = &H[(i + 1) * NW + n * W];
          const T* en = &E[i * NW + n * W];
          const T* an = ak + n * W;
          T* cr = &carry[k * NW + n * W];
          T* gAn = &gA[k * NW + n * W];
          T* pBn = &accB[i * NW + n * W];
          T* pCn = &accC[i * NW + n * W];
#pragma GCC ivdep
          for (int w = 0; w < W; ++w) {
            T gh = gyv[w] * cn + cr[w];
            T sv = gh * hp[w] * en[w];  // dL/d(dt A)
            pCn[w] += gyv[w] * hn[w];
            pBn[w] += gh * x[w];
            gx[w] += gh * bn;
            gdtA[w] += sv * an[w];
            gAn[w] += sv * xd[w];
            cr[w] = en[w] * gh;
          }
        }
        for (int w = 0; w < W; ++w) {
          gdtA[w] = gdtA[w] + gx[w] * xv[w];      // d/d dt
          gx[w] = gx[w] * xd[w] + gyv[w] * dk[w];  // d/du
        }
        store_lanes(g.gu + row, gx, wn);
        store_lanes(g.gdt + row, gdtA, wn);
      }
    }
    tree_sum_rows(accB.data(), len * N);
    tree_sum_rows(accC.data(), len * N);
    for (int64_t r = 0; r < len * N; ++r) {
      g.gB[(b * s.T + t0) * N + r] = accB[r * W];
      g.gC[(b * s.T + t0) * N + r] = accC[r * W];
    }
  }
  for (int64_t k = 0; k < nblk; ++k) {
    const int64_t d0 = k * W, wn = std::min<int64_t>(W, Di - d0);
    for (int64_t n = 0; n < N; ++n)
      for (int w = 0; w < wn; ++w) g.gA_part[(b * N + n) * Di + d0 + w] = gA[k * NW + n * W + w];
    for (int w = 0; w < wn; ++w) g.gD_part[b * Di + d0 + w] = gD[k * W + w];
  }
}

void check_inputs(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) {
    TORCH_CHECK(t.device().is_cpu(), "fused selective scan: CPU tensors only");
    TORCH_CHECK(t.is_contiguous(), "fused selective scan: inputs must be contiguous");
    TORCH_CHECK(t.scalar_type() == ts[0].scalar_type(), "fused selective scan: inputs must share one dtype");
  }
}

template <typename T>
In<T> inputs_of(const at::Tensor& u, const at::Tensor& dt, const at::Tensor& At, const at::Tensor& B,
                const at::Tensor& C, const at::Tensor& D) {
  return {u.data_ptr<T>(), dt.data_ptr<T>(), At.data_ptr<T>(), B.data_ptr<T>(), C.data_ptr<T>(), D.data_ptr<T>()};
}

// out[i] = sum_k part[k][i] over k in 0..K-1 in order, for i in 0..M-1, parts [outer][K][M].
template <typename T>
void fixed_order_sum(const T* part, T* out, int64_t outer, int64_t K, int64_t M) {
  at::parallel_for(0, outer * M, 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t o = j / M, i = j % M;
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += part[(o * K + k) * M + i];
      out[j] = acc;
    }
  });
}

}  // namespace

// Forward.  u, dt, z [Bs,T,Di] (z empty: no gate), At [N,Di], B, C [Bs,T,N], D [Di].  Returns (out
// [Bs,T,Di], checkpoints [Bs,nck,N,Di], ys = y + D u [Bs,T,Di]); with keep false the checkpoints,
// without z or keep ys, are empty tensors.
std::vector<at::Tensor> scan_forward(at::Tensor u, at::Tensor dt, at::Tensor At, at::Tensor B, at::Tensor C,
                                     at::Tensor D, at::Tensor z, int64_t chunk, bool keep) {
  check_inputs({u, dt, At, B, C, D, z});
  TORCH_CHECK(chunk >= 1, "chunk must be >= 1");
  const Dims s = dims_of(u, At, chunk);
  const bool gated = z.numel() > 0;
  auto out = at::empty_like(u);
  auto ys = gated && keep ? at::empty_like(u) : at::empty({0}, u.options());
  auto hck = keep ? at::empty({s.Bs, s.nck, s.N, s.Di}, u.options()) : at::empty({0}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "fused_scan_forward", [&] {
    const auto in = inputs_of<scalar_t>(u, dt, At, B, C, D);
    scalar_t *po = out.data_ptr<scalar_t>(), *ph = keep ? hck.data_ptr<scalar_t>() : nullptr;
    scalar_t* py = ys.numel() ? ys.data_ptr<scalar_t>() : po;
    at::parallel_for(0, s.Bs * s.nblk, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) forward_item<scalar_t>(s, i / s.nblk, i % s.nblk, in, py, ph);
    });
    if (gated) {
      const scalar_t* pz = z.data_ptr<scalar_t>();
      at::parallel_for(0, u.numel(), 16384, [&](int64_t lo, int64_t hi) { gate(pz, py, po, lo, hi); });
    }
  });
  return {out, hck, ys};
}

// Backward.  dt: the dt the forward used; ys: as the forward returned; raw: when dt = softplus(raw),
// raw (else empty).  Returns (gu, gdt [Bs,T,Di] (w.r.t. raw with softplus), gAt [N,Di], gB, gC [Bs,T,N], gD [Di],
// gz [Bs,T,Di] or empty).
std::vector<at::Tensor> scan_backward(at::Tensor u, at::Tensor dt, at::Tensor At, at::Tensor B, at::Tensor C,
                                      at::Tensor D, at::Tensor z, at::Tensor ys, at::Tensor gout, at::Tensor hck,
                                      at::Tensor raw, int64_t chunk) {
  check_inputs({u, dt, At, B, C, D, z, ys, gout, hck, raw});
  const Dims s = dims_of(u, At, chunk);
  const bool gated = z.numel() > 0;
  auto gu = at::empty_like(u), gdt = at::empty_like(u), gz = at::empty_like(z);
  auto gys = gated ? at::empty_like(u) : gout;
  auto gA_part = at::empty({s.Bs, s.N, s.Di}, u.options());
  auto gD_part = at::empty({s.Bs, s.Di}, u.options());
  auto gAt = at::empty_like(At), gB = at::empty_like(B), gC = at::empty_like(C), gD = at::empty_like(D);
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "fused_scan_backward", [&] {
    const auto in = inputs_of<scalar_t>(u, dt, At, B, C, D);
    if (gated) {
      const scalar_t *pz = z.data_ptr<scalar_t>(), *py = ys.data_ptr<scalar_t>(), *pg = gout.data_ptr<scalar_t>();
      scalar_t *pgz = gz.data_ptr<scalar_t>(), *pgy = gys.data_ptr<scalar_t>();
      at::parallel_for(0, u.numel(), 16384,
                       [&](int64_t lo, int64_t hi) { gate_backward(pz, py, pg, pgz, pgy, lo, hi); });
    }
    const Grads<scalar_t> g{gu.data_ptr<scalar_t>(), gdt.data_ptr<scalar_t>(), gB.data_ptr<scalar_t>(),
                            gC.data_ptr<scalar_t>(), gA_part.data_ptr<scalar_t>(), gD_part.data_ptr<scalar_t>()};
    const scalar_t *pgy = gys.data_ptr<scalar_t>(), *ph = hck.data_ptr<scalar_t>();
    at::parallel_for(0, s.Bs, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) backward_batch<scalar_t>(s, b, in, pgy, ph, g);
    });
    if (raw.numel()) {
      const scalar_t* praw = raw.data_ptr<scalar_t>();
      at::parallel_for(0, u.numel(), 16384,
                       [&](int64_t lo, int64_t hi) { softplus_backward_range(praw, g.gdt, lo, hi); });
    }
    // fixed-order reductions over the batch
    fixed_order_sum(g.gA_part, gAt.data_ptr<scalar_t>(), 1, s.Bs, s.N * s.Di);
    fixed_order_sum(g.gD_part, gD.data_ptr<scalar_t>(), 1, s.Bs, s.Di);
  });
  return {gu, gdt, gAt, gB, gC, gD, gz};
}

// ---- causal depthwise Conv1D + SiLU in the [Bs,T,Di] layout (the Mamba block's input to the scan) ----
// pre[b,t,d] = bias[d] + sum_k w[d,k] x[b, t-K+1+k, d] (x = 0 before t = 0), u = silu(pre).
// x may have a row stride (e.g. a half of in_proj's output); wt = w^T [K,Di], bias [Di].

namespace {

// pre for one (b, t) row into p [Di].
template <typename T>
inline void conv_row(const T* x, int64_t sx, const T* w, const T* bias, int64_t Di, int64_t K, int64_t t, T* p) {
  for (int64_t d = 0; d < Di; ++d) p[d] = bias[d];
  for (int64_t k = 0; k < K; ++k) {
    const int64_t ts = t - K + 1 + k;
    if (ts < 0) continue;
    const T* xr = x + ts * sx;
    for (int64_t d = 0; d < Di; ++d) p[d] += w[k * Di + d] * xr[d];
  }
}

}  // namespace

// Forward: u [Bs,T,Di] (contiguous).
at::Tensor conv_silu_forward(at::Tensor x, at::Tensor w, at::Tensor bias) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1, "conv_silu: x must be [Bs,T,Di] with contiguous rows");
  check_inputs({w, bias});
  const int64_t Bs = x.size(0), T = x.size(1), Di = x.size(2), K = w.size(0);
  auto u = at::empty({Bs, T, Di}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv_silu_forward", [&] {
    const scalar_t *px = x.data_ptr<scalar_t>(), *pw = w.data_ptr<scalar_t>(), *pb = bias.data_ptr<scalar_t>();
    scalar_t* pu = u.data_ptr<scalar_t>();
    const int64_t sb = x.stride(0), sx = x.stride(1);
    at::parallel_for(0, Bs * T, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t b = i / T, t = i % T;
        scalar_t* p = pu + i * Di;
        conv_row(px + b * sb, sx, pw, pb, Di, K, t, p);
        for (int64_t d = 0; d < Di; ++d) p[d] = p[d] * sigmoid<scalar_t>(p[d]);
      }
    });
  });
  return u;
}

// Backward: (gx [Bs,T,Di], [gwt; gbias] [K+1,Di]); the sums over (b, t) are per batch row, then in order.
std::vector<at::Tensor> conv_silu_backward(at::Tensor x, at::Tensor w, at::Tensor bias, at::Tensor gu) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1, "conv_silu: x must be [Bs,T,Di] with contiguous rows");
  check_inputs({w, bias, gu});
  const int64_t Bs = x.size(0), T = x.size(1), Di = x.size(2), K = w.size(0);
  auto gx = at::empty({Bs, T, Di}, x.options());
  auto gpart = at::empty({Bs, K + 1, Di}, x.options());  // per batch row: gwt [K,Di] and gbias
  auto gsum = at::empty({K + 1, Di}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv_silu_backward", [&] {
    const scalar_t *px = x.data_ptr<scalar_t>(), *pw = w.data_ptr<scalar_t>(), *pb = bias.data_ptr<scalar_t>(),
                   *pgu = gu.data_ptr<scalar_t>();
    scalar_t *pgx = gx.data_ptr<scalar_t>(), *pgp = gpart.data_ptr<scalar_t>();
    const int64_t sb = x.stride(0), sx = x.stride(1);
    at::parallel_for(0, Bs, 1, [&](int64_t lo, int64_t hi) {
      std::vector<scalar_t> gpre(T * Di), acc(Di * (K + 1));
      for (int64_t b = lo; b < hi; ++b) {
        const scalar_t* xb = px + b * sb;
        std::fill(acc.begin(), acc.end(), scalar_t(0));
        for (int64_t t = 0; t < T; ++t) {  // gpre = gu * silu'(pre)
          scalar_t* g = &gpre[t * Di];
          conv_row(xb, sx, pw, pb, Di, K, t, g);
          const scalar_t* gut = pgu + (b * T + t) * Di;
          for (int64_t d = 0; d < Di; ++d) {
            const scalar_t sg = sigmoid<scalar_t>(g[d]);
            g[d] = gut[d] * sg * (scalar_t(1) + g[d] * (scalar_t(1) - sg));
          }
          for (int64_t k = 0; k < K; ++k) {  // gw[d,k] += gpre[t] x[t-K+1+k]
            const int64_t ts = t - K + 1 + k;
            if (ts < 0) continue;
            const scalar_t* xr = xb + ts * sx;
            for (int64_t d = 0; d < Di; ++d) acc[k * Di + d] += g[d] * xr[d];
          }
          for (int64_t d = 0; d < Di; ++d) acc[K * Di + d] += g[d];
        }
        for (int64_t t = 0; t < T; ++t) {  // gx[t] = sum_k w[k] gpre[t+K-1-k]
          scalar_t* gxt = pgx + (b * T + t) * Di;
          for (int64_t d = 0; d < Di; ++d) gxt[d] = scalar_t(0);
          for (int64_t k = 0; k < K; ++k) {
            const int64_t tt = t + K - 1 - k;
            if (tt >= T) continue;
            const scalar_t* g = &gpre[tt * Di];
            for (int64_t d = 0; d < Di; ++d) gxt[d] += pw[k * Di + d] * g[d];
          }
        }
        std::copy(acc.begin(), acc.end(), pgp + b * (K + 1) * Di);
      }
    });
    fixed_order_sum(pgp, gsum.data_ptr<scalar_t>(), 1, Bs, (K + 1) * Di);
  });
  return {gx, gsum};
}

TORCH_LIBRARY(dlmlab_fused_scan, m) {
  m.def("forward(Tensor u, Tensor dt, Tensor At, Tensor B, Tensor C, Tensor D, Tensor z, int chunk, bool keep)"
        " -> Tensor[]", &scan_forward);
  m.def("backward(Tensor u, Tensor dt, Tensor At, Tensor B, Tensor C, Tensor D, Tensor z, Tensor ys,"
        " Tensor gout, Tensor hck, Tensor raw, int chunk) -> Tensor[]", &scan_backward);
  m.def("conv_silu_forward(Tensor x, Tensor wt, Tensor bias) -> Tensor", &conv_silu_forward);
  m.def("conv_silu_backward(Tensor x, Tensor wt, Tensor bias, Tensor gu) -> Tensor[]", &conv_silu_backward);
}

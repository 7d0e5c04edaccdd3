// The offset term of InsNet's self-attention on the CPU, computed for the unblocked (query, key) pairs only.
//
//   bias[b, h, i, j] = scaling * qv[b, h, i, :] . p[h, index[b, i, j], :]     where mask[b, i, j] is false
//                    = -inf                                                   where it is true
//
// qv [B, H, T, Dh] (the queries plus the position bias v), p [H, R, Dh] (W_kR times the offset embeddings),
// index [B, T, S] int64 (offset + M, in [0, R) wherever unblocked), mask [Bm, T, S] bool with Bm = 1 or B
// (True: blocked; an empty tensor: nothing blocked). The dense alternative (attention.py: offset_bias) multiplies
// every query by all R = 2S - 1 offsets and gathers, then scatters its gradient back over a zero-filled
// [B, H, T, R]; a one-pass under a causal mask needs a quarter of those products (T S / 2 pairs against T (2S - 1)).
//
// Example: T = S = 3, one pass (key j visible to query i for j <= i), R = 5: 6 dot products of Dh per (b, h)
// instead of 15, and 3 entries of -inf.
//
// The loops vectorise over Dh (32-byte vectors, two accumulators) and are built for AVX2 + FMA and for the
// baseline ISA, picked at run time by the CPU's features, so one build runs on any x86-64 CPU.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define INSNET_X86 1
#define INSNET_AVX2 __attribute__((target("avx2,fma")))
#else
#define INSNET_X86 0
#define INSNET_AVX2
#endif

// AVX2 + FMA where the CPU has them (by feature, not by model name: AMD's CPUs too), else the baseline build
bool has_avx2() {
#if INSNET_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

// 32-byte vectors (GCC's vector extensions): one ymm register under AVX2, two xmm in the baseline clone.
template <typename scalar_t>
struct Vec {
  typedef scalar_t type __attribute__((vector_size(32)));
  static constexpr int lanes = 32 / sizeof(scalar_t);
  __attribute__((always_inline)) static inline type load(const scalar_t* x) {
    type v;
    __builtin_memcpy(&v, x, sizeof(v));
    return v;
  }
  __attribute__((always_inline)) static inline void store(scalar_t* x, type v) { __builtin_memcpy(x, &v, sizeof(v)); }
};

template <typename scalar_t>
__attribute__((always_inline)) inline scalar_t dot(const scalar_t* a, const scalar_t* b, int64_t n) {
  using V = Vec<scalar_t>;
  typename V::type acc0 = {}, acc1 = {};
  int64_t d = 0;
  for (; d + 2 * V::lanes <= n; d += 2 * V::lanes) {
    acc0 += V::load(a + d) * V::load(b + d);
    acc1 += V::load(a + d + V::lanes) * V::load(b + d + V::lanes);
  }
  for (; d + V::lanes <= n; d += V::lanes) acc0 += V::load(a + d) * V::load(b + d);
  acc0 += acc1;
  scalar_t sum = 0;
  for (; d < n; ++d) sum += a[d] * b[d];
  for (int l = 0; l < V::lanes; ++l) sum += acc0[l];
  return sum;
}

template <typename scalar_t>
__attribute__((always_inline)) inline void axpy(scalar_t alpha, const scalar_t* x, scalar_t* y, int64_t n) {
  using V = Vec<scalar_t>;
  int64_t d = 0;
  for (; d + V::lanes <= n; d += V::lanes) V::store(y + d, V::load(y + d) + alpha * V::load(x + d));
  for (; d < n; ++d) y[d] += alpha * x[d];
}

struct Shapes {
  int64_t B, H, T, S, R, Dh, Bm;
};

Shapes check(const at::Tensor& qv, const at::Tensor& p, const at::Tensor& index, const at::Tensor& mask) {
  TORCH_CHECK(qv.dim() == 4 && p.dim() == 3 && index.dim() == 3, "offset_scores: qv [B, H, T, Dh], p [H, R, Dh], index [B, T, S]");
  Shapes s{qv.size(0), qv.size(1), qv.size(2), index.size(2), p.size(1), qv.size(3), 0};
  TORCH_CHECK(p.size(0) == s.H && p.size(2) == s.Dh, "offset_scores: p must be [H, R, Dh] for qv's H and Dh");
  TORCH_CHECK(index.size(0) == s.B && index.size(1) == s.T, "offset_scores: index must be [B, T, S] for qv's B and T");
  TORCH_CHECK(index.scalar_type() == at::kLong, "offset_scores: index must be int64");
  TORCH_CHECK(qv.scalar_type() == p.scalar_type(), "offset_scores: qv and p must share a dtype");
  if (mask.numel() > 0) {
    TORCH_CHECK(mask.dim() == 3 && mask.scalar_type() == at::kBool && mask.size(1) == s.T && mask.size(2) == s.S &&
                    (mask.size(0) == 1 || mask.size(0) == s.B),
                "offset_scores: mask must be bool [1 or B, T, S]");
    s.Bm = mask.size(0);
  }
  return s;
}

// kDh > 0: the head size known at compile time (64 and 32 are built so), the loops unrolled and the gradient of a
// query row kept in registers; kDh = 0: any head size.
template <typename scalar_t, int kDh>
__attribute__((always_inline)) inline void forward_rows_dh(const Shapes& s, const scalar_t* qv, const scalar_t* p,
                                                           const int64_t* index, const bool* mask, scalar_t scaling,
                                                           scalar_t* out, int64_t begin, int64_t end) {
  const int64_t Dh = kDh > 0 ? kDh : s.Dh;
  const scalar_t blocked = -std::numeric_limits<scalar_t>::infinity();
  for (int64_t row = begin; row < end; ++row) {  // row = (b * H + h) * T + i
    const int64_t i = row % s.T, h = (row / s.T) % s.H, b = row / (s.T * s.H);
    const scalar_t* q = qv + row * Dh;
    const scalar_t* ph = p + h * s.R * Dh;
    const int64_t* idx = index + (b * s.T + i) * s.S;
    const bool* m = mask ? mask + ((s.Bm == 1 ? 0 : b) * s.T + i) * s.S : nullptr;
    scalar_t* o = out + row * s.S;
    for (int64_t j = 0; j < s.S; ++j) {
      if (m && m[j]) {
        o[j] = blocked;
        continue;
      }
      const int64_t r = idx[j];
      TORCH_CHECK(r >= 0 && r < s.R, "offset_scores: an unblocked offset index ", r, " is outside [0, ", s.R, ")");
      o[j] = scaling * dot(q, ph + r * Dh, Dh);
    }
  }
}

template <typename scalar_t, int kDh>
__attribute__((always_inline)) inline void backward_head_dh(const Shapes& s, const scalar_t* grad, const scalar_t* qv,
                                                            const scalar_t* p, const int64_t* index, const bool* mask,
                                                            scalar_t scaling, scalar_t* grad_qv, scalar_t* grad_p,
                                                            int64_t h) {
  const int64_t Dh = kDh > 0 ? kDh : s.Dh;
  const scalar_t* ph = p + h * s.R * Dh;
  scalar_t* gph = grad_p + h * s.R * Dh;
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = 0; i < s.T; ++i) {
      const int64_t row = (b * s.H + h) * s.T + i;
      const scalar_t* q = qv + row * Dh;
      scalar_t* gq = grad_qv + row * Dh;
      scalar_t acc[kDh > 0 ? kDh : 1] = {};  // kDh > 0: d/dqv of this row, in registers
      const scalar_t* g = grad + row * s.S;
      const int64_t* idx = index + (b * s.T + i) * s.S;
      const bool* m = mask ? mask + ((s.Bm == 1 ? 0 : b) * s.T + i) * s.S : nullptr;
      for (int64_t j = 0; j < s.S; ++j) {
        if (m && m[j]) continue;
        const scalar_t gj = g[j] * scaling;
        if (gj == 0) continue;
        const int64_t r = idx[j];
        axpy(gj, ph + r * Dh, kDh > 0 ? acc : gq, Dh);  // d/dqv
        axpy(gj, q, gph + r * Dh, Dh);                  // d/dp (rows of one head: no other thread writes them)
      }
      if (kDh > 0)
        for (int64_t d = 0; d < Dh; ++d) gq[d] = acc[d];
    }
  }
}

template <typename scalar_t>
__attribute__((always_inline)) inline void forward_rows(const Shapes& s, const scalar_t* qv, const scalar_t* p,
                                                        const int64_t* index, const bool* mask, scalar_t scaling,
                                                        scalar_t* out, int64_t begin, int64_t end) {
  if (s.Dh == 64)
    forward_rows_dh<scalar_t, 64>(s, qv, p, index, mask, scaling, out, begin, end);
  else if (s.Dh == 32)
    forward_rows_dh<scalar_t, 32>(s, qv, p, index, mask, scaling, out, begin, end);
  else
    forward_rows_dh<scalar_t, 0>(s, qv, p, index, mask, scaling, out, begin, end);
}

template <typename scalar_t>
__attribute__((always_inline)) inline void backward_head(const Shapes& s, const scalar_t* grad, const scalar_t* qv,
                                                         const scalar_t* p, const int64_t* index, const bool* mask,
                                                         scalar_t scaling, scalar_t* grad_qv, scalar_t* grad_p,
                                                         int64_t h) {
  if (s.Dh == 64)
    backward_head_dh<scalar_t, 64>(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);
  else if (s.Dh == 32)
    backward_head_dh<scalar_t, 32>(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);
  else
    backward_head_dh<scalar_t, 0>(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);
}

// Each loop is built twice, for AVX2 + FMA and for the baseline ISA; has_avx2() picks one at run time.
#define INSNET_KERNELS(scalar_t, suffix)                                                                          \
  INSNET_AVX2 void forward_avx2_##suffix(const Shapes& s, const scalar_t* qv, const scalar_t* p,                 \
                                         const int64_t* index, const bool* mask, scalar_t scaling, scalar_t* out, \
                                         int64_t begin, int64_t end) {                                            \
    forward_rows<scalar_t>(s, qv, p, index, mask, scaling, out, begin, end);                                      \
  }                                                                                                               \
  void forward_base_##suffix(const Shapes& s, const scalar_t* qv, const scalar_t* p, const int64_t* index,        \
                             const bool* mask, scalar_t scaling, scalar_t* out, int64_t begin, int64_t end) {     \
    forward_rows<scalar_t>(s, qv, p, index, mask, scaling, out, begin, end);                                      \
  }                                                                                                               \
  void forward_##suffix(const Shapes& s, const scalar_t* qv, const scalar_t* p, const int64_t* index,             \
                        const bool* mask, scalar_t scaling, scalar_t* out, int64_t begin, int64_t end) {          \
    if (has_avx2())                                                                                               \
      forward_avx2_##suffix(s, qv, p, index, mask, scaling, out, begin, end);                                     \
    else                                                                                                          \
      forward_base_##suffix(s, qv, p, index, mask, scaling, out, begin, end);                                     \
  }                                                                                                               \
  INSNET_AVX2 void backward_avx2_##suffix(const Shapes& s, const scalar_t* grad, const scalar_t* qv,             \
                                          const scalar_t* p, const int64_t* index, const bool* mask,              \
                                          scalar_t scaling, scalar_t* grad_qv, scalar_t* grad_p, int64_t h) {     \
    backward_head<scalar_t>(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);                            \
  }                                                                                                               \
  void backward_base_##suffix(const Shapes& s, const scalar_t* grad, const scalar_t* qv, const scalar_t* p,       \
                              const int64_t* index, const bool* mask, scalar_t scaling, scalar_t* grad_qv,        \
                              scalar_t* grad_p, int64_t h) {                                                      \
    backward_head<scalar_t>(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);                            \
  }                                                                                                               \
  void backward_##suffix(const Shapes& s, const scalar_t* grad, const scalar_t* qv, const scalar_t* p,            \
                         const int64_t* index, const bool* mask, scalar_t scaling, scalar_t* grad_qv,             \
                         scalar_t* grad_p, int64_t h) {                                                           \
    if (has_avx2())                                                                                               \
      backward_avx2_##suffix(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);                           \
    else                                                                                                          \
      backward_base_##suffix(s, grad, qv, p, index, mask, scaling, grad_qv, grad_p, h);                           \
  }

INSNET_KERNELS(float, float)
INSNET_KERNELS(double, double)

// The inputs made contiguous in place; returns the mask's data, or nullptr where nothing is blocked.
const bool* make_contiguous(const Shapes& s, at::Tensor& qv, at::Tensor& p, at::Tensor& index, at::Tensor& mask) {
  qv = qv.contiguous();
  p = p.contiguous();
  index = index.contiguous();
  if (!s.Bm) return nullptr;
  mask = mask.contiguous();
  return mask.data_ptr<bool>();
}

at::Tensor forward(at::Tensor qv, at::Tensor p, at::Tensor index, at::Tensor mask, double scaling) {
  const Shapes s = check(qv, p, index, mask);
  const bool* m = make_contiguous(s, qv, p, index, mask);
  at::Tensor out = at::empty({s.B, s.H, s.T, s.S}, qv.options());
  const int64_t rows = s.B * s.H * s.T;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.S * s.Dh));
  if (qv.scalar_type() == at::kFloat) {
    const float *q = qv.data_ptr<float>(), *pp = p.data_ptr<float>();
    const int64_t* idx = index.data_ptr<int64_t>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      forward_float(s, q, pp, idx, m, static_cast<float>(scaling), o, begin, end);
    });
  } else {
    TORCH_CHECK(qv.scalar_type() == at::kDouble, "offset_scores: float32 or float64 only");
    const double *q = qv.data_ptr<double>(), *pp = p.data_ptr<double>();
    const int64_t* idx = index.data_ptr<int64_t>();
    double* o = out.data_ptr<double>();
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      forward_double(s, q, pp, idx, m, scaling, o, begin, end);
    });
  }
  return out;
}

std::vector<at::Tensor> backward(at::Tensor grad, at::Tensor qv, at::Tensor p, at::Tensor index, at::Tensor mask,
                                 double scaling) {
  const Shapes s = check(qv, p, index, mask);
  TORCH_CHECK(grad.sizes() == at::IntArrayRef({s.B, s.H, s.T, s.S}), "offset_scores: grad must be [B, H, T, S]");
  grad = grad.contiguous().to(qv.scalar_type());
  const bool* m = make_contiguous(s, qv, p, index, mask);
  at::Tensor grad_qv = at::zeros_like(qv);
  at::Tensor grad_p = at::zeros_like(p);
  const int64_t* idx = index.data_ptr<int64_t>();
  if (qv.scalar_type() == at::kFloat) {
    const float *g = grad.data_ptr<float>(), *q = qv.data_ptr<float>(), *pp = p.data_ptr<float>();
    float *gq = grad_qv.data_ptr<float>(), *gp = grad_p.data_ptr<float>();
    at::parallel_for(0, s.H, 1, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h)
        backward_float(s, g, q, pp, idx, m, static_cast<float>(scaling), gq, gp, h);
    });
  } else {
    TORCH_CHECK(qv.scalar_type() == at::kDouble, "offset_scores: float32 or float64 only");
    const double *g = grad.data_ptr<double>(), *q = qv.data_ptr<double>(), *pp = p.data_ptr<double>();
    double *gq = grad_qv.data_ptr<double>(), *gp = grad_p.data_ptr<double>();
    at::parallel_for(0, s.H, 1, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) backward_double(s, g, q, pp, idx, m, scaling, gq, gp, h);
    });
  }
  return {grad_qv, grad_p};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "offset scores of the unblocked pairs: bias [B, H, T, S], -inf where blocked");
  m.def("backward", &backward, "(grad_qv [B, H, T, Dh], grad_p [H, R, Dh]) of the unblocked pairs");
}

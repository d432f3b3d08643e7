// The fused LSTM's and GRU's work on a CPU (recdrop/cpu_kernels.py): the LSTM's whole loop, forward and
// backward, each step's product and pointwise work in one parallel region; the GRU's pointwise work, one call a
// step forward, one backward.
// Vectorised with ATen's at::vec for the instructions the build was given, split over the intra-op threads. The
// same equations as the Triton kernels of recdrop/triton_kernels.py.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>

#include <algorithm>

namespace {

using at::vec::Vectorized;

// Elements of a state below which a step stays on one thread: a fork costs more than it saves there.
constexpr int64_t GRAIN = 4096;

template <typename T>
inline Vectorized<T> sigmoid(const Vectorized<T>& x) {
  const Vectorized<T> one(T(1));
  return one / (one + x.neg().exp());
}

// tanh(x) = 2 sigmoid(2x) - 1, as the torch path computes g: one exp instead of Sleef's tanh, about
// twice the cost.
template <typename T>
inline Vectorized<T> activation(const Vectorized<T>& x, bool relu) {
  const Vectorized<T> zero(T(0)), one(T(1)), two(T(2));
  return relu ? at::vec::maximum(x, zero) : two * sigmoid(two * x) - one;
}

template <typename T>
inline Vectorized<T> activation_slope(const Vectorized<T>& a, bool relu) {  // from a = act(x)
  const Vectorized<T> zero(T(0)), one(T(1));
  return relu ? Vectorized<T>::blendv(zero, one, a > zero) : one - a * a;
}

// A factor of d(.) at one step: absent, a number (the test phase's 1 - p) or a mask of the state's shape
// (``SequenceFactor::at``; a step of its own, ``step_factor``).
template <typename T>
struct Factor {
  const T* data = nullptr;
  T scalar = T(1);
  bool on = false;

  Factor(const T* data_, T scalar_, bool on_) : data(data_), scalar(scalar_), on(on_) {}

  Vectorized<T> apply(const Vectorized<T>& x, int64_t offset, int64_t count) const {
    if (!on) return x;
    return x * (data ? Vectorized<T>::loadu(data + offset, count) : Vectorized<T>(scalar));
  }
};

// A factor of d(.) over a sequence: absent, a number, a mask of the state's shape for every step (per-sequence
// sampling), or a (T, state) mask with one slice a step (per-step sampling).
template <typename T>
struct SequenceFactor {
  const T* data = nullptr;
  int64_t step_stride = 0;
  T scalar = T(1);
  bool on = false;

  SequenceFactor(const c10::optional<at::Tensor>& mask, c10::optional<double> number, bool per_step,
                 const at::Tensor& state, int64_t steps) {
    if (mask.has_value()) {
      TORCH_CHECK(mask->device().is_cpu() && mask->is_contiguous() && mask->scalar_type() == state.scalar_type() &&
                      (per_step ? mask->dim() == state.dim() + 1 && mask->size(0) == steps &&
                                      mask->sizes().slice(1) == state.sizes()
                                : mask->sizes() == state.sizes()),
                  "recdrop.cpu_kernels: a mask must be a contiguous CPU tensor of the state's shape and dtype "
                  "(with a leading axis of the steps where sampled per step)");
      data = mask->data_ptr<T>();
      step_stride = per_step ? state.numel() : 0;
      on = true;
    } else if (number.has_value()) {
      scalar = T(*number);
      on = true;
    }
  }

  Factor<T> at(int64_t step) const { return Factor<T>(data ? data + step * step_stride : nullptr, scalar, on); }
};

// The factor of a single step (the GRU's calls): a mask of the state's shape, a number, or none.
template <typename T>
Factor<T> step_factor(const c10::optional<at::Tensor>& mask, c10::optional<double> number, const at::Tensor& state) {
  return SequenceFactor<T>(mask, number, false, state, 1).at(0);
}

void check_dense(const at::Tensor& t, const at::Tensor& state, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == state.scalar_type() && t.is_contiguous(),
              "recdrop.cpu_kernels: ", name, " must be a contiguous CPU tensor of the state's dtype");
}

// Every dense tensor a step reads or writes: the state's shape ([R,] B, H), or its gates' ([R,] B, G H) with
// G gates (the LSTM's 4, the GRU's 3).
void check_step(const at::Tensor& state, std::initializer_list<const at::Tensor*> states,
                std::initializer_list<const at::Tensor*> gates, int64_t n_gates) {
  TORCH_CHECK(state.dim() == 2 || state.dim() == 3, "recdrop.cpu_kernels: a state is (B, H) or a group's (R, B, H)");
  for (const auto* t : states) {
    check_dense(*t, state, "a state or its gradient");
    TORCH_CHECK(t->sizes() == state.sizes(), "recdrop.cpu_kernels: a state's gradient must have the state's shape");
  }
  for (const auto* t : gates) {
    check_dense(*t, state, "the gates");
    TORCH_CHECK(t->dim() == state.dim() && t->size(-1) == n_gates * state.size(-1) &&
                    t->numel() == n_gates * state.numel(),
                "recdrop.cpu_kernels: the gates must be ([R,] B, ", n_gates, "H)");
  }
}

// Where the rows of a ([R,] B, 4H) tensor whose runs lie run_stride apart begin, for a state ([R,] B, H).
struct GateRows {
  int64_t batch, hidden, run_stride;
  int64_t at(int64_t row) const { return (row / batch) * run_stride + (row % batch) * 4 * hidden; }
};

GateRows gate_rows(const at::Tensor& t, const at::Tensor& state, const char* name) {
  const int64_t hidden = state.size(-1), batch = state.size(-2);
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == state.scalar_type() && t.dim() == state.dim() &&
                  (t.dim() == 2 || t.size(0) == state.size(0)) && t.size(-1) == 4 * hidden && t.size(-2) == batch &&
                  t.stride(-1) == 1 && (batch == 1 || t.stride(-2) == 4 * hidden),
              "recdrop.cpu_kernels: each run's rows of ", name, " must be contiguous, ([R,] B, 4H)");
  return {batch, hidden, t.dim() == 3 ? t.stride(0) : 0};
}

// One row of an LSTM step forward, units [j0, j1): from the row's pre-activations ``pre`` (plus gx, ``add``,
// where given apart), its gates after their activations to ``go`` (may be ``pre``), d(g_t) to ``gs`` (where
// given), c_t, act(c_t) and h_t; ``s`` is the row's offset in the state and its masks.
template <typename T>
inline void lstm_forward_row(const T* pre, const T* add, const T* cp, const Factor<T>& sem, const Factor<T>& moon,
                             T* go, T* gs, T* co, T* tco, T* ho, int64_t s, int64_t H, int64_t j0, int64_t j1,
                             bool relu) {
  using V = Vectorized<T>;
  for (int64_t j = j0; j < j1; j += V::size()) {
    const int64_t n = std::min<int64_t>(V::size(), j1 - j);
    auto pre_activation = [&](int64_t gate) {  // the product, plus gx where given apart
      const V x = V::loadu(pre + gate * H + j, n);
      return add ? x + V::loadu(add + gate * H + j, n) : x;
    };
    const V i = sigmoid(pre_activation(0)), f = sigmoid(pre_activation(1)), o = sigmoid(pre_activation(3));
    const V act_g = activation(pre_activation(2), relu);
    i.store(go + j, n);
    f.store(go + H + j, n);
    act_g.store(go + 2 * H + j, n);
    o.store(go + 3 * H + j, n);
    const V dropped_g = sem.apply(act_g, s + j, n);  // Eq. 9: d(g_t)
    if (gs) dropped_g.store(gs + s + j, n);
    const V c = moon.apply(f * V::loadu(cp + s + j, n) + i * dropped_g, s + j, n);  // Eq. 8: d(c_t)
    const V tc = activation(c, relu);
    c.store(co + s + j, n);
    tc.store(tco + s + j, n);
    (o * tc).store(ho + s + j, n);  // Eq. 6
  }
}

// One row of an LSTM step backward, units [j0, j1): from the dh arriving at h_t (``dhp``, before the next step's
// Gal factor ``gal``), the output's ``dyp``, the carried dc (``dcp``, plus ``dcs``, c_t's own gradient, where
// given) and the forward's gates ``gp`` (the row's), c_{t-1} and act(c_t), the row's pre-activation gradients
// to ``dg`` and dc_{t-1} to ``dco`` (may be ``dcp``); ``s`` is the row's offset in the state and its masks.
template <typename T>
inline void lstm_backward_row(const T* dhp, const Factor<T>& gal, const T* dyp, const T* dcp, const T* dcs,
                              const T* gp, const T* cpp, const T* tcp, const Factor<T>& sem, const Factor<T>& moon,
                              T* dg, T* dco, int64_t s, int64_t H, int64_t j0, int64_t j1, bool relu) {
  using V = Vectorized<T>;
  const V one(T(1));
  for (int64_t j = j0; j < j1; j += V::size()) {
    const int64_t n = std::min<int64_t>(V::size(), j1 - j);
    const V i = V::loadu(gp + j, n), f = V::loadu(gp + H + j, n);
    const V act_g = V::loadu(gp + 2 * H + j, n), o = V::loadu(gp + 3 * H + j, n);
    const V a = V::loadu(tcp + s + j, n);
    // dh reaching h_t: from the next step through d(h_t) of Eq. 7, and from the output
    const V dh = gal.apply(V::loadu(dhp + s + j, n), s + j, n) + V::loadu(dyp + s + j, n);
    const V dc_in = dcs ? V::loadu(dcp + s + j, n) + V::loadu(dcs + s + j, n) : V::loadu(dcp + s + j, n);
    const V dc = moon.apply(dc_in + dh * o * activation_slope(a, relu), s + j, n);  // Eq. 8
    (dc * i * (one - i) * sem.apply(act_g, s + j, n)).store(dg + j, n);  // Eq. 9: d(g_t)
    (dc * f * (one - f) * V::loadu(cpp + s + j, n)).store(dg + H + j, n);
    sem.apply(dc * i * activation_slope(act_g, relu), s + j, n).store(dg + 2 * H + j, n);
    (dh * o * (one - o) * a).store(dg + 3 * H + j, n);
    (dc * f).store(dco + s + j, n);
  }
}

// Whether oneDNN's batch-reduce GEMM kernel, as ATen exposes it (at::native::cpublas::brgemm), computes float32
// products here: a CPU or build without it raises, and (defensively) a wrong result counts as none. Once per
// process.
bool brgemm_works() {
#ifdef CPUBLAS_BRGEMM_F32F32F32
  static const bool works = [] {
    try {
      const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
      float c[4] = {0, 0, 0, 0};
      at::native::cpublas::brgemm(2, 2, 2, 2, 2, 2, false, a, b, c, false);
      at::native::cpublas::brgemm_release(false);
      return c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50;
    } catch (...) {
      return false;
    }
  }();
  return works;
#else
  return false;
#endif
}

// C = A B for row-major A (M, K) and B (K, N) with leading dimensions, on the calling thread: a part of a step's
// product, each thread computing its own units' columns. With ``brgemm`` (float32 only) through oneDNN's
// batch-reduce GEMM kernel (no packing of B, no per-call setup beyond a cached kernel), else ATen's mm (MKL's
// on x86; called inside a parallel region, it runs on the calling thread).
template <typename T>
void product(bool brgemm, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
             int64_t ldc) {
#ifdef CPUBLAS_BRGEMM_F32F32F32
  if constexpr (std::is_same_v<T, float>) {
    if (brgemm) {
      at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, false, A, B, C, false);
      return;
    }
  }
#endif
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  at::Tensor c = at::from_blob(C, {M, N}, {ldc, 1}, options);
  at::mm_out(c, at::from_blob(const_cast<T*>(A), {M, K}, {lda, 1}, options),
             at::from_blob(const_cast<T*>(B), {K, N}, {ldb, 1}, options));
}

void release_products(bool brgemm) {  // at the end of a thread's part of a region
#ifdef CPUBLAS_BRGEMM_F32F32F32
  if (brgemm) at::native::cpublas::brgemm_release(false);
#endif
}

// Units a thread takes at once in a sequence's step, at most: its product's columns and their pointwise work,
// so that each step is one parallel region and a unit's gates stay in the thread's cache between the two. Fewer
// (down to MIN_UNITS, a multiple of the vector width) where that leaves threads idle.
constexpr int64_t UNITS = 64, MIN_UNITS = 16;
// Multiply-adds below which a step's work stays on one thread.
constexpr int64_t SEQUENCE_GRAIN = 1 << 16;

// The units of a sequence's state ([R,] B, H) in blocks, for every run: (run, first unit, units).
struct UnitBlocks {
  int64_t runs, batch, hidden, units, per_run, count, grain;
  UnitBlocks(const at::Tensor& state, int64_t work_per_unit) {
    hidden = state.size(-1);
    batch = state.size(-2);
    runs = state.dim() == 3 ? state.size(0) : 1;
    const int64_t threads = at::get_num_threads(), blocks_wanted = (threads + runs - 1) / runs;  // per run
    const int64_t even = (hidden + blocks_wanted - 1) / blocks_wanted;
    units = std::clamp<int64_t>((even + MIN_UNITS - 1) / MIN_UNITS * MIN_UNITS, MIN_UNITS, UNITS);
    per_run = (hidden + units - 1) / units;
    count = runs * per_run;
    grain = std::max<int64_t>(1, SEQUENCE_GRAIN / std::max<int64_t>(1, batch * std::min(hidden, units) * work_per_unit));
  }
  int64_t run(int64_t block) const { return block / per_run; }
  int64_t first(int64_t block) const { return (block % per_run) * units; }
  int64_t size(int64_t block) const { return std::min(units, hidden - first(block)); }
};

void check_sequence(const at::Tensor& t, const at::Tensor& state, int64_t steps, int64_t width, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == state.scalar_type() && t.is_contiguous() &&
                  t.dim() == state.dim() + 1 && t.size(0) == steps && t.size(-1) == width &&
                  t.sizes().slice(1, state.dim() - 1) == state.sizes().slice(0, state.dim() - 1),
              "recdrop.cpu_kernels: ", name, " must be a contiguous CPU tensor (", steps, ", [R,] B, ", width,
              ") of the state's dtype");
}

// A run's weight for the products: ([R,] rows, cols), contiguous.
void check_weight(const at::Tensor& w, const at::Tensor& state, int64_t rows, int64_t cols, const char* name) {
  TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == state.scalar_type() && w.is_contiguous() &&
                  w.dim() == state.dim() && w.size(-2) == rows && w.size(-1) == cols &&
                  (w.dim() == 2 || w.size(0) == state.size(0)),
              "recdrop.cpu_kernels: ", name, " must be a contiguous CPU tensor ([R,] ", rows, ", ", cols,
              ") of the state's dtype");
}

// dst = src^T for a (rows, columns) block of dense rows ``ld_src`` apart, into rows ``ld_dst`` apart, on the calling
// thread: in tiles of 16 by 16 transposed in vector registers (at::vec::transpose_mxn), the edges' tiles masked.
template <typename T>
void transpose_block(const T* src, int64_t ld_src, T* dst, int64_t ld_dst, int64_t rows, int64_t columns) {
  constexpr int64_t TILE = 16;
  for (int64_t j0 = 0; j0 < columns; j0 += TILE) {
    const int64_t n = std::min(TILE, columns - j0);
    for (int64_t i0 = 0; i0 < rows; i0 += TILE) {
      const int64_t m = std::min(TILE, rows - i0);
      const T* from = src + i0 * ld_src + j0;
      T* to = dst + j0 * ld_dst + i0;
      if (m == TILE && n == TILE) {
        at::vec::transpose_mxn<T, TILE, TILE>(from, ld_src, to, ld_dst);
      } else {
        at::vec::transpose_mxn<T>(from, ld_src, to, ld_dst, m, n);
      }
    }
  }
}

// w_hh ([R,] 4H, H) re-laid for a sequence's products, each block of units' columns contiguous (its rows
// ``size`` apart), so that a thread's product reads one dense run of memory: the forward's w_hh^T (H, 4H), a
// block's columns of each gate in turn, or the backward's w_hh (4H, H). Block (r, j0) starts at r 4H H + 4H j0.
template <typename T>
at::Tensor weight_in_unit_blocks(const at::Tensor& w_hh, const UnitBlocks& blocks, bool transpose) {
  const int64_t H = blocks.hidden, run = 4 * H * H;
  at::Tensor out = at::empty({blocks.runs * run}, w_hh.options());
  const T* src = w_hh.data_ptr<T>();
  T* dst = out.data_ptr<T>();
  at::parallel_for(0, blocks.count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t r = blocks.run(block), j0 = blocks.first(block), n = blocks.size(block);
      const T* w = src + r * run;
      T* b = dst + r * run + 4 * H * j0;
      if (transpose) {  // gate q's block: b[q H n + k n + jj] = w[(q H + j0 + jj) H + k]
        for (int64_t q = 0; q < 4; ++q) transpose_block(w + (q * H + j0) * H, H, b + q * H * n, n, n, H);
      } else {  // b[k n + jj] = w[k H + j0 + jj]
        for (int64_t k = 0; k < 4 * H; ++k) std::copy(w + k * H + j0, w + k * H + j0 + n, b + k * n);
      }
    }
  });
  return out;
}

template <typename T>
void lstm_forward_over(const at::Tensor& gx, const at::Tensor& h0, const at::Tensor& w_hh,
                       const SequenceFactor<T>& gal, const SequenceFactor<T>& sem, const SequenceFactor<T>& moon,
                       const at::Tensor& gates_all, const at::Tensor& c_all, const at::Tensor& tc_all,
                       const at::Tensor& ys, const c10::optional<at::Tensor>& hin_all, bool relu, bool brgemm) {
  const int64_t steps = gx.size(0), H = h0.size(-1), B = h0.size(-2), state = h0.numel();
  if (!steps || !state) return;  // an empty sequence or batch: nothing to compute
  const UnitBlocks blocks(h0, 4 * H);
  const GateRows add_rows = gate_rows(gx.select(0, 0), h0, "gx");
  const int64_t add_step = gx.stride(0), gate_run = B * 4 * H, w_run = H * 4 * H;
  const at::Tensor w_blocks = weight_in_unit_blocks<T>(w_hh, blocks, true);
  const T* gxp = gx.data_ptr<T>();
  const T* w = w_blocks.data_ptr<T>();
  T* gates = gates_all.data_ptr<T>();
  T* cs = c_all.data_ptr<T>();
  T* tcs = tc_all.data_ptr<T>();
  T* hs = ys.data_ptr<T>();
  T* hin = hin_all.has_value() ? hin_all->data_ptr<T>() : nullptr;
  if (hin && steps) {  // d(h_0), Eq. 7: every later step's is written by the step before it
    const Factor<T> first = gal.at(0);
    const T* h0p = h0.data_ptr<T>();
    for (int64_t i = 0; i < state; i += Vectorized<T>::size()) {
      const int64_t n = std::min<int64_t>(Vectorized<T>::size(), state - i);
      first.apply(Vectorized<T>::loadu(h0p + i, n), i, n).store(hin + i, n);
    }
  }
  for (int64_t k = 0; k < steps; ++k) {
    const T* h_in = hin ? hin + k * state : k ? hs + (k - 1) * state : h0.data_ptr<T>();
    T* g = gates + k * B * 4 * H * blocks.runs;
    const Factor<T> sem_k = sem.at(k), moon_k = moon.at(k), gal_next = gal.at(std::min(k + 1, steps - 1));
    at::parallel_for(0, blocks.count, blocks.grain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const int64_t r = blocks.run(block), j0 = blocks.first(block), j1 = j0 + blocks.size(block);
        for (int64_t gate = 0; gate < 4; ++gate) {  // this block's columns of each gate: h W^T
          product<T>(brgemm, B, j1 - j0, H, h_in + r * B * H, H, w + r * w_run + 4 * H * j0 + gate * H * (j1 - j0),
                     j1 - j0, g + r * gate_run + gate * H + j0, 4 * H);
        }
        for (int64_t row = r * B; row < (r + 1) * B; ++row) {
          T* gr = g + row * 4 * H;
          lstm_forward_row(gr, gxp + k * add_step + add_rows.at(row), cs + k * state, sem_k, moon_k, gr,
                           static_cast<T*>(nullptr), cs + (k + 1) * state, tcs + k * state, hs + k * state, row * H,
                           H, j0, j1, relu);
          if (hin && k + 1 < steps) {  // d(h_t) for the next step's product, Eq. 7
            for (int64_t j = j0; j < j1; j += Vectorized<T>::size()) {
              const int64_t n = std::min<int64_t>(Vectorized<T>::size(), j1 - j), at = row * H + j;
              gal_next.apply(Vectorized<T>::loadu(hs + k * state + at, n), at, n).store(hin + (k + 1) * state + at, n);
            }
          }
        }
      }
      release_products(brgemm);
    });
  }
}

template <typename T>
void lstm_backward_over(const at::Tensor& d_ys, const at::Tensor& dh_n, const at::Tensor& dc,
                        const c10::optional<at::Tensor>& d_cs, const at::Tensor& w_hh, const SequenceFactor<T>& gal,
                        const SequenceFactor<T>& sem, const SequenceFactor<T>& moon, const at::Tensor& gates_all,
                        const at::Tensor& c_all, const at::Tensor& tc_all, const at::Tensor& d_gates,
                        const at::Tensor& dh, bool relu, bool brgemm) {
  const int64_t steps = d_ys.size(0), H = dh.size(-1), B = dh.size(-2), state = dh.numel();
  if (!steps || !state) {  // an empty sequence or batch: the final state's gradient is the first's
    dh.copy_(dh_n);
    return;
  }
  const UnitBlocks blocks(dh, 4 * H);
  const GateRows d_rows = gate_rows(d_gates.select(0, 0), dh, "d_gates");
  const int64_t d_step = d_gates.stride(0), w_run = 4 * H * H;
  const at::Tensor w_blocks = weight_in_unit_blocks<T>(w_hh, blocks, false);
  const T* dyp = d_ys.data_ptr<T>();
  const T* dcs = d_cs.has_value() ? d_cs->data_ptr<T>() : nullptr;
  const T* w = w_blocks.data_ptr<T>();
  const T* gates = gates_all.data_ptr<T>();
  const T* cs = c_all.data_ptr<T>();
  const T* tcs = tc_all.data_ptr<T>();
  const T* dh_last = dh_n.data_ptr<T>();
  T* dg = d_gates.data_ptr<T>();
  T* dcp = dc.data_ptr<T>();
  T* dhp = dh.data_ptr<T>();
  // Step k's region: dh reaching h_k (d_gates of step k + 1 times w_hh, on this block's units), then step k's
  // pointwise backward on them; the last region's product gives dh_0.
  for (int64_t k = steps - 1; k >= -1; --k) {
    const bool last = k == steps - 1;
    const Factor<T> gal_next = last ? Factor<T>(nullptr, T(1), false) : gal.at(k + 1);
    at::parallel_for(0, blocks.count, blocks.grain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const int64_t r = blocks.run(block), j0 = blocks.first(block), j1 = j0 + blocks.size(block);
        if (!last) {
          product<T>(brgemm, B, j1 - j0, 4 * H, dg + (k + 1) * d_step + d_rows.at(r * B), 4 * H,
                     w + r * w_run + 4 * H * j0, j1 - j0, dhp + r * B * H + j0, H);
        }
        if (k < 0) continue;
        const Factor<T> sem_k = sem.at(k), moon_k = moon.at(k);
        for (int64_t row = r * B; row < (r + 1) * B; ++row) {
          lstm_backward_row(last ? dh_last : dhp, gal_next, dyp + k * state, dcp, dcs ? dcs + k * state : dcs,
                            gates + (k * state + row * H) * 4, cs + k * state, tcs + k * state, sem_k, moon_k,
                            dg + k * d_step + d_rows.at(row), dcp, row * H, H, j0, j1, relu);
        }
      }
      release_products(brgemm);
    });
  }
  const Factor<T> first = gal.at(0);  // d(h_0) of Eq. 7 entered the first product
  if (first.on) {
    for (int64_t i = 0; i < state; i += Vectorized<T>::size()) {
      const int64_t n = std::min<int64_t>(Vectorized<T>::size(), state - i);
      first.apply(Vectorized<T>::loadu(dhp + i, n), i, n).store(dhp + i, n);
    }
  }
}

template <typename T>
void gru_forward(const at::Tensor& gx, const at::Tensor& gh, const at::Tensor& h_prev, const Factor<T>& sem,
                 const Factor<T>& moon, const at::Tensor& rzn_out, const at::Tensor& hn_out, const at::Tensor& h_out,
                 bool relu) {
  using V = Vectorized<T>;
  const V one(T(1));
  const int64_t H = h_prev.size(-1), rows = h_prev.numel() / std::max<int64_t>(H, 1);
  const T* gxp = gx.data_ptr<T>();
  const T* ghp = gh.data_ptr<T>();
  const T* hpp = h_prev.data_ptr<T>();
  T* rzn = rzn_out.data_ptr<T>();
  T* hno = hn_out.data_ptr<T>();
  T* ho = h_out.data_ptr<T>();
  at::parallel_for(0, rows, std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t s = row * H, g = row * 3 * H;
      for (int64_t j = 0; j < H; j += V::size()) {
        const int64_t n = std::min<int64_t>(V::size(), H - j);
        const V r = sigmoid(V::loadu(gxp + g + j, n) + V::loadu(ghp + g + j, n));
        const V z = sigmoid(V::loadu(gxp + g + H + j, n) + V::loadu(ghp + g + H + j, n));
        const V hn = V::loadu(ghp + g + 2 * H + j, n);  // W_hn d(h_{t-1}) + b_hn
        const V cand = activation(V::loadu(gxp + g + 2 * H + j, n) + r * hn, relu);
        // Eq. 13 in torch.nn's form: h_t = (1 - z) d(n_t) + z h_{t-1}, Moon's d(.) outside
        const V h = moon.apply((one - z) * sem.apply(cand, s + j, n) + z * V::loadu(hpp + s + j, n), s + j, n);
        r.store(rzn + g + j, n);
        z.store(rzn + g + H + j, n);
        cand.store(rzn + g + 2 * H + j, n);
        hn.store(hno + s + j, n);
        h.store(ho + s + j, n);
      }
    }
  });
}

template <typename T>
void gru_backward(const at::Tensor& dz_in, const at::Tensor& mm, const Factor<T>& gal, const at::Tensor& d_y,
                  const Factor<T>& moon, const Factor<T>& sem, const at::Tensor& rzn, const at::Tensor& hn,
                  const at::Tensor& h_prev, const at::Tensor& d_gx, const at::Tensor& d_gh, const at::Tensor& dz_out,
                  bool relu) {
  using V = Vectorized<T>;
  const V one(T(1));
  const int64_t H = dz_in.size(-1), rows = dz_in.numel() / std::max<int64_t>(H, 1);
  const T* dzp = dz_in.data_ptr<T>();
  const T* mmp = mm.data_ptr<T>();
  const T* dyp = d_y.data_ptr<T>();
  const T* rznp = rzn.data_ptr<T>();
  const T* hnp = hn.data_ptr<T>();
  const T* hpp = h_prev.data_ptr<T>();
  T* dgx = d_gx.data_ptr<T>();
  T* dgh = d_gh.data_ptr<T>();
  T* dzo = dz_out.data_ptr<T>();
  at::parallel_for(0, rows, std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t s = row * H, g = row * 3 * H;
      for (int64_t j = 0; j < H; j += V::size()) {
        const int64_t n = std::min<int64_t>(V::size(), H - j);
        // dh reaching h_t: through z * h_t of the next step, through d(h_t) into its product (Gal), the output
        const V dh = moon.apply(V::loadu(dzp + s + j, n) + gal.apply(V::loadu(mmp + s + j, n), s + j, n) +
                                    V::loadu(dyp + s + j, n), s + j, n);
        const V r = V::loadu(rznp + g + j, n), z = V::loadu(rznp + g + H + j, n);
        const V cand = V::loadu(rznp + g + 2 * H + j, n);
        const V d_n = sem.apply(dh * (one - z), s + j, n) * activation_slope(cand, relu);
        const V d_z = dh * (V::loadu(hpp + s + j, n) - sem.apply(cand, s + j, n)) * z * (one - z);
        const V d_r = d_n * V::loadu(hnp + s + j, n) * r * (one - r);
        d_r.store(dgx + g + j, n);
        d_z.store(dgx + g + H + j, n);
        d_n.store(dgx + g + 2 * H + j, n);
        d_r.store(dgh + g + j, n);
        d_z.store(dgh + g + H + j, n);
        (d_n * r).store(dgh + g + 2 * H + j, n);
        (dh * z).store(dzo + s + j, n);
      }
    }
  });
}

}  // namespace

void gru_forward_step(const at::Tensor& gx, const at::Tensor& gh, const at::Tensor& h_prev,
                      const c10::optional<at::Tensor>& sem, c10::optional<double> sem_number,
                      const c10::optional<at::Tensor>& moon, c10::optional<double> moon_number,
                      const at::Tensor& rzn_out, const at::Tensor& hn_out, const at::Tensor& h_out, bool relu) {
  check_step(h_prev, {&h_prev, &hn_out, &h_out}, {&gx, &gh, &rzn_out}, 3);
  AT_DISPATCH_FLOATING_TYPES(h_prev.scalar_type(), "gru_forward_step", [&] {
    gru_forward<scalar_t>(gx, gh, h_prev, step_factor<scalar_t>(sem, sem_number, h_prev),
                          step_factor<scalar_t>(moon, moon_number, h_prev), rzn_out, hn_out, h_out, relu);
  });
}

void gru_backward_step(const at::Tensor& dz_in, const at::Tensor& mm, const c10::optional<at::Tensor>& gal,
                       c10::optional<double> gal_number, const at::Tensor& d_y, const c10::optional<at::Tensor>& moon,
                       c10::optional<double> moon_number, const c10::optional<at::Tensor>& sem,
                       c10::optional<double> sem_number, const at::Tensor& rzn, const at::Tensor& hn,
                       const at::Tensor& h_prev, const at::Tensor& d_gx, const at::Tensor& d_gh,
                       const at::Tensor& dz_out, bool relu) {
  check_step(dz_in, {&dz_in, &mm, &d_y, &hn, &h_prev, &dz_out}, {&rzn, &d_gx, &d_gh}, 3);
  AT_DISPATCH_FLOATING_TYPES(dz_in.scalar_type(), "gru_backward_step", [&] {
    gru_backward<scalar_t>(dz_in, mm, step_factor<scalar_t>(gal, gal_number, dz_in), d_y,
                           step_factor<scalar_t>(moon, moon_number, dz_in), step_factor<scalar_t>(sem, sem_number, dz_in), rzn,
                           hn, h_prev, d_gx, d_gh, dz_out, relu);
  });
}

// The transpose of a matrix (m, n), contiguous (n, m): where its rows are dense, in tiles of 16 by 16 transposed
// in vector registers (at::vec::transpose_mxn), the output's rows split over the intra-op threads (a transposing
// copy in ATen runs on one thread); otherwise ATen's own copy.
at::Tensor transposed(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 2 && t.device().is_cpu(), "recdrop.cpu_kernels: transposed takes a CPU matrix");
  if (t.stride(1) != 1 || t.t().is_contiguous()) return t.t().contiguous();  // nothing to copy, or no dense rows
  const int64_t m = t.size(0), n = t.size(1);
  at::Tensor out = at::empty({n, m}, t.options().memory_format(at::MemoryFormat::Contiguous));
  constexpr int64_t COLUMNS = 16;  // a thread's share: whole output rows, a tile's worth at a time
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "transposed", [&] {
    const scalar_t* src = t.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, (n + COLUMNS - 1) / COLUMNS, std::max<int64_t>(1, GRAIN / std::max<int64_t>(1, COLUMNS * m)),
                     [&](int64_t begin, int64_t end) {
      for (int64_t tile = begin; tile < end; ++tile) {
        const int64_t j0 = tile * COLUMNS;
        transpose_block(src + j0, t.stride(0), dst + j0 * m, m, m, std::min(COLUMNS, n - j0));
      }
    });
  });
  return out;
}

void check_products(bool brgemm, const at::Tensor& state) {
  TORCH_CHECK(!brgemm || (state.scalar_type() == at::kFloat && brgemm_works()),
              "recdrop.cpu_kernels: oneDNN's brgemm computes float32 products only, where it is built (brgemm_works)");
}

void lstm_forward_sequence(const at::Tensor& gx, const at::Tensor& h0, const at::Tensor& w_hh,
                           const c10::optional<at::Tensor>& gal, c10::optional<double> gal_number,
                           const c10::optional<at::Tensor>& sem, c10::optional<double> sem_number,
                           const c10::optional<at::Tensor>& moon, c10::optional<double> moon_number, bool per_step,
                           const at::Tensor& gates_all, const at::Tensor& c_all, const at::Tensor& tc_all,
                           const at::Tensor& ys, const c10::optional<at::Tensor>& hin_all, bool relu,
                           bool brgemm) {
  check_step(h0, {&h0}, {}, 4);
  const int64_t steps = gx.size(0), H = h0.size(-1);
  TORCH_CHECK(gx.dim() == h0.dim() + 1, "recdrop.cpu_kernels: gx must be (T, [R,] B, 4H)");
  check_weight(w_hh, h0, 4 * H, H, "w_hh");
  check_sequence(gates_all, h0, steps, 4 * H, "the gates");
  check_sequence(c_all, h0, steps + 1, H, "c_0 .. c_T");
  check_sequence(tc_all, h0, steps, H, "act(c_t)");
  check_sequence(ys, h0, steps, H, "h_t");
  TORCH_CHECK(hin_all.has_value() == (gal.has_value() || gal_number.has_value()),
              "recdrop.cpu_kernels: d(h_{t-1}) is kept where, and only where, Gal's factor acts");
  if (hin_all.has_value()) check_sequence(*hin_all, h0, steps, H, "d(h_{t-1})");
  check_products(brgemm, h0);
  AT_DISPATCH_FLOATING_TYPES(h0.scalar_type(), "lstm_forward_sequence", [&] {
    lstm_forward_over<scalar_t>(gx, h0, w_hh, SequenceFactor<scalar_t>(gal, gal_number, per_step, h0, steps),
                                SequenceFactor<scalar_t>(sem, sem_number, per_step, h0, steps),
                                SequenceFactor<scalar_t>(moon, moon_number, per_step, h0, steps), gates_all, c_all,
                                tc_all, ys, hin_all, relu, brgemm);
  });
}

at::Tensor lstm_backward_sequence(const at::Tensor& d_ys, const at::Tensor& dh_n, const at::Tensor& dc,
                                  const c10::optional<at::Tensor>& d_cs, const at::Tensor& w_hh,
                                  const c10::optional<at::Tensor>& gal, c10::optional<double> gal_number,
                                  const c10::optional<at::Tensor>& sem, c10::optional<double> sem_number,
                                  const c10::optional<at::Tensor>& moon, c10::optional<double> moon_number,
                                  bool per_step, const at::Tensor& gates_all, const at::Tensor& c_all,
                                  const at::Tensor& tc_all, const at::Tensor& d_gates, bool relu, bool brgemm) {
  check_step(dc, {&dc, &dh_n}, {}, 4);
  const int64_t steps = d_ys.size(0), H = dc.size(-1);
  check_sequence(d_ys, dc, steps, H, "the outputs' gradient");
  if (d_cs.has_value()) check_sequence(*d_cs, dc, steps, H, "c_t's gradient");
  check_weight(w_hh, dc, 4 * H, H, "w_hh");
  check_sequence(gates_all, dc, steps, 4 * H, "the gates");
  check_sequence(c_all, dc, steps + 1, H, "c_0 .. c_T");
  check_sequence(tc_all, dc, steps, H, "act(c_t)");
  TORCH_CHECK(d_gates.dim() == dc.dim() + 1 && d_gates.size(0) == steps,
              "recdrop.cpu_kernels: d_gates must be (T, [R,] B, 4H)");
  check_products(brgemm, dc);
  at::Tensor dh = at::empty_like(dc);
  AT_DISPATCH_FLOATING_TYPES(dc.scalar_type(), "lstm_backward_sequence", [&] {
    lstm_backward_over<scalar_t>(d_ys, dh_n, dc, d_cs, w_hh, SequenceFactor<scalar_t>(gal, gal_number, per_step, dc, steps),
                                 SequenceFactor<scalar_t>(sem, sem_number, per_step, dc, steps),
                                 SequenceFactor<scalar_t>(moon, moon_number, per_step, dc, steps), gates_all, c_all,
                                 tc_all, d_gates, dh, relu, brgemm);
  });
  return dh;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("brgemm_works", &brgemm_works, "Whether oneDNN's brgemm kernel computes float32 products here");
  m.def("transposed", &transposed, "A matrix's transpose, contiguous, copied on the intra-op threads (recdrop.cpu_kernels)");
  m.def("lstm_forward_sequence", &lstm_forward_sequence,
        "An LSTM sequence's forward, each step's product and pointwise work in one parallel region (recdrop.cpu_kernels)");
  m.def("lstm_backward_sequence", &lstm_backward_sequence,
        "An LSTM sequence's backward loop, each step's product and pointwise work in one parallel region "
        "(recdrop.cpu_kernels)");
  m.def("gru_forward_step", &gru_forward_step, "One GRU step's pointwise forward (recdrop.cpu_kernels)");
  m.def("gru_backward_step", &gru_backward_step, "One GRU step's pointwise backward (recdrop.cpu_kernels)");
}

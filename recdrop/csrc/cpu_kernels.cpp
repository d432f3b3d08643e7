// The fused LSTM's and GRU's pointwise work on a CPU: one call a step forward, one backward
// (recdrop/cpu_kernels.py).
// Vectorised with ATen's at::vec for the instructions the build was given; rows split over the intra-op
// threads. The same equations as the Triton kernels of recdrop/triton_kernels.py.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

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

// A factor of d(.): absent, a number (the test phase's 1 - p) or a tensor of the state's shape (a mask).
template <typename T>
struct Factor {
  const T* data = nullptr;
  T scalar = T(1);
  bool on = false;

  Factor(const c10::optional<at::Tensor>& mask, c10::optional<double> number, const at::Tensor& state) {
    if (mask.has_value()) {
      TORCH_CHECK(mask->device().is_cpu() && mask->sizes() == state.sizes() && mask->is_contiguous() &&
                      mask->scalar_type() == state.scalar_type(),
                  "recdrop.cpu_kernels: a mask must be a contiguous CPU tensor of the state's shape and dtype");
      data = mask->data_ptr<T>();
      on = true;
    } else if (number.has_value()) {
      scalar = T(*number);
      on = true;
    }
  }

  Vectorized<T> apply(const Vectorized<T>& x, int64_t offset, int64_t count) const {
    if (!on) return x;
    return x * (data ? Vectorized<T>::loadu(data + offset, count) : Vectorized<T>(scalar));
  }
};

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

template <typename T>
void lstm_forward(const at::Tensor& gates, const c10::optional<at::Tensor>& addend, const at::Tensor& gates_out,
                  const at::Tensor& c_prev, const Factor<T>& sem, const Factor<T>& moon,
                  const c10::optional<at::Tensor>& gsem_out, const at::Tensor& c_out, const at::Tensor& tc_out,
                  const at::Tensor& h_out, bool relu) {
  using V = Vectorized<T>;
  const int64_t H = c_prev.size(-1), rows = c_prev.numel() / std::max<int64_t>(H, 1);
  const GateRows add_rows = addend.has_value() ? gate_rows(*addend, c_prev, "addend") : GateRows{1, H, 0};
  const T* pre = gates.data_ptr<T>();
  const T* add = addend.has_value() ? addend->data_ptr<T>() : nullptr;
  const T* cp = c_prev.data_ptr<T>();
  T* go = gates_out.data_ptr<T>();
  T* gs = gsem_out.has_value() ? gsem_out->data_ptr<T>() : nullptr;
  T* co = c_out.data_ptr<T>();
  T* tco = tc_out.data_ptr<T>();
  T* ho = h_out.data_ptr<T>();
  at::parallel_for(0, rows, std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t s = row * H, g = row * 4 * H, a = add ? add_rows.at(row) : 0;
      for (int64_t j = 0; j < H; j += V::size()) {
        const int64_t n = std::min<int64_t>(V::size(), H - j);
        auto pre_activation = [&](int64_t gate) {  // the product, plus gx where given apart
          const V x = V::loadu(pre + g + gate * H + j, n);
          return add ? x + V::loadu(add + a + gate * H + j, n) : x;
        };
        const V i = sigmoid(pre_activation(0)), f = sigmoid(pre_activation(1)), o = sigmoid(pre_activation(3));
        const V act_g = activation(pre_activation(2), relu);
        i.store(go + g + j, n);
        f.store(go + g + H + j, n);
        act_g.store(go + g + 2 * H + j, n);
        o.store(go + g + 3 * H + j, n);
        const V dropped_g = sem.apply(act_g, s + j, n);  // Eq. 9: d(g_t)
        if (gs) dropped_g.store(gs + s + j, n);
        const V c = moon.apply(f * V::loadu(cp + s + j, n) + i * dropped_g, s + j, n);  // Eq. 8: d(c_t)
        const V tc = activation(c, relu);
        c.store(co + s + j, n);
        tc.store(tco + s + j, n);
        (o * tc).store(ho + s + j, n);  // Eq. 6
      }
    }
  });
}

template <typename T>
void lstm_backward(const at::Tensor& dh_in, const Factor<T>& gal, const at::Tensor& d_y, const at::Tensor& dc_in,
                   const at::Tensor& gates, const at::Tensor& c_prev, const at::Tensor& tc, const Factor<T>& sem,
                   const Factor<T>& moon, const at::Tensor& d_gates, const at::Tensor& dc_out, bool relu) {
  using V = Vectorized<T>;
  const V one(T(1));
  const int64_t H = dh_in.size(-1), rows = dh_in.numel() / std::max<int64_t>(H, 1);
  const GateRows d_rows = gate_rows(d_gates, dh_in, "d_gates");
  const T* dhp = dh_in.data_ptr<T>();
  const T* dyp = d_y.data_ptr<T>();
  const T* dcp = dc_in.data_ptr<T>();
  const T* gp = gates.data_ptr<T>();
  const T* cpp = c_prev.data_ptr<T>();
  const T* tcp = tc.data_ptr<T>();
  T* dg = d_gates.data_ptr<T>();
  T* dco = dc_out.data_ptr<T>();
  at::parallel_for(0, rows, std::max<int64_t>(1, GRAIN / std::max<int64_t>(H, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t s = row * H, g = row * 4 * H, d = d_rows.at(row);
      for (int64_t j = 0; j < H; j += V::size()) {
        const int64_t n = std::min<int64_t>(V::size(), H - j);
        const V i = V::loadu(gp + g + j, n), f = V::loadu(gp + g + H + j, n);
        const V act_g = V::loadu(gp + g + 2 * H + j, n), o = V::loadu(gp + g + 3 * H + j, n);
        const V a = V::loadu(tcp + s + j, n);
        // dh reaching h_t: from the next step through d(h_t) of Eq. 7, and from the output
        const V dh = gal.apply(V::loadu(dhp + s + j, n), s + j, n) + V::loadu(dyp + s + j, n);
        const V dc = moon.apply(V::loadu(dcp + s + j, n) + dh * o * activation_slope(a, relu), s + j, n);  // Eq. 8
        (dc * i * (one - i) * sem.apply(act_g, s + j, n)).store(dg + d + j, n);  // Eq. 9: d(g_t)
        (dc * f * (one - f) * V::loadu(cpp + s + j, n)).store(dg + d + H + j, n);
        sem.apply(dc * i * activation_slope(act_g, relu), s + j, n).store(dg + d + 2 * H + j, n);
        (dh * o * (one - o) * a).store(dg + d + 3 * H + j, n);
        (dc * f).store(dco + s + j, n);
      }
    }
  });
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
    gru_forward<scalar_t>(gx, gh, h_prev, Factor<scalar_t>(sem, sem_number, h_prev),
                          Factor<scalar_t>(moon, moon_number, h_prev), rzn_out, hn_out, h_out, relu);
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
    gru_backward<scalar_t>(dz_in, mm, Factor<scalar_t>(gal, gal_number, dz_in), d_y,
                           Factor<scalar_t>(moon, moon_number, dz_in), Factor<scalar_t>(sem, sem_number, dz_in), rzn,
                           hn, h_prev, d_gx, d_gh, dz_out, relu);
  });
}

void lstm_forward_step(const at::Tensor& gates, const c10::optional<at::Tensor>& addend, const at::Tensor& gates_out,
                       const at::Tensor& c_prev, const c10::optional<at::Tensor>& sem, c10::optional<double> sem_number,
                       const c10::optional<at::Tensor>& moon, c10::optional<double> moon_number,
                       const c10::optional<at::Tensor>& gsem_out, const at::Tensor& c_out, const at::Tensor& tc_out,
                       const at::Tensor& h_out, bool relu) {
  check_step(c_prev, {&c_prev, &c_out, &tc_out, &h_out}, {&gates, &gates_out}, 4);
  if (gsem_out.has_value()) check_step(c_prev, {&*gsem_out}, {}, 4);
  AT_DISPATCH_FLOATING_TYPES(c_prev.scalar_type(), "lstm_forward_step", [&] {
    lstm_forward<scalar_t>(gates, addend, gates_out, c_prev, Factor<scalar_t>(sem, sem_number, c_prev),
                           Factor<scalar_t>(moon, moon_number, c_prev), gsem_out, c_out, tc_out, h_out, relu);
  });
}

void lstm_backward_step(const at::Tensor& dh_in, const c10::optional<at::Tensor>& gal, c10::optional<double> gal_number,
                        const at::Tensor& d_y, const at::Tensor& dc_in, const at::Tensor& gates,
                        const at::Tensor& c_prev, const at::Tensor& tc, const c10::optional<at::Tensor>& sem,
                        c10::optional<double> sem_number, const c10::optional<at::Tensor>& moon,
                        c10::optional<double> moon_number, const at::Tensor& d_gates, const at::Tensor& dc_out,
                        bool relu) {
  check_step(dh_in, {&dh_in, &d_y, &dc_in, &c_prev, &tc, &dc_out}, {&gates}, 4);
  AT_DISPATCH_FLOATING_TYPES(dh_in.scalar_type(), "lstm_backward_step", [&] {
    lstm_backward<scalar_t>(dh_in, Factor<scalar_t>(gal, gal_number, dh_in), d_y, dc_in, gates, c_prev, tc,
                            Factor<scalar_t>(sem, sem_number, dh_in), Factor<scalar_t>(moon, moon_number, dh_in),
                            d_gates, dc_out, relu);
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("lstm_forward_step", &lstm_forward_step, "One LSTM step's pointwise forward (recdrop.cpu_kernels)");
  m.def("lstm_backward_step", &lstm_backward_step, "One LSTM step's pointwise backward (recdrop.cpu_kernels)");
  m.def("gru_forward_step", &gru_forward_step, "One GRU step's pointwise forward (recdrop.cpu_kernels)");
  m.def("gru_backward_step", &gru_backward_step, "One GRU step's pointwise backward (recdrop.cpu_kernels)");
}

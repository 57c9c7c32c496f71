// LSTM and GRU on the npu device.
//  - ATen's recurrent layers (aten::lstm, aten::gru, aten::lstm_cell, aten::gru_cell: composite
//    kernels) call the fused cells _thnn_fused_lstm_cell / _thnn_fused_gru_cell for a
//    PrivateUse1 input, which ATen implements for CUDA only. Ours compose them from npu ops; a
//    16-bit cell computes in float32 and rounds its results once, as the card's cell does. The
//    workspace is ours (LSTM: the activated gates i, f, g, o; GRU: r, z, n, the hidden part of n
//    and hx), read only by our backward kernels.
//  - torch_npu's LSTM and GRU take floating weights and states of another dtype than the input
//    (a float32 module run on float16 data) and compute in the input's dtype; ATen's composites
//    refuse the mixed matmul. An autograd-level kernel casts them to the input's dtype (a
//    differentiable cast) and runs ATen's composite.
#include <ATen/ATen.h>
#include <ATen/ops/gru_cell_native.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_cell_native.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "DeviceCheck.h"

namespace torch_npu {
namespace {

// ---- fused cells ------------------------------------------------------------------------------

bool is16Bit(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The cell computes in float32 for a 16-bit input.
at::Tensor wide(const at::Tensor& t) {
  return (t.defined() && is16Bit(t)) ? t.to(at::kFloat) : t;
}

at::Tensor withBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return (bias.has_value() && bias->defined()) ? gates + wide(*bias) : gates;
}

void checkGates(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, int64_t num_gates, const char* op) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must be 2-D of the same size, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * num_gates == input_gates.size(1),
              op, ": the state must be (batch, hidden) with gates (batch, ", num_gates,
              " * hidden), got state ", state.sizes(), " and gates ", input_gates.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  checkGates(input_gates, hidden_gates, cx, 4, "_thnn_fused_lstm_cell");
  const at::ScalarType dtype = input_gates.scalar_type();
  const at::Tensor gates =
      withBias(withBias(wide(input_gates) + wide(hidden_gates), input_bias), hidden_bias);
  const std::vector<at::Tensor> chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid();
  const at::Tensor f = chunks[1].sigmoid();
  const at::Tensor g = chunks[2].tanh();
  const at::Tensor o = chunks[3].sigmoid();
  const at::Tensor cy = f * wide(cx) + i * g;
  const at::Tensor hy = o * cy.tanh();
  const at::Tensor workspace = at::cat({i, f, g, o}, 1);
  return {hy.to(dtype), cy.to(dtype), workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCellBackward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const at::ScalarType dtype = cx.scalar_type();
  const std::vector<at::Tensor> gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanh_cy = wide(cy).tanh();
  const bool has_ghy = grad_hy.has_value() && grad_hy->defined();
  const bool has_gcy = grad_cy.has_value() && grad_cy->defined();
  const at::Tensor ghy = has_ghy ? wide(*grad_hy) : at::zeros_like(tanh_cy);
  at::Tensor gcx = ghy * o * (1 - tanh_cy * tanh_cy);
  if (has_gcy) gcx = gcx + wide(*grad_cy);
  const at::Tensor grad_gates = at::cat({gcx * g * i * (1 - i), gcx * wide(cx) * f * (1 - f),
                                         gcx * i * (1 - g * g), ghy * tanh_cy * o * (1 - o)},
                                        1);
  const at::Tensor grad_bias = has_bias ? grad_gates.sum(0).to(dtype) : at::Tensor();
  return {grad_gates.to(dtype), (gcx * f).to(dtype), grad_bias};
}

std::tuple<at::Tensor, at::Tensor> fusedGruCell(const at::Tensor& input_gates,
                                                const at::Tensor& hidden_gates,
                                                const at::Tensor& hx,
                                                const std::optional<at::Tensor>& input_bias,
                                                const std::optional<at::Tensor>& hidden_bias) {
  checkGates(input_gates, hidden_gates, hx, 3, "_thnn_fused_gru_cell");
  const at::ScalarType dtype = input_gates.scalar_type();
  const std::vector<at::Tensor> in = withBias(wide(input_gates), input_bias).chunk(3, 1);
  const std::vector<at::Tensor> hid = withBias(wide(hidden_gates), hidden_bias).chunk(3, 1);
  const at::Tensor r = (in[0] + hid[0]).sigmoid();
  const at::Tensor z = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  const at::Tensor h = wide(hx);
  const at::Tensor hy = n + z * (h - n);
  const at::Tensor workspace = at::cat({r, z, n, hid[2], h}, 1);
  return {hy.to(dtype), workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fusedGruCellBackward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const at::ScalarType dtype = grad_hy.scalar_type();
  const std::vector<at::Tensor> w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hn = w[3], &h = w[4];
  const at::Tensor ghy = wide(grad_hy);
  const at::Tensor gz = ghy * (h - n) * z * (1 - z);
  const at::Tensor gn = ghy * (1 - z) * (1 - n * n);
  const at::Tensor gr = gn * hn * r * (1 - r);
  const at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
  const at::Tensor grad_hidden = at::cat({gr, gz, gn * r}, 1);
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input.sum(0).to(dtype);
    grad_hidden_bias = grad_hidden.sum(0).to(dtype);
  }
  return {grad_input.to(dtype), grad_hidden.to(dtype), (ghy * z).to(dtype), grad_input_bias,
          grad_hidden_bias};
}

// ---- mixed dtypes of the layers ---------------------------------------------------------------

// The floating tensors of `list` in `dtype` (torch_npu computes a layer in its input's dtype).
std::vector<at::Tensor> castTo(at::TensorList list, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) {
    out.push_back(t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype
                      ? t.to(dtype)
                      : t);
  }
  return out;
}

at::Tensor castTo(const at::Tensor& t, at::ScalarType dtype) {
  return t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype
             ? t.to(dtype)
             : t;
}

std::optional<at::Tensor> castTo(const std::optional<at::Tensor>& t, at::ScalarType dtype) {
  if (!t.has_value()) return t;
  return castTo(*t, dtype);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmInput(
    const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
    int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  const at::ScalarType dtype = input.scalar_type();
  return at::native::lstm(input, castTo(hx, dtype), castTo(params, dtype), has_biases,
                          num_layers, dropout, train, bidirectional, batch_first);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmData(
    const at::Tensor& data, const at::Tensor& batch_sizes, at::TensorList hx,
    at::TensorList params, bool has_biases, int64_t num_layers, double dropout, bool train,
    bool bidirectional) {
  const at::ScalarType dtype = data.scalar_type();
  return at::native::lstm(data, batch_sizes, castTo(hx, dtype), castTo(params, dtype),
                          has_biases, num_layers, dropout, train, bidirectional);
}

std::tuple<at::Tensor, at::Tensor> gruInput(const at::Tensor& input, const at::Tensor& hx,
                                            at::TensorList params, bool has_biases,
                                            int64_t num_layers, double dropout, bool train,
                                            bool bidirectional, bool batch_first) {
  const at::ScalarType dtype = input.scalar_type();
  return at::native::gru(input, castTo(hx, dtype), castTo(params, dtype), has_biases,
                         num_layers, dropout, train, bidirectional, batch_first);
}

std::tuple<at::Tensor, at::Tensor> gruData(const at::Tensor& data, const at::Tensor& batch_sizes,
                                           const at::Tensor& hx, at::TensorList params,
                                           bool has_biases, int64_t num_layers, double dropout,
                                           bool train, bool bidirectional) {
  const at::ScalarType dtype = data.scalar_type();
  return at::native::gru(data, batch_sizes, castTo(hx, dtype), castTo(params, dtype),
                         has_biases, num_layers, dropout, train, bidirectional);
}

std::tuple<at::Tensor, at::Tensor> lstmCell(const at::Tensor& input, at::TensorList hx,
                                            const at::Tensor& w_ih, const at::Tensor& w_hh,
                                            const std::optional<at::Tensor>& b_ih,
                                            const std::optional<at::Tensor>& b_hh) {
  const at::ScalarType dtype = input.scalar_type();
  return at::native::lstm_cell(input, castTo(hx, dtype), castTo(w_ih, dtype),
                               castTo(w_hh, dtype), castTo(b_ih, dtype), castTo(b_hh, dtype));
}

at::Tensor gruCell(const at::Tensor& input, const at::Tensor& hx, const at::Tensor& w_ih,
                   const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
                   const std::optional<at::Tensor>& b_hh) {
  const at::ScalarType dtype = input.scalar_type();
  return at::native::gru_cell(input, castTo(hx, dtype), castTo(w_ih, dtype),
                              castTo(w_hh, dtype), castTo(b_ih, dtype), castTo(b_hh, dtype));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_thnn_fused_lstm_cell", fusedLstmCell);
  NPU_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", fusedLstmCellBackward);
  NPU_IMPL(m, "_thnn_fused_gru_cell", fusedGruCell);
  NPU_IMPL(m, "_thnn_fused_gru_cell_backward", fusedGruCellBackward);
}

// Autograd level: the composites below record their own graph (their ops are differentiable).
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstmInput));
  m.impl("lstm.data", TORCH_FN(lstmData));
  m.impl("gru.input", TORCH_FN(gruInput));
  m.impl("gru.data", TORCH_FN(gruData));
  m.impl("lstm_cell", TORCH_FN(lstmCell));
  m.impl("gru_cell", TORCH_FN(gruCell));
}

}  // namespace torch_npu

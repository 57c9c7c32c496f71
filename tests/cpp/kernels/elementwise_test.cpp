// Every unary, binary and ternary op of the tables in npu/kernels/elementwise.h, for every
// compute dtype it supports, on several layouts (contiguous, transposed input, transposed
// output, broadcast, 0-dim, empty, mixed operand dtypes, a size large enough for the thread
// pool), against the scalar references of elementwise_reference.h.
//
// Adding an op: put it in the table in elementwise.h and its reference in
// elementwise_reference.h; it is picked up here automatically.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "elementwise_reference.h"
#include "kernel_test_util.h"

namespace ktest {
namespace {

namespace nk = npu::kernels;

const DType kComputeTypes[] = {DType::Float32, DType::Float64,  DType::Float16, DType::BFloat16,
                               DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8,   DType::Bool};

struct OpCase {
  int family;  // 1, 2, 3 = unary, binary, ternary (its arity)
  int op;
  DType compute;
};

std::string case_name(const OpCase& c) {
  std::string op = c.family == 1   ? nk::op_name(nk::UnaryOp(c.op))
                   : c.family == 2 ? nk::op_name(nk::BinaryOp(c.op))
                                   : nk::op_name(nk::TernaryOp(c.op));
  const char* family[] = {"", "unary_", "binary_", "ternary_"};
  return family[c.family] + op + "_" + dtype_str(c.compute);
}

bool returns_bool(const OpCase& c) {
  if (c.family == 1) {
    auto op = nk::UnaryOp(c.op);
    return op == nk::UnaryOp::LogicalNot || op == nk::UnaryOp::IsNan ||
           op == nk::UnaryOp::IsInf || op == nk::UnaryOp::IsFinite;
  }
  if (c.family == 2) {
    auto op = nk::BinaryOp(c.op);
    return op == nk::BinaryOp::Eq || op == nk::BinaryOp::Ne || op == nk::BinaryOp::Lt ||
           op == nk::BinaryOp::Le || op == nk::BinaryOp::Gt || op == nk::BinaryOp::Ge ||
           op == nk::BinaryOp::LogicalAnd || op == nk::BinaryOp::LogicalOr ||
           op == nk::BinaryOp::LogicalXor;
  }
  return false;
}

// The layouts every op runs on.
enum class Shape { Contiguous, TransposedIn, TransposedOut, Broadcast, Scalar0d, Empty, Mixed, Large };
const Shape kShapes[] = {Shape::Contiguous, Shape::TransposedIn, Shape::TransposedOut,
                         Shape::Broadcast,  Shape::Scalar0d,     Shape::Empty,
                         Shape::Mixed,      Shape::Large};
const char* shape_name(Shape s) {
  const char* names[] = {"contiguous", "transposed_in", "transposed_out", "broadcast",
                         "0-dim",      "empty",         "mixed_dtypes",   "large"};
  return names[int(s)];
}

class ElementwiseOp : public ::testing::TestWithParam<OpCase> {
 protected:
  void fill_input(HostTensor& t, Domain d, DType compute) {
    bool floating = nk::is_floating(compute);
    if (!floating) {  // integer domains: whole numbers, non-negative for uint8
      if (compute == DType::Bool) d.lo = 0, d.hi = 1;
      if (compute == DType::UInt8) d.lo = std::max(d.lo, 0.0), d.hi = std::max(d.hi, 10.0);
      if (std::ceil(d.lo) > std::floor(d.hi)) d.hi = d.lo = std::ceil(d.lo);
    }
    if (floating && (compute == DType::Float16 || compute == DType::BFloat16)) {
      d.lo = std::max(d.lo, -8.0), d.hi = std::min(d.hi, 8.0);  // stay in half's range
    }
    fill_uniform(t, d.lo, d.hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = t.get(i);
      if (floating && d.quarters) v = std::round(v * 4) / 4;
      t.set(i, round_to(compute, v));  // exact in the compute type (for the Mixed layout)
    }
    if (floating && d.special && t.numel() >= 4) {
      t.set(0, NAN), t.set(1, INFINITY), t.set(2, -INFINITY);
    }
  }

  void run_case(Shape shape) {
    const OpCase c = GetParam();
    const int nin = c.family;
    const bool floating = nk::is_floating(c.compute);
    SCOPED_TRACE(shape_name(shape));

    std::vector<int64_t> sizes = {23, 41};
    if (shape == Shape::Scalar0d) sizes = {};
    if (shape == Shape::Empty) sizes = {0, 7};
    if (shape == Shape::Large) sizes = {(1 << 19) + 17};

    DType in_dtype = c.compute;
    DType out_dtype = returns_bool(c) ? DType::Bool : c.compute;
    if (shape == Shape::Mixed) {
      in_dtype = floating ? DType::Float64 : DType::Int64;
      if (!returns_bool(c)) out_dtype = in_dtype;
    }
    Domain dom[3];
    if (c.family == 1) dom[0] = unary_domain(nk::UnaryOp(c.op));
    if (c.family == 2) binary_domains(nk::BinaryOp(c.op), dom[0], dom[1]);
    if (c.family == 3) ternary_domains(nk::TernaryOp(c.op), dom[0], dom[1], dom[2]);

    std::vector<HostTensor> storage, inputs;
    for (int k = 0; k < nin; ++k) {
      DType dt = (c.family == 3 && nk::TernaryOp(c.op) == nk::TernaryOp::Where && k == 0)
                     ? DType::Bool
                     : in_dtype;
      if (shape == Shape::Broadcast) {
        // Input 0 broadcasts along dim 0, input 1 along dim 1, input 2 is full.
        std::vector<int64_t> s = sizes;
        if (k < 2) s[k] = 1;
        HostTensor t(dt, s);
        fill_input(t, dom[k], c.compute);
        inputs.push_back(k < 2 ? t.expanded(k, sizes[k]) : t);
      } else {
        HostTensor t(dt, sizes, shape == Shape::TransposedIn ? Layout::Transposed : Layout::Contiguous);
        fill_input(t, dom[k], c.compute);
        inputs.push_back(t);
      }
    }
    HostTensor out(out_dtype, sizes,
                   shape == Shape::TransposedOut ? Layout::Transposed : Layout::Contiguous);
    HostTensor expected(out_dtype, sizes);

    // Reference.
    nk::Scalar p0, p1;
    if (c.family == 1) unary_params(nk::UnaryOp(c.op), p0, p1);
    if (c.family == 2) p0 = binary_param(nk::BinaryOp(c.op));
    if (c.family == 3) p0 = ternary_param(nk::TernaryOp(c.op));
    int bits = static_cast<int>(nk::dtype_size(c.compute) * 8);
    for (int64_t i = 0; i < expected.numel(); ++i) {
      if (floating) {
        double v[3] = {};
        for (int k = 0; k < nin; ++k) v[k] = inputs[k].get(i);
        std::optional<double> r;
        if (c.family == 1) r = ref_unary(nk::UnaryOp(c.op), v[0], p0, p1);
        if (c.family == 2) r = ref_binary(nk::BinaryOp(c.op), v[0], v[1], p0);
        if (c.family == 3) r = ref_ternary(nk::TernaryOp(c.op), v[0], v[1], v[2], p0);
        ASSERT_TRUE(r.has_value()) << "no floating reference for " << case_name(c);
        expected.set(i, *r);
      } else {
        int64_t v[3] = {};
        for (int k = 0; k < nin; ++k) v[k] = inputs[k].get_int(i);
        std::optional<int64_t> r;
        if (c.family == 1)
          r = ref_unary_int(nk::UnaryOp(c.op), v[0], p0, p1, c.compute == DType::Bool);
        if (c.family == 2) r = ref_binary_int(nk::BinaryOp(c.op), v[0], v[1], p0, bits);
        if (c.family == 3) r = ref_ternary_int(nk::TernaryOp(c.op), v[0], v[1], v[2], p0);
        ASSERT_TRUE(r.has_value()) << "no integer reference for " << case_name(c);
        expected.set_int(i, returns_bool(c) ? *r : wrap_to(c.compute, *r));
      }
    }

    // Kernel.
    TensorDesc o = out.desc();
    if (c.family == 1) nk::unary(nk::UnaryOp(c.op), o, inputs[0].desc(), c.compute, p0, p1);
    if (c.family == 2)
      nk::binary(nk::BinaryOp(c.op), o, inputs[0].desc(), inputs[1].desc(), c.compute, p0);
    if (c.family == 3)
      nk::ternary(nk::TernaryOp(c.op), o, inputs[0].desc(), inputs[1].desc(), inputs[2].desc(),
                  c.compute, p0);

    double rtol = std::max(default_rtol(c.compute), default_rtol(out_dtype));
    double atol = c.compute == DType::Float32 ? 1e-6 : (c.compute == DType::Float64 ? 1e-12 : rtol);
    if (c.compute == DType::Float64) rtol = 1e-10;
    // The tanh-gelu derivative cancels near its zero (x ~ -0.75): float math loses absolute,
    // not relative, accuracy there, exactly as PyTorch's float kernel does.
    if (c.family == 2 && nk::BinaryOp(c.op) == nk::BinaryOp::GeluTanhBackward) atol *= 20;
    EXPECT_TRUE(all_close(out, expected, rtol, atol)) << case_name(c) << " " << shape_name(shape);
  }
};

TEST_P(ElementwiseOp, MatchesReferenceOnEveryLayout) {
  for (Shape s : kShapes) {
    if (s == Shape::Large && !(GetParam().compute == DType::Float32 ||
                               GetParam().compute == DType::Int32)) {
      continue;  // one float and one integer type are enough to exercise the pool
    }
    run_case(s);
    if (HasFatalFailure()) return;
  }
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  int i = 0;
#define NPU_CASE_U(name, str) \
  for (DType t : kComputeTypes) if (nk::unary_supports(nk::UnaryOp::name, t)) cases.push_back({1, int(nk::UnaryOp::name), t});
  NPU_KERNELS_UNARY_OPS(NPU_CASE_U)
#undef NPU_CASE_U
#define NPU_CASE_B(name, str) \
  for (DType t : kComputeTypes) if (nk::binary_supports(nk::BinaryOp::name, t)) cases.push_back({2, int(nk::BinaryOp::name), t});
  NPU_KERNELS_BINARY_OPS(NPU_CASE_B)
#undef NPU_CASE_B
#define NPU_CASE_T(name, str) \
  for (DType t : kComputeTypes) if (nk::ternary_supports(nk::TernaryOp::name, t)) cases.push_back({3, int(nk::TernaryOp::name), t});
  NPU_KERNELS_TERNARY_OPS(NPU_CASE_T)
#undef NPU_CASE_T
  (void)i;
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, ElementwiseOp, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return case_name(info.param);
                         });

// Every op of the tables supports at least one compute dtype (else it is never tested).
TEST(ElementwiseTable, EveryOpIsTestedForSomeDtype) {
#define NPU_CHECK_U(name, str) { bool any = false; for (DType t : kComputeTypes) any |= nk::unary_supports(nk::UnaryOp::name, t); EXPECT_TRUE(any) << str; }
  NPU_KERNELS_UNARY_OPS(NPU_CHECK_U)
#undef NPU_CHECK_U
#define NPU_CHECK_B(name, str) { bool any = false; for (DType t : kComputeTypes) any |= nk::binary_supports(nk::BinaryOp::name, t); EXPECT_TRUE(any) << str; }
  NPU_KERNELS_BINARY_OPS(NPU_CHECK_B)
#undef NPU_CHECK_B
  EXPECT_TRUE(nk::unary_supports(nk::UnaryOp::Exp, DType::Float16));
  EXPECT_FALSE(nk::unary_supports(nk::UnaryOp::Exp, DType::Int32));
  EXPECT_FALSE(nk::binary_supports(nk::BinaryOp::BitwiseAnd, DType::Float32));
}

TEST(ElementwiseErrors, UnsupportedDtypeIsAnInternalAssert) {
  float x = 1, y = 0;
  TensorDesc a = TensorDesc::make(&x, DType::Float32, {1});
  TensorDesc o = TensorDesc::make(&y, DType::Float32, {1});
  try {
    nk::binary(nk::BinaryOp::BitwiseAnd, o, a, a, DType::Float32);
    FAIL() << "expected an internal assert";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("this is a bug"), std::string::npos) << e.what();
  }
}

// In-place: out aliases an input exactly.
TEST(ElementwiseInPlace, OutputMayAliasInput) {
  HostTensor a(DType::Float32, {1000}), b(DType::Float32, {1000});
  fill_uniform(a, -1, 1);
  fill_uniform(b, -1, 1);
  HostTensor orig = a;
  nk::binary(nk::BinaryOp::Add, a.desc(), a.desc(), b.desc(), DType::Float32, 1);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_FLOAT_EQ(a.get(i), float(orig.get(i) + b.get(i)));
}

// Short rows (the row walk of for_each_segment: an inner run under 256 elements, its pointers
// stepped along 1 to 3 outer dimensions): a = a [B, S, H, D] tensor seen as [B, H, S, D]
// (rotary's and attention's head views), b = a [S, D] table broadcast over B and H, out
// contiguous or a strided half of a wider tensor; several tasks' worth of rows (the chunks
// start inside the outer dimensions). Every operand's rows are float32 arrays, so each row is
// one call of the op in place (run_elementwise's in-place segments). Every element against
// the sum of its operands.
TEST(ElementwiseRows, ShortRowsOfPermutedAndBroadcastViews) {
  for (int64_t D : {1, 5, 9, 16, 33, 100, 255}) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t B = variant == 0 ? 1 : 3, H = variant == 2 ? 1 : 4, S = 700;
      SCOPED_TRACE(::testing::Message() << "D=" << D << " variant " << variant);
      std::vector<float> a(static_cast<size_t>(B * S * H * D)), b(static_cast<size_t>(S * D));
      for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 1013) * 0.5f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 97) * 0.25f;
      // out: the first half of each row of a [B, H, S, 2 D] tensor
      std::vector<float> out(static_cast<size_t>(B * H * S * 2 * D), -1.0f);
      const int64_t sizes[4] = {B, H, S, D};
      const int64_t a_strides[4] = {S * H * D, D, H * D, 1};
      const int64_t b_strides[4] = {0, 0, D, 1};
      const int64_t o_strides[4] = {H * S * 2 * D, S * 2 * D, 2 * D, 1};
      nk::binary(nk::BinaryOp::Add, TensorDesc::make(out.data(), DType::Float32, sizes, 4, o_strides),
                 TensorDesc::make(a.data(), DType::Float32, sizes, 4, a_strides),
                 TensorDesc::make(b.data(), DType::Float32, sizes, 4, b_strides), DType::Float32, 1);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < S; ++t)
            for (int64_t d = 0; d < 2 * D; ++d) {
              const float got = out[static_cast<size_t>(((i * H + h) * S + t) * 2 * D + d)];
              const float want = d < D ? a[static_cast<size_t>(((i * S + t) * H + h) * D + d)] +
                                             b[static_cast<size_t>(t * D + d)]
                                       : -1.0f;  // the other half is untouched
              ASSERT_EQ(got, want) << i << " " << h << " " << t << " " << d;
            }
      // copy the permuted view into a contiguous tensor and back (copy's short runs: 4 to
      // 1020 bytes, every branch of its inline byte copy: 20, 36, 132 bytes take the overlapping
      // last move)
      std::vector<float> c(a.size(), 0.0f), back(a.size(), 0.0f);
      nk::copy(TensorDesc::make(c.data(), DType::Float32, sizes, 4, nullptr),
               TensorDesc::make(a.data(), DType::Float32, sizes, 4, a_strides));
      nk::copy(TensorDesc::make(back.data(), DType::Float32, sizes, 4, a_strides),
               TensorDesc::make(c.data(), DType::Float32, sizes, 4, nullptr));
      ASSERT_EQ(back, a);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < S; ++t)
            for (int64_t d = 0; d < D; ++d)
              ASSERT_EQ(c[static_cast<size_t>(((i * H + h) * S + t) * D + d)],
                        a[static_cast<size_t>(((i * S + t) * H + h) * D + d)]);
    }
  }
}

}  // namespace
}  // namespace ktest

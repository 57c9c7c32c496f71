// Turns (op functor template, compute dtype) into a run of the generic elementwise loop:
// the single place where unary, binary and ternary ops meet type dispatch.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "dtype_traits.h"
#include "loops.h"

namespace npu::kernels::detail {

template <class F>
F make_functor(Scalar p0, Scalar p1) {
  if constexpr (std::is_constructible_v<F, Scalar, Scalar>) return F(p0, p1);
  else return F{};
}

template <class F, class T, int NIn>
struct ResultOf;
template <class F, class T>
struct ResultOf<F, T, 1> {
  using type = decltype(std::declval<const F&>()(T{}));
};
template <class F, class T>
struct ResultOf<F, T, 2> {
  using type = decltype(std::declval<const F&>()(T{}, T{}));
};
template <class F, class T>
struct ResultOf<F, T, 3> {
  using type = decltype(std::declval<const F&>()(T{}, T{}, T{}));
};

template <template <class> class F, class T>
constexpr bool op_supports() {
  return (F<T>::kTypes & type_bit<T>()) != 0;
}

template <template <class> class F>
bool op_supports(DType compute) {
  return dispatch_compute(compute, []<class T>() { return op_supports<F, T>(); });
}

// Work per element sets the grain: ~32K cheap elements per chunk keeps the threading overhead
// (a few microseconds) well below the work.
inline int64_t grain_for_cost(int cost) { return 32768 / (cost > 0 ? cost : 1); }

template <template <class> class F, int NIn>
void run_op(const char* name, const TensorDesc* const* ops, DType compute, Scalar p0,
            Scalar p1) {
  dispatch_compute(compute, [&]<class T>() {
    if constexpr (op_supports<F, T>()) {
      F<T> f = make_functor<F<T>>(p0, p1);
      using R = std::remove_cv_t<typename ResultOf<F<T>, T, NIn>::type>;
      run_elementwise<T, R, NIn>(f, ops, grain_for_cost(F<T>::kCost));
    } else {
      NPU_KERNEL_ASSERT(false, std::string(name) + " does not support compute dtype " +
                                   dtype_name(compute) + " (the caller must check *_supports)");
    }
  });
}

}  // namespace npu::kernels::detail

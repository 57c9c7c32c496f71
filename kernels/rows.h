// A strided tensor seen as M rows of N elements: the leading dims index rows, the trailing
// `trailing_ndim` dims form a row. Rows are loaded into (and stored from) contiguous buffers
// of the compute type with conversion; contiguous rows of that type are used in place.
#pragma once

#include <cstdint>

#include "convert.h"
#include "dtype_traits.h"
#include "npu/kernels/tensor_desc.h"

namespace npu::kernels::detail {

class Rows {
 public:
  Rows(const TensorDesc& t, int trailing_ndim) : t_(t) {
    esize_ = static_cast<int64_t>(dtype_size(t.dtype));
    lead_ = t.ndim - trailing_ndim;
    for (int d = 0; d < lead_; ++d) M_ *= t.sizes[d];
    // Coalesce the trailing dims (outermost first).
    for (int d = lead_; d < t.ndim; ++d) {
      N_ *= t.sizes[d];
      if (t.sizes[d] == 1) continue;
      if (nd_ > 0 && strides_[nd_ - 1] == t.strides[d] * t.sizes[d]) {
        sizes_[nd_ - 1] *= t.sizes[d];
        strides_[nd_ - 1] = t.strides[d];
      } else {
        sizes_[nd_] = t.sizes[d];
        strides_[nd_++] = t.strides[d];
      }
    }
    if (nd_ == 0) sizes_[0] = 1, strides_[0] = 1, nd_ = 1;
    // Leading dims that coalesce into one (any contiguous tensor, most views): row i starts
    // at i * lead_stride_, without the per-row divisions of the general walk (they were most
    // of a small-row kernel's time: 1024 rows of 32 in a layer norm's backward).
    int64_t span = -1;
    for (int d = lead_ - 1; d >= 0 && lead_simple_; --d) {
      if (t.sizes[d] == 1) continue;
      if (span < 0) lead_stride_ = t.strides[d];
      else if (t.strides[d] != span) lead_simple_ = false;
      span = t.strides[d] * t.sizes[d];
    }
  }

  int64_t M() const { return M_; }
  int64_t N() const { return N_; }

  // Row i in place, when it is contiguous and of type T; nullptr otherwise.
  template <class T>
  T* direct(int64_t i) const {
    if (t_.dtype != dtype_of<T>() || nd_ != 1 || (strides_[0] != 1 && N_ > 1)) return nullptr;
    return reinterpret_cast<T*>(row_ptr(i));
  }

  template <class T>
  void load(int64_t i, T* dst) const {
    walk(i, convert_fn(t_.dtype, dtype_of<T>()), dst, true);
  }
  template <class T>
  void store(int64_t i, const T* src) const {
    walk(i, convert_fn(dtype_of<T>(), t_.dtype), const_cast<T*>(src), false);
  }

 private:
  char* row_ptr(int64_t i) const {
    if (lead_simple_) return static_cast<char*>(t_.data) + i * lead_stride_ * esize_;
    int64_t off = 0;
    for (int d = lead_ - 1; d >= 0; --d) {
      off += (i % t_.sizes[d]) * t_.strides[d];
      i /= t_.sizes[d];
    }
    return static_cast<char*>(t_.data) + off * esize_;
  }
  // Runs along the innermost coalesced dim; `buf` is contiguous in the compute type.
  template <class T>
  void walk(int64_t i, ConvertFn fn, T* buf, bool loading) const {
    char* base = row_ptr(i);
    const int last = nd_ - 1;
    const int64_t run = sizes_[last], runs = N_ / (run ? run : 1);
    for (int64_t r = 0; r < runs; ++r) {
      int64_t off = 0, rem = r;
      for (int d = last - 1; d >= 0; --d) {
        off += (rem % sizes_[d]) * strides_[d];
        rem /= sizes_[d];
      }
      char* p = base + off * esize_;
      if (loading) fn(p, strides_[last], buf + r * run, 1, run);
      else fn(buf + r * run, 1, p, strides_[last], run);
    }
  }

  TensorDesc t_;
  int64_t esize_ = 1, M_ = 1, N_ = 1;
  int lead_ = 0, nd_ = 0;
  bool lead_simple_ = true;
  int64_t lead_stride_ = 0;
  int64_t sizes_[kMaxDims] = {}, strides_[kMaxDims] = {};
};

// The same descriptor with dimension `dim` moved last (free: strides only).
inline TensorDesc move_dim_last(const TensorDesc& t, int dim) {
  TensorDesc r = t;
  int k = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (d == dim) continue;
    r.sizes[k] = t.sizes[d];
    r.strides[k++] = t.strides[d];
  }
  r.sizes[k] = t.sizes[dim];
  r.strides[k] = t.strides[dim];
  return r;
}

}  // namespace npu::kernels::detail

"""torch_npu.testing.testcase: the TestCase and run_tests torch_npu's operator tests use.

Written for SimNPU from the documented behaviour of torch_npu's helpers, so that torch_npu's own
test files run unchanged (tests/third_party_runner/ runs them):

- `TestCase` is a unittest (expecttest) TestCase whose class set-up selects the npu
  (`SET_NPU_DEVICE`, default 0) and whose set-up seeds torch and `random` with `SEED` (666).
- `assertRtolEqual(x, y, prec=1e-4, prec16=1e-3)` compares tensors, arrays, numbers or lists of
  them: shapes and dtypes must match; bool compares exactly; bfloat16 pairs use allclose with
  rtol = atol = prec16; float16 uses prec16, every other dtype prec. NaNs must sit at the same
  places. It passes when every element is within the absolute tolerance, or every element is
  within the relative one (|x - y| / (max(|x|, |y|) + tiny) <= tol), or when no more than
  size * tol elements break either rule.
- `assertEqual(x, y, prec=None)` compares with an absolute tolerance (`self.precision`,
  1e-5, when prec is None), recursing into sequences and dicts; dtypes need not match unless
  `exact_dtype`.
"""
from __future__ import annotations

import os
import random
import sys
import unittest
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import contextmanager
from numbers import Number

import numpy as np
import torch

from torch_npu.testing.common_utils import is_iterable, iter_indices, set_npu_device

try:
    import expecttest
    _Base = expecttest.TestCase
except ImportError:  # expecttest ships with torch's test dependencies, not always installed
    _Base = unittest.TestCase


def run_tests():
    """Runs the calling module's tests with unittest's command line (sys.argv)."""
    unittest.main(argv=sys.argv)


_ALLOWED_NP_DTYPES = (np.bool_, np.uint16, np.int16, np.int32, np.float16, np.float32, np.int8,
                      np.uint8, np.int64, np.float64)


class TestCase(_Base):
    _precision = 1e-5
    maxDiff = None
    exact_dtype = False

    @property
    def precision(self):
        return self._precision

    @precision.setter
    def precision(self, value):
        self._precision = value

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.npu_device = set_npu_device()

    def setUp(self):
        super().setUp()
        seed = int(os.getenv("SEED", "666"))
        torch.manual_seed(seed)
        random.seed(seed)

    # ---- assertRtolEqual -------------------------------------------------------------------

    # Elements compared per step: the float64 temporaries stay a few tens of MiB whatever the
    # arrays' size (whole-array float64 copies of a 157M-element result took 1.2 GiB each).
    _RTOL_CHUNK = 1 << 22

    def _rtol_compare_arrays(self, x, y, tol, tiny, message):
        xf, yf = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
        abs_all = rel_all = True
        abs_bad = rel_bad = 0
        max_diff = 0.0
        for i in range(0, xf.size, self._RTOL_CHUNK):
            xs, ys = xf[i:i + self._RTOL_CHUNK], yf[i:i + self._RTOL_CHUNK]
            x_nan, y_nan = np.isnan(xs), np.isnan(ys)
            if (x_nan.any() or y_nan.any()) and not np.array_equal(x_nan, y_nan):
                self.fail(message or "result error: NaNs at different places")
            x64 = xs.astype(np.float64)
            y64 = ys.astype(np.float64)
            diff = np.abs(y64 - x64)
            diff[np.isnan(diff)] = 0.0
            bound = np.maximum(np.abs(x64), np.abs(y64))
            abs_bad_here = int(np.count_nonzero(~(diff <= tol)))
            rel_bad_here = int(np.count_nonzero(~(diff / (bound + tiny) <= tol)))
            abs_all &= abs_bad_here == 0
            rel_all &= rel_bad_here == 0
            abs_bad += abs_bad_here
            rel_bad += rel_bad_here
            if diff.size:
                max_diff = max(max_diff, float(diff.max()))
        if abs_all or rel_all:
            return
        allowed = xf.size * tol
        if rel_bad > allowed and abs_bad > allowed:
            self.fail(message or f"result error: max abs diff {max_diff}, tolerance {tol}")

    def assertRtolEqual(self, x, y, prec=1.e-4, prec16=1.e-3, auto_trans_dtype=False,
                        message=None):
        if isinstance(x, Sequence) and isinstance(y, Sequence) \
                and not isinstance(x, (str, bytes)):
            for a, b in zip(x, y):
                self.assertRtolEqual(a, b, prec, prec16, auto_trans_dtype, message)
            return
        if isinstance(x, torch.Tensor) and isinstance(y, Sequence):
            y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
        elif isinstance(x, Sequence) and isinstance(y, torch.Tensor):
            x = torch.as_tensor(x, dtype=y.dtype, device=y.device)

        if torch.is_tensor(x) and torch.is_tensor(y):
            if auto_trans_dtype:
                x = x.to(y.dtype)
            if x.dtype == torch.bfloat16 and y.dtype == torch.bfloat16:
                if x.shape != y.shape:
                    self.fail(message or f"shape error: {tuple(x.shape)} vs {tuple(y.shape)}")
                if not torch.allclose(x.detach().cpu(), y.detach().cpu(), rtol=prec16,
                                      atol=prec16):
                    self.fail(message or "result error (bfloat16)")
                return
            x = x.detach().cpu().numpy()
            y = y.detach().cpu().numpy()
        elif isinstance(x, Number) and isinstance(y, Number):
            x, y = np.array(x), np.array(y)
        x, y = np.asarray(x), np.asarray(y)

        if x.shape != y.shape:
            self.fail(message or f"shape error: {x.shape} vs {y.shape}")
        if x.dtype != y.dtype:
            self.fail(message or f"dtype error: {x.dtype} vs {y.dtype}")
        if x.dtype.type not in _ALLOWED_NP_DTYPES:
            self.fail(f"assertRtolEqual: dtype {x.dtype} is not one of bool, uint8/16, "
                      "int8/16/32/64, float16/32/64")
        if x.dtype == np.bool_:
            if not np.array_equal(x, y):
                self.fail(message or "result error (bool)")
        elif x.dtype == np.float16:
            self._rtol_compare_arrays(x, y, prec16, 6e-8, message)
        else:
            self._rtol_compare_arrays(x, y, prec, 1e-9, message)

    # ---- assertEqual -----------------------------------------------------------------------

    def _tensors_equal(self, a, b, prec, message, allow_inf, exact_dtype):
        super().assertEqual(a.is_sparse, b.is_sparse, message)
        if a.is_sparse:
            a, b = a.coalesce(), b.coalesce()
            self._tensors_equal(a._indices(), b._indices(), prec, message, allow_inf,
                                exact_dtype)
            self._tensors_equal(a._values(), b._values(), prec, message, allow_inf, exact_dtype)
            return
        super().assertEqual(a.size(), b.size(), message)
        if exact_dtype:
            super().assertEqual(a.dtype, b.dtype, message)
        if a.numel() == 0:
            return
        a = a.detach().cpu()
        b = b.detach().cpu()
        if a.is_quantized:
            a, b = a.dequantize(), b.dequantize()
        # `b` takes `a`'s dtype first (as torch_npu's helper does), so a float reference and a
        # bool result compare as numbers.
        if a.dtype in (torch.float16, torch.bfloat16, torch.bool):
            a = a.to(torch.float32)
        b = b.to(a.dtype)
        if a.is_floating_point() or a.is_complex():
            nan_a, nan_b = torch.isnan(a), torch.isnan(b)
            self.assertTrue(torch.equal(nan_a, nan_b), message or "NaNs at different places")
            same = nan_a.clone()
            if allow_inf:
                inf_a = torch.isinf(a)
                self.assertTrue(torch.equal(inf_a & (a > 0), torch.isinf(b) & (b > 0))
                                and torch.equal(inf_a & (a < 0), torch.isinf(b) & (b < 0)),
                                message or "infinities at different places")
                same |= inf_a
            diff = torch.where(same, torch.zeros_like(a), a - b).abs()
            if diff.is_complex():
                diff = diff.real
        else:
            diff = (a.to(torch.int64) - b.to(torch.int64)).abs()
        max_err = diff.max().item()
        self.assertLessEqual(max_err, prec, message)

    def _numbers_equal(self, x, y, prec, message, allow_inf):
        if isinstance(x, torch.Tensor):
            x = x.item()
        if isinstance(y, torch.Tensor):
            y = y.item()
        if abs(x) == float("inf") or abs(y) == float("inf"):
            if not allow_inf:
                self.fail(f"Expected finite numeric values - x={x}, y={y}")
            super().assertEqual(x, y, message)
            return
        super().assertLessEqual(abs(x - y), prec, message)

    def assertEqual(self, x, y, prec=None, message="", allow_inf=False, exact_dtype=None, *,
                    msg=None, **kwargs):
        if msg is not None and not message:
            message = msg
        if "rtol" in kwargs or "atol" in kwargs:  # PyTorch-style call: use its comparison
            torch.testing.assert_close(x, y, rtol=kwargs.get("rtol"), atol=kwargs.get("atol"),
                                       check_dtype=bool(exact_dtype), equal_nan=True,
                                       check_device=False, msg=message or None)
            return
        if exact_dtype is None:
            exact_dtype = self.exact_dtype
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        self._equal(x, y, prec, message, allow_inf, exact_dtype)

    def _equal(self, x, y, prec, message, allow_inf, exact_dtype):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            self._tensors_equal(x, y, prec, message, allow_inf, exact_dtype)
        elif isinstance(x, (Number, np.number)) and not isinstance(x, (bool, np.bool_)) \
                or isinstance(y, (Number, np.number)) and not isinstance(y, (bool, np.bool_)):
            if isinstance(x, torch.Tensor) and x.numel() != 1 \
                    or isinstance(y, torch.Tensor) and y.numel() != 1:
                super().assertEqual(x, y, message)
            elif isinstance(x, (Number, np.number, torch.Tensor)) \
                    and isinstance(y, (Number, np.number, torch.Tensor)):
                self._numbers_equal(x, y, prec, message, allow_inf)
            else:
                super().assertEqual(x, y, message)
        elif isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            self._tensors_equal(torch.from_numpy(np.ascontiguousarray(x)),
                                torch.from_numpy(np.ascontiguousarray(y)), prec, message,
                                allow_inf, exact_dtype)
        elif isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):
            super().assertEqual(x, y, message)
        elif isinstance(x, (set, frozenset)) and isinstance(y, (set, frozenset)):
            super().assertEqual(x, y, message)
        elif isinstance(x, dict) and isinstance(y, dict):
            if isinstance(x, OrderedDict) and isinstance(y, OrderedDict):
                self._equal(list(x.items()), list(y.items()), prec, message, allow_inf,
                            exact_dtype)
            else:
                super().assertEqual(set(x.keys()), set(y.keys()), message)
                for key in x:
                    self._equal(x[key], y[key], prec, message, allow_inf, exact_dtype)
        elif is_iterable(x) and is_iterable(y) and not (isinstance(x, torch.Tensor)
                                                         and x.dim() == 0) \
                and not (isinstance(y, torch.Tensor) and y.dim() == 0):
            # a tensor against a list compares element by element, as torch_npu's helper does
            x, y = list(x), list(y)
            super().assertEqual(len(x), len(y), message)
            for a, b in zip(x, y):
                self._equal(a, b, prec, message, allow_inf, exact_dtype)
        else:
            super().assertEqual(x, y, message)

    def assertAlmostEqual(self, x, y, places=None, msg=None, delta=None, allow_inf=None):
        prec = 10 ** (-places) if places else delta
        self.assertEqual(x, y, prec, msg or "", bool(allow_inf))

    def assertNotEqual(self, x, y, prec=None, message=""):
        if isinstance(prec, str) and not message:
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.size() != y.size():
                return
            a = x.detach().cpu().to(torch.float64)
            b = y.detach().cpu().to(torch.float64)
            if not torch.equal(torch.isnan(a), torch.isnan(b)):
                return
            diff = torch.where(torch.isnan(a), torch.zeros_like(a), (a - b).abs())
            self.assertGreater(x.numel(), 0)
            self.assertGreaterEqual(diff.max().item(), prec, message)
            return
        try:
            self.assertGreaterEqual(abs(x - y), prec, message)
        except (TypeError, AssertionError):
            super().assertNotEqual(x, y, message)

    def assertTensorsSlowEqual(self, x, y, prec=None, message=""):
        self.assertEqual(x.size(), y.size())
        self.assertEqual(x.dtype, y.dtype)
        y = y.type_as(x)
        if x.dtype == torch.bool:
            self.assertEqual(x, y)
            return
        worst = 0
        for index in iter_indices(x):
            worst = max(worst, abs(x[index] - y[index]))
        self.assertLessEqual(worst, prec, message)

    def assertObjectIn(self, obj, iterable):
        if not any(obj is item for item in iterable):
            raise AssertionError("object not found in iterable")

    def assertExpectedRaises(self, exc_type, call_fn, *args, subname=None, **kwargs):
        try:
            call_fn(*args, **kwargs)
        except exc_type as e:
            self.assertExpected(str(e), subname)
            return
        self.fail("Did not raise when expected to")

    def assertNotWarn(self, call_fn, msg=""):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call_fn()
        self.assertTrue(len(caught) == 0, msg)

    def assertWarns(self, call_fn, msg="", *args, **kwargs):
        if isinstance(call_fn, type) and issubclass(call_fn, Warning):  # unittest's form
            return super().assertWarns(call_fn, msg, *args, **kwargs) if msg \
                else super().assertWarns(call_fn)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call_fn()
        self.assertTrue(len(caught) > 0, msg)
        return None

    @contextmanager
    def maybeWarnsRegex(self, category, regex=""):
        """Fails when the block raises a warning other than `category` matching `regex`."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", message=regex, category=category)
            yield
        if caught:
            self.fail("Caught unexpected warnings:\n" + "\n".join(
                warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
                for w in caught))

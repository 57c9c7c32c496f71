"""torch_npu.testing.decorator: dtype/format parametrization of torch_npu's operator tests.

Written for SimNPU from the documented behaviour: `@Dtypes(torch.float, torch.half)` and
`@Formats(0, 3)` mark a test method; `@instantiate_tests` on the class replaces each marked
method by one method per combination, named `<name>_<dtype>` / `<name>_<format>` (dtype first),
passing the value to the method's parameter whose name contains "dtype" / "format", and
`device="npu"` when the method has a `device` parameter.
"""
from __future__ import annotations

import functools
import inspect
import itertools

import torch


class Dtypes:
    def __init__(self, *dtypes):
        if not dtypes:
            raise RuntimeError("Dtypes: no dtypes given; pass one or more torch dtypes")
        bad = [d for d in dtypes if not isinstance(d, torch.dtype)]
        if bad:
            raise RuntimeError(f"Dtypes: {bad!r} are not torch dtypes")
        self.args = dtypes

    def __call__(self, fn):
        fn.dtypes = self.args
        return fn


class Formats:
    def __init__(self, *formats):
        if not formats:
            raise RuntimeError("Formats: no formats given; pass one or more ACL format numbers")
        self.args = formats

    def __call__(self, fn):
        fn.formats = self.args
        return fn


def _bind(func, name, kwargs):
    @functools.wraps(func)
    def bound(self):
        return func(self, **kwargs)
    bound.__name__ = name
    return bound


def instantiate_tests(cls=None, **_unused):
    def expand(klass):
        for name, func in list(vars(klass).items()):
            axes = []
            if hasattr(func, "dtypes"):
                axes.append(("dtype", func.dtypes))
            if hasattr(func, "formats"):
                axes.append(("format", func.formats))
            if not axes:
                continue
            params = inspect.getfullargspec(func).args
            for combo in itertools.product(*[values for _, values in axes]):
                kwargs = {"device": "npu"} if "device" in params else {}
                test_name = name
                for (axis, _), value in zip(axes, combo):
                    test_name += "_" + (str(value).split(".")[1] if axis == "dtype" else str(value))
                    matches = [p for p in params if axis in p]
                    if len(matches) != 1:
                        raise RuntimeError(f"instantiate_tests: {name} needs exactly one "
                                           f"parameter whose name contains {axis!r}, has "
                                           f"{matches}")
                    kwargs[matches[0]] = value
                setattr(klass, test_name, _bind(func, test_name, kwargs))
            delattr(klass, name)
        return klass

    return expand(cls) if cls is not None else expand

"""torch_npu.testing.testcase / common_utils / decorator: the helpers torch_npu's own operator
tests import (tests/third_party_runner runs those files), checked against their documented
behaviour, and the run-time switches those files set (torch.npu.config, use_compatible_impl)."""

import unittest

import numpy as np
import pytest
import torch

import torch_npu
from torch_npu.testing.common_utils import (SkipIfNotGteCANNVersion, SupportedDevices,
                                            create_common_tensor)
from torch_npu.testing.decorator import Dtypes, Formats, instantiate_tests
from torch_npu.testing.testcase import TestCase


class _Probe(TestCase):
    def runTest(self):
        pass


@pytest.fixture
def case():
    return _Probe()


def test_assert_rtol_equal_tolerances(case):
    x = np.ones(1000, np.float32)
    case.assertRtolEqual(x, x * (1 + 5e-5))           # within prec=1e-4 relative
    y = x.copy()
    y[0] = 2.0                                        # 1 bad element of 1000 > 1000 * 1e-4
    with pytest.raises(AssertionError):
        case.assertRtolEqual(x, y)
    case.assertRtolEqual(x, y, prec=1e-3)             # 1 <= 1000 * 1e-3 bad elements allowed
    h = np.ones(10, np.float16)
    case.assertRtolEqual(h, h + np.float16(5e-4))     # float16 uses prec16 = 1e-3
    with pytest.raises(AssertionError):
        case.assertRtolEqual(h, h + np.float16(1e-2))
    with pytest.raises(AssertionError, match="dtype"):
        case.assertRtolEqual(x, x.astype(np.float64))
    with pytest.raises(AssertionError, match="shape"):
        case.assertRtolEqual(x, x[:10])
    case.assertRtolEqual(np.float32(3.0), np.float32(3.0))   # 0-dim operands
    with pytest.raises(AssertionError):
        case.assertRtolEqual(np.array([np.nan, 1.0]), np.array([1.0, 1.0]))


def test_assert_equal_forms(case):
    case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6]))  # prec 1e-5
    with pytest.raises(AssertionError):
        case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]))
    case.assertEqual(torch.tensor([1, 0, 3]), [1, 0, 3])          # tensor against a list
    with pytest.raises(AssertionError):
        case.assertEqual(torch.tensor([1, 0, 3]), [1, 0, 4])
    case.assertEqual(np.array([1.0, 0.0], np.float16), np.array([True, False]))  # as numbers
    case.assertEqual(torch.tensor([1.0]), torch.tensor([1.5]), prec=0.6)
    case.assertEqual({"a": 1.0}, {"a": 1.0 + 1e-7})
    with pytest.raises(AssertionError):
        case.assertEqual(3, 4)


def test_create_common_tensor_same_values_on_both_devices():
    cpu, npu = create_common_tensor([np.float16, 0, (3, 4)], -2, 2)
    assert cpu.dtype == npu.dtype == torch.float16 and npu.device.type == "npu"
    assert torch.equal(cpu, npu.cpu()) and cpu.min() >= -2 and cpu.max() < 2
    _, nz = create_common_tensor([np.float32, 29, (4, 16), "extra"], 0, 1)
    assert torch_npu.get_npu_format(nz) == 29
    with pytest.raises(ValueError, match="dtype, acl_format, shape"):
        create_common_tensor([np.float32, 0], 0, 1)


def test_skip_decorators_follow_device_and_cann_version():
    ran = []

    class T(TestCase):
        @SupportedDevices(["Ascend910B"])
        def test_on_910b(self):
            ran.append("910B")

        @SupportedDevices(["Ascend310P"])
        def test_on_310p(self):
            ran.append("310P")

        @SkipIfNotGteCANNVersion("7.0.0")
        def test_old_cann(self):
            ran.append("7.0.0")

        @SkipIfNotGteCANNVersion("99.0.0")
        def test_future_cann(self):
            ran.append("99")

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(T).run(result)
    assert sorted(ran) == ["7.0.0", "910B"] and len(result.skipped) == 2


def test_instantiate_tests_names_and_arguments():
    seen = []

    @instantiate_tests
    class T(TestCase):
        @Dtypes(torch.float, torch.half)
        @Formats(0, 3)
        def test_op(self, device, dtype, npu_format):
            seen.append((device, dtype, npu_format))

    names = sorted(n for n in dir(T) if n.startswith("test_"))
    assert names == ["test_op_float16_0", "test_op_float16_3", "test_op_float32_0",
                     "test_op_float32_3"]
    T("test_op_float16_3").test_op_float16_3()
    assert seen == [("npu", torch.half, 3)]


def test_cann_version_order():
    gte = torch_npu.npu.utils._is_gte_cann_version
    current = torch_npu.utils.get_cann_version()     # "8.0.RC3.sim"
    assert gte("8.0.RC2") and gte("8.0.RC3") and gte("7.0.0")
    assert not gte("8.0.0") and not gte("9.0.0"), current


def test_config_and_compatible_impl_switches():
    assert torch.npu.config.allow_internal_format is False
    torch.npu.config.allow_internal_format = True
    try:
        assert torch.npu.config.allow_internal_format is True
    finally:
        torch.npu.config.allow_internal_format = False
    with pytest.raises(AttributeError, match="allow_internal_format"):
        torch.npu.config.allow_internal_fmt = True
    assert not torch.npu.are_compatible_impl_enabled()
    torch.npu.use_compatible_impl(True)
    assert torch.npu.are_compatible_impl_enabled()
    torch.npu.use_compatible_impl(False)
    with pytest.raises(TypeError, match="bool"):
        torch.npu.use_compatible_impl("yes")


def test_npu_drop_path_drops_whole_samples():
    from torch_npu.contrib.module import NpuDropPath

    x = torch.ones(4000, 3, device="npu")
    dp = NpuDropPath(0.25).npu()
    y = dp(x).cpu()
    kept = (y[:, 0] != 0)
    assert torch.equal(y[kept], torch.full((int(kept.sum()), 3), 1 / 0.75))  # scaled rows
    assert torch.equal(y[~kept], torch.zeros(int((~kept).sum()), 3))         # whole rows
    assert abs(kept.float().mean().item() - 0.75) < 0.05
    dp.eval()
    assert torch.equal(dp(x), x)
    with pytest.raises(ValueError, match="drop_prob"):
        NpuDropPath(1.5)

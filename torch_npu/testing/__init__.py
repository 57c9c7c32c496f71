"""Helpers for testing code on npu, shared by SimNPU's own tests and benchmarks.

`torch_npu.testing.models`: small models (an MLP, a CNN, a GPT-style decoder), a seeded batch
generator and a training loop that records losses; no downloads.

`testcase`, `common_utils`, `decorator`, `common_distributed`: torch_npu's test helpers under
torch_npu's names (TestCase with assertRtolEqual, create_common_tensor, SupportedDevices, Dtypes,
...), written from their documented behaviour so torch_npu's own test files run unchanged
(tests/third_party_runner/, docs/third_party_tests.md).
"""


def peak_rss_mb() -> int:
    """This process's peak resident memory in MiB since it started its program (VmHWM).

    Not `resource.getrusage(RUSAGE_SELF).ru_maxrss`: Linux carries that figure across fork and
    exec, so a child started by a large parent (pytest after hundreds of tests) reports the
    parent's peak, not its own."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("/proc/self/status has no VmHWM line (not Linux?)")

"""The `npu-smi` command: runs the native tool installed beside this package.

The tool itself is C++ (tools/npu_smi.cpp); it reads the runtime's process registry. This
wrapper exists because console scripts are how a Python distribution installs a command.
"""

import os
import sys


def binary_path() -> str:
    # torch_npu.__path__ also lists the installed package when this file comes from a source
    # checkout (PYTHONPATH=<repo>), whose torch_npu/ holds no compiled parts.
    import torch_npu

    folders = list(getattr(torch_npu, "__path__", []))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in [here, *folders]:
        candidate = os.path.join(folder, "bin", "npu-smi")
        if os.path.exists(candidate):
            return candidate
    return os.path.join(here, "bin", "npu-smi")


def main() -> None:
    path = binary_path()
    if not os.path.exists(path):
        sys.exit(f"npu-smi: the native tool is missing at {path}; reinstall simnpu (make demo)")
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()

"""The CANN toolkit layout, for the checks and scripts that expect one:

    <prefix>/ascend-toolkit/set_env.sh         exports ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH,
                                               LD_LIBRARY_PATH and PATH
    <prefix>/ascend-toolkit/latest -> <version>
    <prefix>/ascend-toolkit/<version>/
        lib64/   a link to each file of torch_npu/lib (libnpu_runtime.so, in libascendcl.so's
                 role, ...), and libtorch_npu.so -> torch_npu/_C*.so: the library that holds
                 torch_npu's adapter, which extensions built for a card link with -ltorch_npu
                 (DeepSpeed's npu op builders do)
        bin      -> torch_npu/bin   (npu-smi)
        include  -> torch_npu/include (the runtime's C headers), when installed
        x86_64-linux/ascend_toolkit_install.info   (package_name, version, arch, os, path)

`make setup` creates it under the virtual environment (.venv/Ascend); elsewhere run
``python -m torch_npu.utils.toolkit [--prefix DIR]`` (default: ~/Ascend, CANN's place for an
install without root). The links point into the installed package, so the toolkit and
torch_npu always share one runtime library. Standard library only: collect_env reads
toolkits with it when torch_npu itself is broken.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Optional

INFO_NAME = "ascend_toolkit_install.info"


def _arch_dir() -> str:
    return f"{platform.machine() or 'x86_64'}-linux"


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _compiled_dir() -> str:
    """Where the compiled parts live (a source checkout borrows the installed ones)."""
    here = _package_dir()
    if os.path.exists(os.path.join(here, "lib", "libnpu_runtime.so")):
        return here
    from importlib import metadata

    return os.path.abspath(str(metadata.distribution("simnpu").locate_file("torch_npu")))


_SET_ENV = """\
# SimNPU's CANN toolkit environment: `source {path}`
# (written by python -m torch_npu.utils.toolkit; the same variables as CANN's set_env.sh)
_npu_toolkit_dir="$(cd "$(dirname "${{BASH_SOURCE[0]:-$0}}")" && pwd)"
export ASCEND_TOOLKIT_HOME="$_npu_toolkit_dir/latest"
export ASCEND_HOME_PATH="$ASCEND_TOOLKIT_HOME"
export LD_LIBRARY_PATH="$ASCEND_TOOLKIT_HOME/lib64${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
export PATH="$ASCEND_TOOLKIT_HOME/bin${{PATH:+:$PATH}}"
unset _npu_toolkit_dir
"""


def _link(target: str, name: str) -> None:
    if os.path.islink(name) or os.path.exists(name):
        if os.path.islink(name) and os.readlink(name) == target:
            return
        os.remove(name)
    os.symlink(target, name)


def _compiled_module(compiled: str) -> Optional[str]:
    from importlib.machinery import EXTENSION_SUFFIXES

    for suffix in EXTENSION_SUFFIXES:
        path = os.path.join(compiled, "_C" + suffix)
        if os.path.exists(path):
            return path
    return None


def _fill_lib64(lib64: str, compiled: str) -> None:
    """lib64 as a folder of links (a link to torch_npu/lib itself could not also hold
    libtorch_npu.so without writing into the installed package)."""
    if os.path.islink(lib64):
        os.remove(lib64)  # the layout of earlier versions
    os.makedirs(lib64, exist_ok=True)
    lib = os.path.join(compiled, "lib")
    wanted = {name: os.path.join(lib, name) for name in os.listdir(lib)}
    module = _compiled_module(compiled)
    if module is not None:
        # One file under two names: the dynamic loader maps it once (it compares the file, not
        # the name), so an extension that needs libtorch_npu.so gets the adapter already loaded.
        wanted["libtorch_npu.so"] = module
    for name in os.listdir(lib64):
        if name not in wanted and os.path.islink(os.path.join(lib64, name)):
            os.remove(os.path.join(lib64, name))
    for name, target in wanted.items():
        _link(target, os.path.join(lib64, name))


def install(prefix: str, version: Optional[str] = None) -> str:
    """Creates (or refreshes) the layout under `prefix`; returns the path of set_env.sh."""
    if version is None:
        from torch_npu.utils import get_cann_version

        version = get_cann_version()
    compiled = _compiled_dir()
    root = os.path.join(os.path.abspath(os.path.expanduser(prefix)), "ascend-toolkit")
    home = os.path.join(root, version)
    try:
        os.makedirs(os.path.join(home, _arch_dir()), exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot create the toolkit folder {home}: {e.strerror}; choose a writable "
                      "place with --prefix") from e
    _fill_lib64(os.path.join(home, "lib64"), compiled)
    for name, target in (("bin", os.path.join(compiled, "bin")),
                         ("include", os.path.join(compiled, "include"))):
        if os.path.isdir(target):
            _link(target, os.path.join(home, name))
    with open(os.path.join(home, _arch_dir(), INFO_NAME), "w") as f:
        f.write(f"package_name=Ascend-cann-toolkit\nversion={version}\n"
                f"arch={platform.machine() or 'x86_64'}\nos=linux\n"
                f"path={os.path.join(home, _arch_dir())}\n")
    _link(version, os.path.join(root, "latest"))
    set_env = os.path.join(root, "set_env.sh")
    with open(set_env, "w") as f:
        f.write(_SET_ENV.format(path=set_env))
    return set_env


def read_toolkit(home: str) -> dict:
    """What a toolkit folder (ASCEND_TOOLKIT_HOME) holds: {"exists", "version", "runtime"};
    runtime is the real path of its lib64/libnpu_runtime.so, or None."""
    facts: dict = {"exists": os.path.isdir(home), "version": None, "runtime": None}
    if not facts["exists"]:
        return facts
    info = os.path.join(home, _arch_dir(), INFO_NAME)
    if os.path.exists(info):
        with open(info) as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key == "version":
                    facts["version"] = value
    runtime = os.path.join(home, "lib64", "libnpu_runtime.so")
    if os.path.exists(runtime):
        facts["runtime"] = os.path.realpath(runtime)
    return facts


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_npu.utils.toolkit",
        description="Create CANN's toolkit layout (ascend-toolkit/latest, set_env.sh) for this "
                    "SimNPU install.")
    parser.add_argument("--prefix", default=os.path.join("~", "Ascend"),
                        help="the folder that receives ascend-toolkit/ (default: ~/Ascend)")
    args = parser.parse_args(argv)
    set_env = install(args.prefix)
    print(f"toolkit ready: source {set_env}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

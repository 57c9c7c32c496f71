"""Environment check: the "environment portrait" and a diagnosis of what is broken.

    python -m torch_npu.utils.collect_env

prints the versions the article asks users to record before debugging (driver, runtime in the
role of CANN, PyTorch, torch_npu, Python, OS, compiler, CPU), then one line per check with OK
or the problem, the message users see, its cause and its fix. Exit status: 0 when every check
passed, 1 when a problem was found.

This is the tool users run when things are broken, so it must never crash itself:
- This module imports nothing but the standard library, and `torch_npu/__init__.py` runs it
  before it loads anything (`-m` imports the parent package first, which may be what fails).
- Everything that touches torch or torch_npu happens in a child interpreter, the probe: it
  imports torch with backend autoload off, reads what the build recorded (version.py), imports
  torch_npu, and reports each step as JSON. An exception, or even a crash of the probe, becomes
  a diagnosis here instead of a traceback.
- The checks turn the probe's facts into diagnoses; each names the message a user would meet
  (the article's common failures among them) and how to fix it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any, Optional

_PROBE_RESULT = "__NPU_COLLECT_ENV_RESULT__"
_PROBE_STAGE = "__NPU_COLLECT_ENV_STAGE__"
_PROBE_TIMEOUT_S = 180

# Environment variables that change how torch_npu behaves, reported when set.
_ENV_VARS = (
    "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_LAUNCH_BLOCKING", "TASK_QUEUE_ENABLE",
    "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_NO_NPU_MEMORY_CACHING", "TORCH_NPU_FALLBACK_CPU_DISABLE",
    "TORCH_TRANSFER_TO_NPU", "TORCH_DEVICE_BACKEND_AUTOLOAD", "NPU_SIM_DEVICE_COUNT",
    "NPU_SIM_HBM_GB", "NPU_SIM_RUNTIME_DIR", "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT",
    "HCCL_BUFFSIZE", "ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_GLOBAL_LOG_LEVEL",
    "ASCEND_SLOG_PRINT_TO_STDOUT", "ASCEND_PROCESS_LOG_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "PYTHONPATH",
)
_RELEVANT_PACKAGES = re.compile(
    r"torch|npu|numpy|mypy|onnx|triton|optree|apex|accelerate|transformers")
_CPU_TORCH_INSTALL = "pip install torch=={version} --index-url https://download.pytorch.org/whl/cpu"
_REINSTALL = ("reinstall simnpu from its source tree: `make setup`, or "
              "`pip install --no-build-isolation --no-deps .`")


# ---- the probe: runs in a child interpreter ---------------------------------------------------


def _probe_stage(name: str) -> None:
    """Marks progress on stdout, so a probe that crashes says where it crashed."""
    print(f"{_PROBE_STAGE} {name}", flush=True)


def _exception_facts(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


def _loaded_libraries(name: str) -> list[str]:
    """Paths of the shared objects called `name` mapped into this process (Linux)."""
    found = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if os.path.basename(path) == name and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _locate_package(facts: dict) -> None:
    """Finds torch_npu and its compiled parts without importing it (as __init__.py does)."""
    import importlib.util
    from importlib import metadata

    spec = importlib.util.find_spec("torch_npu")
    if spec is None or not spec.submodule_search_locations:
        facts["package_dir"] = None
        return
    package_dir = os.path.abspath(list(spec.submodule_search_locations)[0])
    facts["package_dir"] = package_dir
    compiled_dir = package_dir
    if not os.path.exists(os.path.join(package_dir, "version.py")):
        try:  # a source checkout borrows the compiled parts of the installed simnpu
            compiled_dir = os.path.abspath(
                str(metadata.distribution("simnpu").locate_file("torch_npu")))
        except metadata.PackageNotFoundError:
            compiled_dir = None
    facts["compiled_dir"] = compiled_dir
    if compiled_dir is None:
        return
    version_file = os.path.join(compiled_dir, "version.py")
    if os.path.exists(version_file):
        namespace: dict = {}
        try:
            with open(version_file) as f:
                exec(compile(f.read(), version_file, "exec"), namespace)
            facts["version"] = {k: namespace.get(k) for k in ("__version__", "torch_version",
                                                               "build_type")}
        except Exception as e:  # an edited or truncated version.py
            facts["version_error"] = _exception_facts(e)
    facts["extensions"] = sorted(f for f in os.listdir(compiled_dir) if f.startswith("_C."))
    runtime = os.path.join(compiled_dir, "lib", "libnpu_runtime.so")
    facts["runtime_library"] = runtime if os.path.exists(runtime) else None
    facts["expected_runtime_library"] = runtime


def _runtime_versions_by_ctypes(path: str) -> dict:
    """Loads the runtime library alone (it has no torch in it) to read its versions."""
    import ctypes

    try:
        lib = ctypes.CDLL(path)
        out = {}
        for key, symbol in (("runtime", "npuGetRuntimeVersion"), ("driver", "npuGetDriverVersion")):
            fn = getattr(lib, symbol)
            fn.restype = ctypes.c_char_p
            out[key] = fn().decode()
        return out
    except Exception as e:
        return {"error": _exception_facts(e)}


def _probe_devices(facts: dict) -> None:
    import warnings

    import torch

    import torch_npu

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        count = torch.npu.device_count()
    facts["device_count"] = count
    facts["visible_devices_warning"] = torch_npu._C._npu_visibleDevicesWarning() or None
    facts["devices"] = []
    for i in range(count):
        p = torch.npu.get_device_properties(i)
        facts["devices"].append({"name": p.name, "total_memory": p.total_memory,
                                 "cube_core_num": p.cube_core_num,
                                 "vector_core_num": p.vector_core_num})
    if count == 0:
        return
    _probe_stage("allocator")
    try:
        torch.empty(1, device="npu")  # the allocator reads PYTORCH_NPU_ALLOC_CONF on first use
        facts["allocator"] = {"ok": True}
    except Exception as e:
        facts["allocator"] = {"ok": False, **_exception_facts(e)}
        return
    _probe_stage("matmul")
    try:
        a = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 8
        on_npu = (a.npu() @ a.npu()).cpu()
        facts["matmul"] = {"ok": bool(torch.allclose(on_npu, a @ a)), "device": "npu:0"}
    except Exception as e:
        facts["matmul"] = {"ok": False, **_exception_facts(e)}


def _probe(package_parent: str) -> dict:
    """Collects the facts that need torch and torch_npu; never raises."""
    facts: dict[str, Any] = {}
    if package_parent and package_parent not in sys.path:
        sys.path.insert(0, package_parent)
    _probe_stage("import torch")
    try:
        import torch  # with TORCH_DEVICE_BACKEND_AUTOLOAD=0, set by the parent
    except Exception as e:
        facts["torch_error"] = _exception_facts(e)
        return facts
    facts["torch"] = {"version": str(torch.__version__), "debug": bool(torch.version.debug),
                      "cuda": torch.version.cuda, "file": os.path.dirname(torch.__file__)}
    try:
        from importlib import metadata

        facts["autoload_entry_points"] = [
            f"{ep.name} = {ep.value}" for ep in metadata.entry_points(group="torch.backends")]
    except Exception as e:
        facts["autoload_entry_points_error"] = _exception_facts(e)

    _probe_stage("locate torch_npu")
    try:
        _locate_package(facts)
    except Exception as e:
        facts["locate_error"] = _exception_facts(e)

    _probe_stage("import torch_npu")
    try:
        import torch_npu

        facts["import"] = {"ok": True, "version": torch_npu.__version__}
    except BaseException as e:  # SystemExit too: nothing may stop the report
        facts["import"] = {"ok": False, **_exception_facts(e)}
    facts["loaded_runtime_libraries"] = _loaded_libraries("libnpu_runtime.so")

    if not facts["import"]["ok"]:
        if facts.get("runtime_library"):
            _probe_stage("load runtime library")
            facts["runtime_versions"] = _runtime_versions_by_ctypes(facts["runtime_library"])
        return facts
    facts["torch_has_npu"] = hasattr(torch, "npu")
    facts["runtime_versions"] = {"runtime": torch_npu._C._npu_runtimeVersion(),
                                 "driver": torch_npu._C._npu_driverVersion()}
    _probe_stage("devices")
    try:
        _probe_devices(facts)
    except Exception as e:
        facts["devices_error"] = _exception_facts(e)
    return facts


def _probe_main(package_parent: str) -> None:
    facts = _probe(package_parent)
    print(_PROBE_RESULT + json.dumps(facts), flush=True)


def run_probe(env: Optional[dict] = None) -> dict:
    """Runs the probe in a child interpreter and returns its facts (or how it failed)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child_env = dict(os.environ if env is None else env)
    # A broken torch_npu must not break `import torch` in the probe: torch_npu is imported
    # explicitly afterwards, where its failure is caught and named.
    child_env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    loader = ("import importlib.util, sys; "
              "s = importlib.util.spec_from_file_location('_npu_collect_env_probe', sys.argv[1]); "
              "m = sys.modules[s.name] = importlib.util.module_from_spec(s); "
              "s.loader.exec_module(m); "
              "m._probe_main(sys.argv[2])")
    try:
        argv = [sys.executable, "-c", loader, os.path.abspath(__file__), package_parent]
        r = subprocess.run(argv, capture_output=True, text=True, env=child_env,
                           timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"probe_failed": f"the probe did not finish within {_PROBE_TIMEOUT_S} s",
                "probe_stage": _last_stage(out)}
    except OSError as e:
        return {"probe_failed": f"could not start {sys.executable}: {e}"}
    for line in r.stdout.splitlines():
        if line.startswith(_PROBE_RESULT):
            return json.loads(line[len(_PROBE_RESULT):])
    how = (f"was killed by signal {-r.returncode}" if r.returncode < 0
           else f"exited with status {r.returncode}")
    return {"probe_failed": f"the probe {how}", "probe_stage": _last_stage(r.stdout),
            "probe_stderr": r.stderr[-2000:]}


def _last_stage(stdout: str) -> Optional[str]:
    stages = [ln.split(" ", 1)[1] for ln in stdout.splitlines() if ln.startswith(_PROBE_STAGE)]
    return stages[-1] if stages else None


# ---- facts about the host: this process, standard library only --------------------------------


def _run(cmd: list[str]) -> Optional[str]:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def get_os() -> str:
    name = None
    try:
        with open("/etc/os-release") as f:
            fields = dict(ln.rstrip().split("=", 1) for ln in f if "=" in ln)
        name = fields.get("PRETTY_NAME", "").strip('"') or None
    except OSError:
        pass
    return f"{name or platform.system()} ({platform.machine()})"


def _first_line(text: Optional[str]) -> str:
    return text.splitlines()[0] if text else "Could not collect"


def get_gcc_version() -> str:
    return _first_line(_run(["gcc", "--version"]))


def get_clang_version() -> str:
    return _first_line(_run(["clang", "--version"]))


def get_cmake_version() -> str:
    return _first_line(_run(["cmake", "--version"]))


def get_libc_version() -> str:
    lib, version = platform.libc_ver()
    return f"{lib}-{version}" if lib else "Could not collect"


def get_cpu_info() -> str:
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model or platform.processor() or 'unknown'}, {cores} core(s) usable by this process"


def get_python_version() -> str:
    bits = 64 if sys.maxsize > 2**32 else 32
    return f"{platform.python_version()} ({bits}-bit runtime)"


def get_pip_packages() -> list[str]:
    from importlib import metadata

    seen: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name") or ""
        if _RELEVANT_PACKAGES.search(name.lower()) and name.lower() not in seen:
            seen[name.lower()] = f"{name}=={dist.version}"
    return [seen[k] for k in sorted(seen)]


def get_env_vars(env: Optional[dict] = None) -> dict:
    env = os.environ if env is None else env
    return {k: env[k] for k in _ENV_VARS if k in env}


# ---- checks ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Check:
    """One line of the report. status: "OK", "FAIL" (a problem) or "SKIP" (not checkable)."""

    name: str
    status: str
    detail: str
    symptom: Optional[str] = None  # the message a user meets
    cause: Optional[str] = None
    fix: Optional[str] = None


def _classify_import_error(message: str) -> str:
    if "libnpu_runtime" in message and "cannot open shared object" in message:
        return "native_missing"
    if "was built for torch" in message or "undefined symbol" in message:
        return "version_mismatch"
    if "holds no compiled extension" in message or "torch_npu._C" in message:
        return "extension_missing"
    return "other"


def _torch_checks(facts: dict) -> list[Check]:
    if "torch_error" in facts:
        err = facts["torch_error"]
        return [Check("torch imports", "FAIL", f"{err['type']}: {err['message']}",
                      symptom=f"{err['type']}: {err['message']}",
                      cause="PyTorch is not installed in this Python environment, or is broken",
                      fix=f"activate the right virtual environment, or {_CPU_TORCH_INSTALL}"
                          .format(version="<the version torch_npu was built for>"))]
    torch = facts["torch"]
    checks = [Check("torch imports", "OK", f"torch {torch['version']} from {torch['file']}")]
    if torch["cuda"]:
        checks.append(Check(
            "torch is a CPU build", "FAIL",
            f"torch {torch['version']} is built for CUDA {torch['cuda']}",
            symptom="device mismatches and CUDA errors that have nothing to do with the NPU",
            cause="torch_npu plugs into the CPU build of PyTorch; a CUDA build brings its own "
                  "device runtime",
            fix="install the CPU build: " + _CPU_TORCH_INSTALL.format(
                version=torch["version"].split("+")[0])))
    else:
        checks.append(Check("torch is a CPU build", "OK", torch["version"]))
    return checks


def _version_check(facts: dict) -> Check:
    version = facts.get("version")
    if facts.get("package_dir") is None:
        return Check("version matrix", "FAIL", "torch_npu is not found by this Python",
                     symptom="ModuleNotFoundError: No module named 'torch_npu'",
                     cause="simnpu is not installed in this environment",
                     fix=_REINSTALL + ", with this environment's pip")
    if not version:
        why = (f"{facts['version_error']['type']}: {facts['version_error']['message']}"
               if "version_error" in facts else "no version.py beside the compiled extension")
        return Check("version matrix", "FAIL", f"the build's version record is unreadable ({why})",
                     cause="torch_npu is not built, or its install is incomplete",
                     fix=_REINSTALL)
    built_for, installed = version["torch_version"], facts["torch"]["version"]
    row = f"torch_npu {version['__version__']} needs torch {built_for}, found torch {installed}"
    if built_for == installed:
        return Check("version matrix", "OK", row)
    return Check(
        "version matrix", "FAIL", row,
        symptom=f"ImportError: torch_npu {version['__version__']} was built for torch {built_for}, "
                f"but torch {installed} is installed",
        cause="torch_npu's compiled extension only works with the torch it was compiled against "
              "(on real Ascend a CANN/torch_npu mismatch shows as "
              "'RuntimeError: NPU error: ACL_ERROR_INVALID_PARAM')",
        fix=f"{_CPU_TORCH_INSTALL.format(version=built_for.split('+')[0])}, or rebuild simnpu "
            f"against torch {installed} (`make setup`)")


def _native_check(facts: dict) -> Check:
    name = "native libraries load"
    expected = facts.get("expected_runtime_library")
    imp = facts.get("import", {})
    kind = _classify_import_error(imp.get("message", "")) if not imp.get("ok", True) else None
    if (expected and not facts.get("runtime_library")) or kind == "native_missing":
        return Check(
            name, "FAIL", f"libnpu_runtime.so is missing: expected at {expected}",
            symptom=(f"{imp['type']}: {imp['message']}" if kind else
                     "ImportError: libnpu_runtime.so: cannot open shared object file: No such "
                     "file or directory"),
            cause="the simulated runtime library (the counterpart of CANN's libascendcl.so) is "
                  "not beside torch_npu/_C: an incomplete install, or a torch_npu folder copied "
                  "without its lib/ folder",
            fix=_REINSTALL + " (on real Ascend the fix for libascendcl.so is "
                             "`source /usr/local/Ascend/ascend-toolkit/set_env.sh`)")
    if facts.get("compiled_dir") and not facts.get("extensions"):
        return Check(name, "FAIL", f"no compiled extension _C.*.so in {facts['compiled_dir']}",
                     symptom="ModuleNotFoundError: No module named 'torch_npu._C'",
                     cause="torch_npu is not built or the install is incomplete",
                     fix=_REINSTALL)
    if kind == "extension_missing":
        ext = ", ".join(facts.get("extensions") or []) or "none"
        return Check(name, "FAIL", f"the compiled extension does not load (found: {ext})",
                     symptom=f"{imp['type']}: {imp['message']}",
                     cause="the extension is missing or was built for another Python "
                           f"(this is Python {platform.python_version()})",
                     fix=_REINSTALL + " with this Python")
    loaded = facts.get("loaded_runtime_libraries") or []
    if imp.get("ok") and expected:
        strays = [p for p in loaded if os.path.realpath(p) != os.path.realpath(expected)]
        if strays:
            return Check(
                name, "FAIL", f"torch_npu loaded {strays[0]} instead of its own {expected}",
                symptom="obscure runtime errors (on real Ascend: 'RuntimeError: NPU error: "
                        "ACL_ERROR_INVALID_PARAM', a runtime that does not match torch_npu)",
                cause="LD_LIBRARY_PATH (or LD_PRELOAD) names a folder with another build's "
                      "libnpu_runtime.so, and it takes precedence over the package's own",
                fix=f"remove {os.path.dirname(strays[0])} from LD_LIBRARY_PATH / LD_PRELOAD")
        return Check(name, "OK", f"torch_npu/_C and {loaded[0] if loaded else expected}")
    if not imp.get("ok", False):
        versions = facts.get("runtime_versions") or {}
        if "error" in versions:
            err = versions["error"]
            return Check(name, "FAIL", f"{expected} does not load: {err['message']}",
                         symptom=f"ImportError: {err['message']}",
                         cause="the runtime library is damaged or built for another system",
                         fix=_REINSTALL)
        if versions:
            return Check(name, "SKIP", "libnpu_runtime.so loads alone; torch_npu/_C is not "
                                       "loaded because import torch_npu stops earlier")
    return Check(name, "SKIP", "not checked")


def _import_check(facts: dict, earlier: list[Check]) -> Check:
    imp = facts.get("import", {})
    if imp.get("ok"):
        return Check("import torch_npu", "OK", f"torch_npu {imp['version']}")
    message = f"{imp.get('type')}: {imp.get('message')}"
    explained = [c.name for c in earlier if c.status == "FAIL"]
    return Check("import torch_npu", "FAIL", message, symptom=None if explained else message,
                 cause=(f"see '{explained[0]}' above" if explained else
                        "an unexpected error while loading torch_npu"),
                 fix=("fix the problem named above" if explained else
                      _REINSTALL + "; if that does not help, report this message"))


def _torch_npu_attr_check(facts: dict, env: dict) -> Check:
    name = "torch.npu exists"
    symptom = "AttributeError: module 'torch' has no attribute 'npu'"
    imp = facts.get("import", {})
    if not imp.get("ok"):
        return Check(name, "FAIL", "torch.npu cannot exist: torch_npu does not import",
                     symptom=symptom,
                     cause="torch.npu is registered by torch_npu, which fails to import (above)",
                     fix="fix the import problem above, then keep `import torch_npu` after "
                         "`import torch`")
    if not facts.get("torch_has_npu"):
        return Check(name, "FAIL", "import torch_npu succeeded but did not register torch.npu",
                     symptom=symptom, cause="a torch_npu that does not register its device module",
                     fix=_REINSTALL)
    autoload_off = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0"
    entry = any(e.endswith("= torch_npu:_autoload") for e in facts.get("autoload_entry_points", []))
    if autoload_off or not entry:
        why = ("TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns off torch's backend autoload"
               if autoload_off else "simnpu's `torch.backends` entry point is not installed, so "
                                    "`import torch` does not load torch_npu")
        return Check(name, "FAIL", f"only after an explicit `import torch_npu`: {why}",
                     symptom=symptom + " (in scripts that only `import torch`)",
                     cause=why,
                     fix="add `import torch_npu` after `import torch` in the script, or "
                         + ("unset TORCH_DEVICE_BACKEND_AUTOLOAD" if autoload_off else
                            _REINSTALL))
    return Check(name, "OK", "torch.npu is registered (also by `import torch` alone, via autoload)")


def _visible_devices_fix(warning: str) -> str:
    """The runtime's warning ends with the fix ("Set it to ..."); reuse it, it knows the count."""
    at = warning.find("Set it to")
    if at >= 0:
        return warning[at:]
    return "use unique, ascending ids, e.g. ASCEND_RT_VISIBLE_DEVICES=0,1"


def _device_checks(facts: dict, env: dict) -> list[Check]:
    names = ("devices visible", "ASCEND_RT_VISIBLE_DEVICES", "PYTORCH_NPU_ALLOC_CONF",
             "a matmul on npu")
    if not facts.get("import", {}).get("ok"):
        return [Check(n, "SKIP", "not checked: torch_npu does not import") for n in names]
    if "devices_error" in facts:
        err = facts["devices_error"]
        return [Check("devices visible", "FAIL", f"{err['type']}: {err['message']}",
                      symptom=f"{err['type']}: {err['message']}",
                      cause="the runtime fails to enumerate devices", fix=_REINSTALL)]
    checks = []
    count, warning = facts.get("device_count", 0), facts.get("visible_devices_warning")
    visible = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if count:
        checks.append(Check("devices visible", "OK", f"{count} NPU(s)"))
    else:
        checks.append(Check(
            "devices visible", "FAIL", "no NPU is visible",
            symptom="torch.npu.is_available() is False; RuntimeError: Invalid device index",
            cause=("ASCEND_RT_VISIBLE_DEVICES is invalid (next line)" if warning else
                   f"the simulator has no devices (NPU_SIM_DEVICE_COUNT="
                   f"{env.get('NPU_SIM_DEVICE_COUNT', 'unset')})"),
            fix=("correct ASCEND_RT_VISIBLE_DEVICES" if warning else
                 "unset NPU_SIM_DEVICE_COUNT or set it between 1 and 64")))
    if warning:
        checks.append(Check("ASCEND_RT_VISIBLE_DEVICES", "FAIL", f"{visible!r} is invalid",
                            symptom=f"UserWarning: {warning}",
                            cause="ids must be unique, ascending and below the device count",
                            fix=_visible_devices_fix(warning)))
    elif visible is not None:
        checks.append(Check("ASCEND_RT_VISIBLE_DEVICES", "OK",
                            f"{visible!r}: {count} device(s), renumbered from 0"))
    else:
        checks.append(Check("ASCEND_RT_VISIBLE_DEVICES", "OK", f"unset: all {count} devices"))
    alloc, conf = facts.get("allocator"), env.get("PYTORCH_NPU_ALLOC_CONF")
    if alloc is None:
        checks.append(Check("PYTORCH_NPU_ALLOC_CONF", "SKIP", "not checked: no device"))
    elif alloc["ok"]:
        checks.append(Check("PYTORCH_NPU_ALLOC_CONF", "OK",
                            f"{conf!r} parses" if conf else "unset: allocator defaults"))
    else:
        keys = re.search(r"expected (one of .*|an? .*)$", alloc["message"])
        checks.append(Check(
            "PYTORCH_NPU_ALLOC_CONF", "FAIL", f"{conf!r} does not parse",
            symptom=f"{alloc['type']}: {alloc['message']} (at the first NPU allocation)",
            cause="a key or value the caching allocator does not know",
            fix=("use " + keys.group(1) if keys else "correct the value") +
                "; the format is key:value,key:value, e.g. max_split_size_mb:128"))
    matmul = facts.get("matmul")
    if matmul is None:
        checks.append(Check("a matmul on npu", "SKIP", "not checked: no usable device"))
    elif matmul.get("ok"):
        checks.append(Check("a matmul on npu", "OK", "4x4 matmul on npu:0 matches the CPU"))
    else:
        detail = (f"{matmul['type']}: {matmul['message']}" if "type" in matmul
                  else "the result differs from the CPU's")
        checks.append(Check("a matmul on npu", "FAIL", detail, symptom=detail,
                            cause="an operator or the runtime misbehaves",
                            fix="run `python -m torch_npu.utils.op_report` on the failing code "
                                "and report the message"))
    return checks


def _toolkit_check(facts: dict, env: dict) -> Check:
    """ASCEND_TOOLKIT_HOME, as the article checks it (`echo $ASCEND_TOOLKIT_HOME`, `ls .../latest`):
    unset is fine (the runtime sits beside torch_npu/_C); set, it must be a toolkit whose
    runtime is the one torch_npu loads."""
    from torch_npu.utils.toolkit import read_toolkit

    name = "ASCEND_TOOLKIT_HOME"
    fix = ("`source <prefix>/ascend-toolkit/set_env.sh` of this install (`make setup` writes one "
           "under .venv/Ascend; `python -m torch_npu.utils.toolkit` writes ~/Ascend), or unset it")
    home = env.get(name)
    if not home:
        return Check(name, "OK", "unset: not needed, the runtime is found beside torch_npu/_C; "
                                 "set_env.sh of `python -m torch_npu.utils.toolkit` sets it")
    toolkit = read_toolkit(home)
    if not toolkit["exists"]:
        return Check(name, "FAIL", f"{home!r} does not exist",
                     symptom=f"ls: cannot access '{home}': No such file or directory",
                     cause="a set_env.sh of a moved or removed toolkit was sourced", fix=fix)
    expected = facts.get("expected_runtime_library")
    if toolkit["runtime"] is None:
        return Check(name, "FAIL", f"{home} has no lib64/libnpu_runtime.so",
                     cause="not a SimNPU toolkit (or a partial one)", fix=fix)
    if expected and os.path.realpath(expected) != toolkit["runtime"]:
        return Check(name, "FAIL", f"{home} is another install's toolkit: its runtime is "
                                   f"{toolkit['runtime']}, torch_npu's is {expected}",
                     symptom="its lib64 comes first in LD_LIBRARY_PATH, so torch_npu may load "
                             "a runtime of another build", fix=fix)
    return Check(name, "OK", f"toolkit {toolkit['version'] or '(version unknown)'} at {home}, "
                             "with torch_npu's runtime")


def run_checks(facts: dict, env: Optional[dict] = None) -> list[Check]:
    """Turns the probe's facts into the report's checks, in the order a user should fix them."""
    env = dict(os.environ if env is None else env)
    if "probe_failed" in facts:
        stage = facts.get("probe_stage") or "start-up"
        tail = (facts.get("probe_stderr") or "").strip().splitlines()[-3:]
        return [Check("probe", "FAIL", f"{facts['probe_failed']} during '{stage}'",
                      symptom=" | ".join(tail) or None,
                      cause=f"a crash or hang while the probe ran '{stage}'",
                      fix=f"run `python -c 'import torch, torch_npu'` to see the error; "
                          f"{_REINSTALL}")]
    checks = _torch_checks(facts)
    if "torch_error" in facts:
        return checks
    checks.append(_version_check(facts))
    checks.append(_native_check(facts))
    checks.append(_toolkit_check(facts, env))
    checks.append(_import_check(facts, checks))
    checks.append(_torch_npu_attr_check(facts, env))
    checks.extend(_device_checks(facts, env))
    return checks


# ---- the report --------------------------------------------------------------------------------


def get_env_info(env: Optional[dict] = None) -> dict:
    """The portrait and the checks, as data (for tools and tests)."""
    env = dict(os.environ if env is None else env)
    facts = run_probe(env)
    version = facts.get("version") or {}
    versions = facts.get("runtime_versions") or {}
    torch = facts.get("torch") or {}
    return {
        "torch_version": torch.get("version", "Could not collect"),
        "is_debug_build": torch.get("debug", "Could not collect"),
        "torch_npu_version": version.get("__version__", "Could not collect"),
        "torch_npu_built_for_torch": version.get("torch_version", "Could not collect"),
        "torch_npu_build_type": version.get("build_type", "Could not collect"),
        "driver_version": versions.get("driver", "Could not collect"),
        "cann_version": versions.get("runtime", "Could not collect"),
        "devices": facts.get("devices"),
        "os": get_os(),
        "gcc_version": get_gcc_version(),
        "clang_version": get_clang_version(),
        "cmake_version": get_cmake_version(),
        "libc_version": get_libc_version(),
        "python_version": get_python_version(),
        "python_platform": platform.platform(),
        "cpu_info": get_cpu_info(),
        "torch_location": torch.get("file", "Could not collect"),
        "torch_npu_location": facts.get("package_dir") or "Could not collect",
        "compiled_parts_location": facts.get("compiled_dir") or "Could not collect",
        "env_vars": get_env_vars(env),
        "pip_packages": get_pip_packages(),
        "checks": run_checks(facts, env),
    }


def format_env_info(info: dict) -> str:
    devices = info["devices"]
    lines = [
        "Environment portrait (record it before debugging)",
        "",
        f"PyTorch version: {info['torch_version']}",
        f"Is debug build: {info['is_debug_build']}",
        f"torch_npu version: {info['torch_npu_version']} (simnpu, "
        f"{info['torch_npu_build_type']} build, "
        f"built for torch {info['torch_npu_built_for_torch']})",
        f"NPU driver version: {info['driver_version']} (simulated NPU)",
        f"CANN version: {info['cann_version']} (the SimNPU runtime, in the role of CANN)",
    ]
    if devices is None:
        lines.append("NPU devices: Could not collect")
    else:
        lines.append(f"NPU devices: {len(devices)} visible")
        lines += [f"  npu:{i}  {d['name']}  {d['total_memory'] // 2**20} MB HBM  "
                  f"{d['cube_core_num']} cube / {d['vector_core_num']} vector cores"
                  for i, d in enumerate(devices)]
    lines += [
        "",
        f"OS: {info['os']}",
        f"GCC version: {info['gcc_version']}",
        f"Clang version: {info['clang_version']}",
        f"CMake version: {info['cmake_version']}",
        f"Libc version: {info['libc_version']}",
        "",
        f"Python version: {info['python_version']}",
        f"Python platform: {info['python_platform']}",
        f"CPU: {info['cpu_info']}",
        "",
        f"torch location: {info['torch_location']}",
        f"torch_npu location: {info['torch_npu_location']}",
        f"compiled parts location: {info['compiled_parts_location']}",
        "",
        "Environment variables:",
    ]
    lines += [f"  {k}={v}" for k, v in info["env_vars"].items()] or ["  (none of torch_npu's set)"]
    lines += ["", "Versions of relevant libraries:"]
    lines += [f"[pip3] {p}" for p in info["pip_packages"]] or ["  (none found)"]
    lines += ["", "Checks:"]
    for c in info["checks"]:
        lines.append(f"[{c.status:^4}] {c.name}: {c.detail}")
        for label in ("symptom", "cause", "fix"):
            value = getattr(c, label)
            if value:
                lines.append(f"       {label}: {value}")
    problems = sum(c.status == "FAIL" for c in info["checks"])
    lines.append("")
    lines.append(f"{problems} problem(s) found; docs/troubleshooting.md maps each message to its "
                 "cause and fix" if problems else "All checks passed.")
    return "\n".join(lines)


def get_pretty_env_info(env: Optional[dict] = None) -> str:
    return format_env_info(get_env_info(env))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_npu.utils.collect_env",
        description="Print the environment portrait (versions of the NPU stack, Python, OS) and "
                    "check that torch_npu can work here, naming the fix for each problem.")
    parser.parse_args(argv)
    print("Collecting environment information...", flush=True)
    info = get_env_info()
    print(format_env_info(info))
    return 1 if any(c.status == "FAIL" for c in info["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())

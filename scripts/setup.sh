#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages, the virtual environment with
# torch 2.13.0 (the CPU build), and the simnpu package built against it. Each step is skipped
# when it is already done, so `make test` and `make demo` may call this every time.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY=$VENV/bin/python

# 1. Debian packages: GoogleTest, Google Benchmark, ccache, nlohmann-json (c10d's flight recorder
#    template, which the hccl flight recorder instantiates, includes it; torch does not ship it).
need=()
for pkg in libgtest-dev libbenchmark-dev ccache nlohmann-json3-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 2. The virtual environment. torch is pinned exactly: any other spelling downloads a CUDA build.
if [ ! -x "$PY" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
fi
stamp=$VENV/.simnpu-deps
deps_hash=$(sha256sum scripts/requirements-dev.txt | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$deps_hash" ]; then
  echo "setup: installing Python dependencies"
  "$PY" -m pip install -q --disable-pip-version-check -r scripts/requirements-dev.txt
  echo "$deps_hash" > "$stamp"
fi

# 3. The project itself, built against the installed torch without build isolation. The build
#    directory persists (build/py), so an unchanged tree rebuilds in seconds. Our apex package
#    ships only where no other distribution provides `apex` (a real apex must not be overwritten).
if [ -f pyproject.toml ]; then
  packages="torch_npu;apex;atc;ais_bench"
  if "$PY" -c 'import importlib.metadata as m, sys
sys.exit(0 if set(m.packages_distributions().get("apex", [])) - {"simnpu"} else 1)'; then
    echo "setup: another apex is installed; simnpu's apex is left out"
    packages="torch_npu;atc;ais_bench"
  fi
  src_hash=$( (echo "$packages"; git ls-files -co --exclude-standard -- pyproject.toml \
               CMakeLists.txt include runtime ccl engine acl allocator kernels adapter torch_npu \
               apex tools atc ais_bench 2>/dev/null | sort | xargs cat 2>/dev/null) | sha256sum | cut -c1-16)
  pkg_stamp=$VENV/.simnpu-package
  if [ "$(cat "$pkg_stamp" 2>/dev/null)" != "$src_hash" ]; then
    echo "setup: building and installing simnpu"
    CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$PY" -m pip install -q --disable-pip-version-check \
      --no-build-isolation --no-deps -C wheel.packages="$packages" .
    # CANN's toolkit layout (ascend-toolkit/latest, set_env.sh) for this install, under the venv.
    "$PY" -m torch_npu.utils.toolkit --prefix "$VENV/Ascend" >/dev/null
    echo "$src_hash" > "$pkg_stamp"
  fi
fi

#!/usr/bin/env bash
# setup.sh — installs the Debian 12 packages dlam needs to build, test and benchmark,
# skipping everything that is already installed (fast when nothing is missing).
# Run as root (or with sudo available) on Debian 12.
set -euo pipefail

packages=(
  cmake g++ make pkg-config          # the build
  ninja-build                        # tools/test.sh's builds (make where it is missing)
  liblua5.4-dev                      # configuration files (liblua5.4.a: linked into dlam)
  libffi-dev                         # foreign functions (libffi.a: linked into dlam)
  libopenblas-serial-dev             # dot (OpenBLAS's build without threads, and cblas.h)
  libopenblas0-pthread               # dot with blas_threads > 1 (OpenBLAS with threads)
  libmimalloc-dev                    # the GC heap
  libgtest-dev                       # unit and lang tests
  valgrind                           # the cli.valgrind test (tests/cli/valgrind.sh)
  libedit-dev                        # the REPL's line editing (with libtinfo, libbsd, libmd:
                                     # their archives are linked into dlam)
  lua5.4 luajit                      # benchmark peers
  python3                            # the benchmark runner and tools/adfuzz.py (a test)
  clang-format                       # tools/format.sh --check (CI)
  clang                              # tools/test.sh's ASan+UBSan build (build-asan/)
  python3-numpy python3-pytest       # the Python package (python/) and its tests
  python3-setuptools python3-pip     # installing it (pip install --no-build-isolation ./python)
  python3-dev                        # its C part (python/dlam/_core.c): Python's headers
  python3-lupa                       # the Python call-overhead benchmark's peer
)

# One dpkg-query for all of them; a package it does not know is simply absent from its output.
installed="$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)"
missing=()
for p in "${packages[@]}"; do
  if ! grep -qx "$p installed" <<<"$installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup.sh: installing ${missing[*]}" >&2
sudo=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup.sh: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
# Installing OpenBLAS's threaded build makes it the system's libblas.so.3 (a higher
# priority in the alternatives), which NumPy and the benchmark peers would then use:
# the serial build stays the system's. (dlam loads each build by its own path.)
if [[ " ${missing[*]} " == *" libopenblas0-pthread "* ]]; then
  arch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    serial="/usr/lib/$arch/openblas-serial/$lib"
    if [[ -e "$serial" ]]; then
      "${sudo[@]}" update-alternatives --set "$lib-$arch" "$serial" >/dev/null || true
    fi
  done
fi

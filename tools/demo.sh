#!/usr/bin/env bash
# demo.sh — installs what is missing, builds the `dlam` binary and runs examples/demo.dlam.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${DLAM_JOBS:-2}" --target dlam
echo "---- build/dlam examples/demo.dlam ----"
build/dlam examples/demo.dlam
echo "---- build/dlam examples/logistic.dlam (a CSV in, a model fitted, a CSV out) ----"
build/dlam examples/logistic.dlam examples/data/points.csv /tmp/dlam-logistic-model.csv

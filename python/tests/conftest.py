"""conftest.py — the tests import the dlam package of this source tree (python/), which finds
libdlam in the build tree (or $DLAM_LIBRARY) and its C part, dlam._core, in the build tree's
python/ directory (made by the CMake build)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

"""conftest.py — the tests import the dlam package of this source tree (python/), which finds
libdlam in the build tree (or $DLAM_LIBRARY)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

"""setup.py — installs the dlam package with libdlam copied next to it, without network:

    pip install --no-build-isolation --break-system-packages ./python

after the CMake build (cmake -S . -B build && cmake --build build). The library is taken
from $DLAM_LIBRARY, else from ../build/embed/libdlam.so (the build tree of this checkout).
The package's C part, dlam._core (dlam/_core.c), is compiled here with the machine's C
compiler against Python's headers (Debian: python3-dev) and the C API's header
(../embed/include/dlam.h); it links against nothing else.
"""
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    """Copies libdlam.so into the built package, where dlam/__init__.py looks first."""

    def run(self):
        super().run()
        lib = os.environ.get("DLAM_LIBRARY") or os.path.join(HERE, "..", "build", "embed",
                                                             "libdlam.so")
        if not os.path.exists(lib):
            raise SystemExit("dlam: %s not found: build libdlam first (cmake --build build) "
                             "or set DLAM_LIBRARY" % lib)
        target = os.path.join(self.build_lib, "dlam", "libdlam.so")
        shutil.copyfile(os.path.realpath(lib), target)


setup(
    name="dlam",
    version="0.1.0",
    description="The dlam language (differentiable, embeddable) from Python",
    packages=["dlam"],
    ext_modules=[Extension("dlam._core", ["dlam/_core.c"],
                           include_dirs=[os.path.join(HERE, "..", "embed", "include")])],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithLibrary},
    zip_safe=False,
)

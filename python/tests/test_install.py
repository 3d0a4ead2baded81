"""test_install.py — the README's installation, without network: pip builds the package (its C
part compiled by the machine's compiler) with libdlam copied in, into a directory of its own
here (--target, in place of the system's site-packages), and the installed package works on
its own: it finds its library and its C part next to itself, not in the build tree."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_pip_install_without_network(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                          "--no-index", "--target", str(target), os.path.join(ROOT, "python")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    package = target / "dlam"
    names = os.listdir(package)
    assert "libdlam.so" in names and any(n.startswith("_core.") for n in names), names
    script = ("import dlam, numpy as np\n"
              "vm = dlam.VM()\n"
              "f = vm.eval('(lambda (x) (* x x))')\n"
              "print(dlam._core.__file__, dlam.library_path)\n"
              "print(f(3), vm.value_and_grad(f, 1.5))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DLAM_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    where, result = out.stdout.splitlines()
    core, lib = where.split()
    assert os.path.dirname(core) == str(package) and os.path.dirname(lib) == str(package)
    assert result == "9.0 (2.25, 3.0)"

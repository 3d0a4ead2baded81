"""fit.py — a Python host fitting y = a sin(b t) to data it makes with NumPy, through a host
function (a Python sin) that brings its derivative, by gradient descent on gradients dlam
takes through it. Checks the fit itself (exit status 0); run by python/tests as
test_example_fit_py. Needs the dlam package (pip install ... ./python, or PYTHONPATH=python).
"""
import sys

import numpy as np

import dlam

t = np.linspace(0.0, 1.0, 25)
y = 0.8 * np.sin(1.7 * t)  # the data: a = 0.8, b = 1.7

vm = dlam.VM(heap_limit_mb=64)
vm.register("host-sin", np.sin, vjp=lambda x, ybar: np.cos(x) * ybar)
vm["ts"], vm["ys"] = t, y
vm.eval("""
(define (loss p)
  (let ((a (vector-ref p 0)) (b (vector-ref p 1)))
    (let loop ((i 0) (acc 0))
      (if (= i (vector-length ts)) acc
          (let ((r (- (* a (host-sin (* b (vector-ref ts i)))) (vector-ref ys i))))
            (loop (+ i 1) (+ acc (* r r))))))))
""")
loss = vm["loss"]
p = np.array([1.0, 1.0])
for step in range(3000):
    value, grad = vm.value_and_grad(loss, p)
    p -= 0.05 * grad
print("a = %.4f, b = %.4f, loss = %.2e" % (p[0], p[1], value))
sys.exit(0 if abs(p[0] - 0.8) < 1e-3 and abs(p[1] - 1.7) < 1e-3 else 1)

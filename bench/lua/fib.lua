-- fib: naive doubly-recursive Fibonacci (same work as bench/dlam/fib.dlam).
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end
print(string.format("%.0f", fib(30)))

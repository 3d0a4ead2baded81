-- Extended Rosenbrock, plain evaluation (reference for dlam's `rosen-f`).
-- Usage: lua5.4 rosenbrock.lua f N REPS; prints f(x) with %.17g.
local mode, n, reps = arg[1], tonumber(arg[2]), tonumber(arg[3])
assert(mode == "f", "usage: rosenbrock.lua f N REPS")

local function rosen(x, n)
  local acc = 0.0
  for i = 1, n - 1 do
    local t = x[i + 1] - x[i] * x[i]
    local u = 1 - x[i]
    acc = acc + 100 * (t * t) + u * u
  end
  return acc
end

local x = {}
for i = 0, n - 1 do x[i + 1] = 0.5 + 0.001 * (i % 1000) end
local y
for _ = 1, reps do y = rosen(x, n) end
print(string.format("%.17g", y))

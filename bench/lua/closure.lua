-- closure: same work as bench/dlam/closure.dlam, in idiomatic Lua: the lists
-- are array tables, iota/map/fold_left are plain Lua functions, and the fold
-- calls a Lua function for + (dlam's fold-left calls the + primitive).
local function iota(n)
  local t = {}
  for i = 1, n do t[i] = i - 1 end
  return t
end
local function map(f, t)
  local r = {}
  for i = 1, #t do r[i] = f(t[i]) end
  return r
end
local function fold_left(f, acc, t)
  for i = 1, #t do acc = f(acc, t[i]) end
  return acc
end
local function add(a, b) return a + b end

local l = iota(1000000)
local m
do
  local k = 3
  m = map(function(x) return k * x end, l)
end
print(string.format("%.0f", fold_left(add, 0, m)))

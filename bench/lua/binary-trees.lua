-- binary-trees: same work as bench/dlam/binary-trees.dlam. A node is a table
-- {left, right}; a leaf is {} (dlam: a pair of empty lists).
local max_depth = 14
local function make(d)
  if d == 0 then return {} end
  return {make(d - 1), make(d - 1)}
end
local function check(t)
  if t[1] == nil then return 1 end
  return 1 + check(t[1]) + check(t[2])
end
local long_lived = make(max_depth)
local total = 0
for d = 4, max_depth, 2 do
  local n = 2 ^ (max_depth - d + 4)
  for _ = 1, n do total = total + check(make(d)) end
end
print(string.format("%.0f", total + check(long_lived)))

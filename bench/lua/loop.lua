-- loop: same work as bench/dlam/loop.dlam -- one tail call per iteration.
-- Lua does proper tail calls for `return f(...)`, so this is the same
-- algorithm, not the idiomatic numeric for (see loop-for.lua for that).
local function loop(i, acc)
  if i < 10000000 then
    return loop(i + 1, acc + i)
  end
  return acc
end
print(string.format("%.0f", loop(0, 0)))

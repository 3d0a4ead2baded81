-- loop-for: the idiomatic Lua loop, a numeric for (no call per iteration).
local acc = 0
for i = 0, 10000000 - 1 do
  acc = acc + i
end
print(string.format("%.0f", acc))

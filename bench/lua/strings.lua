-- strings: same work as bench/dlam/strings.dlam: table.concat to join, gmatch to
-- split, tonumber to read back.
local total = 0
for r = 1, 30 do
  local parts = {}
  for i = 0, 9999 do parts[#parts + 1] = tostring(i * r) end
  local text = table.concat(parts, ",")
  local sum = 0
  for f in text:gmatch("[^,]+") do sum = sum + tonumber(f) end
  total = total + #text + sum
end
print(string.format("%.0f", total))

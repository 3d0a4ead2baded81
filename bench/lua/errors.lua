-- errors: same work as bench/dlam/errors.dlam: error() with a string or a table (the
-- error object, its irritant read back), caught by pcall per entry.
local function check(i)
  local m = i % 3
  if m == 0 then error("bad entry", 0)
  elseif m == 1 then error({msg = "worse entry", irritants = {i}})
  else return 2 * i end
end
local acc = 0
for i = 0, 299999 do
  local ok, r = pcall(check, i)
  if ok then acc = acc + r
  elseif type(r) == "string" then acc = acc - 1
  else acc = acc - r.irritants[1] end
end
print(string.format("%.0f", acc))

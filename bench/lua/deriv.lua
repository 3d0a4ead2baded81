-- deriv: same work as bench/dlam/deriv.dlam. An expression is a number, the
-- string "x", or a table {op, a, b} / {op, a} with op a string.
local function mk_add(a, b)
  if type(a) == "number" and type(b) == "number" then return a + b end
  if a == 0 then return b end
  if b == 0 then return a end
  return {"+", a, b}
end
local function mk_mul(a, b)
  if type(a) == "number" and type(b) == "number" then return a * b end
  if a == 0 or b == 0 then return 0 end
  if a == 1 then return b end
  if b == 1 then return a end
  return {"*", a, b}
end
local d
d = function(e)
  if type(e) == "number" then return 0 end
  if type(e) == "string" then if e == "x" then return 1 else return 0 end end
  local op = e[1]
  if op == "+" then return mk_add(d(e[2]), d(e[3])) end
  if op == "*" then return mk_add(mk_mul(d(e[2]), e[3]), mk_mul(e[2], d(e[3]))) end
  if op == "sin" then return mk_mul({"cos", e[2]}, d(e[2])) end
  return mk_mul(mk_mul(-1, {"sin", e[2]}), d(e[2]))
end
local function size(e)
  if type(e) ~= "table" then return 1 end
  local n = 1
  for i = 2, #e do n = n + size(e[i]) end
  return n
end
local function expr(k)
  if k == 0 then return "x" end
  return {"+", {"*", {"sin", "x"}, expr(k - 1)}, {"cos", {"*", k, "x"}}}
end
local e12 = expr(12)
local acc = 0
for _ = 1, 400 do acc = acc + size(d(d(e12))) end
print(string.format("%.0f", acc))

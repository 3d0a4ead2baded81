-- MLP 2-16-16-1 loss (as bench/peers/mlp.cpp), plain evaluation (reference).
-- Usage: lua5.4 mlp.lua f N REPS (N ignored); prints the loss with %.17g.
local mode, reps = arg[1], tonumber(arg[3])
assert(mode == "f", "usage: mlp.lua f N REPS")
local NIN, NH, NS = 2, 16, 256
local NW = NH * (NIN + 1) + NH * (NH + 1) + (NH + 1)
local L2 = NH * (NIN + 1)
local L3 = L2 + NH * (NH + 1)

local s = 42.0
local function lcg()
  local m = 2147483647.0
  local p = s * 16807.0
  s = p - m * math.floor(p / m)
  return s / m
end

local w, xs, ts = {}, {}, {}
for i = 1, NW do w[i] = lcg() - 0.5 end
for k = 1, NS do
  local x0 = 2 * lcg() - 1
  local x1 = 2 * lcg() - 1
  xs[k] = {x0, x1}
  ts[k] = math.sin(2 * x0) * math.cos(x1)
end

local tanh = function(z)  -- Lua 5.4 has no math.tanh
  local e = math.exp(-2 * math.abs(z))
  local r = (1 - e) / (1 + e)
  return z < 0 and -r or r
end

local function loss(w)
  local acc = 0.0
  local h1, h2 = {}, {}
  for k = 1, NS do
    local x = xs[k]
    for j = 0, NH - 1 do
      local o = j * (NIN + 1)
      local s = 0.0
      for i = 1, NIN do s = s + w[o + i] * x[i] end
      h1[j + 1] = tanh(s + w[o + NIN + 1])
    end
    for j = 0, NH - 1 do
      local o = L2 + j * (NH + 1)
      local s = 0.0
      for i = 1, NH do s = s + w[o + i] * h1[i] end
      h2[j + 1] = tanh(s + w[o + NH + 1])
    end
    local s = 0.0
    for i = 1, NH do s = s + w[L3 + i] * h2[i] end
    local e = (s + w[L3 + NH + 1]) - ts[k]
    acc = acc + e * e
  end
  return acc / NS
end

local y
for _ = 1, reps do y = loss(w) end
print(string.format("%.17g", y))

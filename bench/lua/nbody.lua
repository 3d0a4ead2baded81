-- nbody: same work as bench/dlam/nbody.dlam, in the same functional style: a body
-- is a table {m, x, y, z, vx, vy, vz}, and each step makes new tables (no
-- mutation of a body), with the operations in the same order (identical doubles).
local dt = 0.001
local function pull(b, o)
  local dx = o[2] - b[2]
  local dy = o[3] - b[3]
  local dz = o[4] - b[4]
  local r2 = dx * dx + dy * dy + dz * dz + 0.01
  local s = o[1] / (r2 * math.sqrt(r2))
  return {s * dx, s * dy, s * dz}
end
local function accel(b, bodies)
  local a = {0, 0, 0}
  for _, o in ipairs(bodies) do
    if o ~= b then
      local p = pull(b, o)
      a = {a[1] + p[1], a[2] + p[2], a[3] + p[3]}
    end
  end
  return a
end
local function move(b, bodies)
  local a = accel(b, bodies)
  local v = {b[5] + dt * a[1], b[6] + dt * a[2], b[7] + dt * a[3]}
  local p = {b[2] + dt * v[1], b[3] + dt * v[2], b[4] + dt * v[3]}
  return {b[1], p[1], p[2], p[3], v[1], v[2], v[3]}
end
local function step(bodies)
  local r = {}
  for i, b in ipairs(bodies) do r[i] = move(b, bodies) end
  return r
end
local bodies = {{10, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 3, 0}, {1, -1, 0, 0, 0, -3, 0},
                {0.5, 0, 2, 0, -2, 0, 0.1}, {0.1, 0, 0, 3, 1.5, 0, 0}}
for _ = 1, 10000 do bodies = step(bodies) end
local sum = 0
for _, b in ipairs(bodies) do sum = sum + (b[2] + b[3] + b[4]) end
print(string.format("%.0f", math.floor(1e9 * sum)))

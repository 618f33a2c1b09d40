-- plan_arena.lua: the arena placer of gen/plan.lua (M.place) over random
-- lifetime sets (issue 10, item 14), and gen/literal.lua's shortest number
-- literals (issue 11).  Run by tests/plan_arena.c in the
-- generator's Lua state.  Checks, for every set:
--   * every offset is >= base and 16-float aligned, the top is aligned and
--     covers every item;
--   * no two items alive at a common op overlap in memory;
--   * the top equals that of the first-fit the placer replaced (every
--     candidate offset tried against every placed item, cubic) run on the
--     items in the placer's order (by start), is no larger than that
--     reference in list order on sets built in start order (as plans are),
--     and is never below the peak of live floats nor above the sum of sizes;
-- and that 200,000 items in a plan-like chain place quickly.

local plan = require("plan")
local ALIGN = 16
local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

-- the old placer, kept here as the reference
local function reference(items, base)
  local placed, top = {}, base
  for _, v in ipairs(items) do
    local candidates = { base }
    for _, u in ipairs(placed) do candidates[#candidates + 1] = align(u.offset + u.floats) end
    table.sort(candidates)
    for _, off in ipairs(candidates) do
      local ok = true
      for _, u in ipairs(placed) do
        if not (v.last < u.first or u.last < v.first) and off < u.offset + u.floats and u.offset < off + v.floats then
          ok = false
          break
        end
      end
      if ok then
        v.offset = off
        break
      end
    end
    placed[#placed + 1] = v
    top = math.max(top, align(v.offset + v.floats))
  end
  return top
end

local function copy(items)
  local out = {}
  for i, v in ipairs(items) do out[i] = { first = v.first, last = v.last, floats = v.floats, id = i } end
  return out
end

local function check(case, items, base, top)
  local peak, sum = base, base
  for _, v in ipairs(items) do sum = sum + align(v.floats) end
  for i, v in ipairs(items) do
    assert(v.offset and v.offset >= base and v.offset % ALIGN == 0, case .. ": bad offset of item " .. i)
    assert(v.offset + v.floats <= top, case .. ": item " .. i .. " beyond the top")
    for j = i + 1, #items do
      local u = items[j]
      if not (v.last < u.first or u.last < v.first) then
        assert(v.offset + v.floats <= u.offset or u.offset + u.floats <= v.offset,
          string.format("%s: items %d [%d..%d] and %d [%d..%d] alive together overlap at %d+%d, %d+%d", case,
            i, v.first, v.last, j, u.first, u.last, v.offset, v.floats, u.offset, u.floats))
      end
    end
  end
  for _, v in ipairs(items) do -- the floats alive at v's start: a lower bound
    local live = base
    for _, u in ipairs(items) do
      if u.first <= v.first and v.first <= u.last then live = live + u.floats end
    end
    peak = math.max(peak, live)
  end
  assert(top % ALIGN == 0 and top >= peak and top <= sum,
    string.format("%s: top %d outside [peak %d, sum %d]", case, top, peak, sum))
end

math.randomseed(20261123)
local cases = 0
for round = 1, 400 do
  local n = math.random(1, 60)
  local span = math.random(1, 3 * n)
  local maxlife = math.random(0, 12)
  local base = ALIGN * math.random(0, 4)
  local items = {}
  for i = 1, n do
    local first = math.random(1, span)
    local floats = math.random(1, 4) == 1 and ALIGN * math.random(1, 8) or math.random(1, 200)
    items[i] = { first = first, last = first + math.random(0, maxlife), floats = floats }
  end
  local case = "round " .. round
  -- any list order: equal to the reference over the items by start
  local a = copy(items)
  local top = plan.place(a, base)
  check(case, a, base, top)
  local by_start = copy(items)
  table.sort(by_start, function(x, y)
    if x.first ~= y.first then return x.first < y.first end
    return x.id < y.id
  end)
  local ref = reference(by_start, base)
  assert(top == ref, string.format("%s: top %d, the reference over the items by start gives %d", case, top, ref))
  for _, v in ipairs(by_start) do
    assert(a[v.id].offset == v.offset, case .. ": item " .. v.id .. " placed elsewhere than by the reference")
  end
  -- built in start order, as a plan's values are: no larger than the old placer as it ran
  local sorted = copy(by_start)
  local top2 = plan.place(sorted, base)
  check(case .. " (sorted)", sorted, base, top2)
  local ref2 = reference(copy(by_start), base)
  assert(top2 <= ref2, string.format("%s: top %d above the old placer's %d", case, top2, ref2))
  cases = cases + 1
end

-- scaling: a chain like a plan's layers (each item read by the next two
-- ops), 200,000 items: the old placer would take ~10^15 steps, this one a
-- few million (ctest's TIMEOUT on this test is the bound)
local big = {}
for i = 1, 200000 do big[i] = { first = i, last = i + 2, floats = 16 * (i % 3 + 1) } end
local top = plan.place(big, 0)
assert(top <= 3 * 48, "chain: top " .. top)
for i = 1, #big - 2 do
  for j = i + 1, i + 2 do
    local v, u = big[i], big[j]
    assert(v.offset + v.floats <= u.offset or u.offset + u.floats <= v.offset, "chain: items alive together overlap")
  end
end
print(string.format("plan_arena: %d random sets and a chain of %d items placed", cases, #big))

-- gen/literal.lua, the generator's number printing (issue 11): the shortest
-- %.Ng that reads back as the same float32 (or double)
local lit = require("literal")
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
assert(lit.shortest(1e-5) == "1e-05", lit.shortest(1e-5))
assert(lit.float(1e-5) == "1e-05f" and lit.float(0.25) == "0.25f" and lit.float(2) == "2.0f", lit.float(2))
assert(lit.float(1 / 3) == "0.33333334f", lit.float(1 / 3)) -- 8 digits, where %.9g says 0.333333343
assert(lit.float(1 / math.sqrt(64)) == "0.125f" and lit.float(math.sqrt(512)) == "22.627417f" and
  lit.float(1 / math.sqrt(512)) == "0.044194173f", lit.float(1 / math.sqrt(512))) -- as numpy's repr of float32
assert(lit.double(1e-5) == "1e-05" and tonumber(lit.double(1e-5)) == 1e-5, lit.double(1e-5))
assert(lit.double(1e-6) == "1e-06" and lit.double(0.1) == "0.1" and lit.double(500000) == "5e+05")
assert(lit.double(1 / 3) == "0.3333333333333333", lit.double(1 / 3))
math.randomseed(11)
for _ = 1, 20000 do
  local x = f32((math.random() - 0.5) * 10 ^ math.random(-30, 30))
  local s = lit.shortest(x)
  assert(f32(tonumber(s)) == x, "float " .. s .. " does not read back as " .. string.format("%.9g", x))
  local n = 1 -- the digits s has: no fewer read back as x
  while string.format("%." .. n .. "g", x) ~= s do n = n + 1 end
  assert(n == 1 or f32(tonumber(string.format("%." .. (n - 1) .. "g", x))) ~= x, "float " .. s .. " is not the shortest")
  local d = (math.random() - 0.5) * 10 ^ math.random(-300, 300)
  assert(tonumber(lit.shortest_double(d)) == d, "double " .. lit.shortest_double(d))
end
print("plan_arena: literal.lua prints 20000 random floats and doubles shortest and exact")

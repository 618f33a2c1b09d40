-- literal.lua: numbers as the generated C prints them.

local M = {}

-- x rounded to float32
local function to_float(x) return (string.unpack("<f", string.pack("<f", x))) end

-- The shortest %.Ng (N = 1..digits) that reads back as x through round
-- (digits always round-trip).
local function shortest(x, digits, round)
  for n = 1, digits do
    local s = string.format("%." .. n .. "g", x)
    if round(tonumber(s)) == x then return s end
  end
  return string.format("%." .. digits .. "g", x)
end

-- s as a C floating constant: a point where it has none ("2" -> "2.0")
local function c_constant(s)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

-- The shortest %.Ng that reads back as the same float32: 1e-05, not
-- 1.0000000000000001e-05 (9 significant digits always round-trip).
function M.shortest(x) return shortest(to_float(x), 9, to_float) end

-- A C float constant: 0.125f, 1e-05f, 2.0f
function M.float(x) return c_constant(M.shortest(x)) .. "f" end

-- The shortest %.Ng (N = 1..17) that reads back as the same double.
function M.shortest_double(x) return shortest(x, 17, function(v) return v end) end

-- A C double constant (norm eps, sinusoid frequencies): 1e-05, the same
-- double as 1.0000000000000001e-05
function M.double(x) return c_constant(M.shortest_double(x)) end

-- numbers grouped like 12,345,678
function M.grouped(n)
  local s = string.format("%.0f", n)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- 8 constants per line, indented
function M.table_lines(values, fmt)
  local lines, row = {}, {}
  for i, v in ipairs(values) do
    row[#row + 1] = fmt(v)
    if #row == 8 or i == #values then
      lines[#lines + 1] = "  " .. table.concat(row, ", ") .. ","
      row = {}
    end
  end
  return table.concat(lines, "\n")
end

return M

-- template.lua: a small template engine for the C text in templates/.
--
-- A template file holds named sections, each starting with a line
--   @@ name
-- and a section's text is C with these additions:
--   ${KEY}                  replaced by vars.KEY (a string or a number);
--                           a missing key is an error naming file, line, key
--   @if KEY / @else / @end  kept when vars.KEY is truthy (lines starting @)
-- Rendered text starts with a #line directive pointing into templates/, and
-- gets another wherever it jumps ahead in the template, so a compiler error
-- names the template line.

local host = require("ff_host")

local M = {}

local cache = {}

local function sections_of(file)
  if cache[file] then return cache[file] end
  local text = host.read_template(file) -- the embedded file text
  local sections, current = {}, nil
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local name = line:match("^@@%s*([%w_%.]+)%s*$")
    if name then
      current = { name = name, first = n + 1, lines = {} }
      sections[name] = current
    elseif current then
      current.lines[#current.lines + 1] = line
    end
  end
  cache[file] = sections
  return sections
end

local function fail(file, line, fmt, ...)
  error(string.format("%s:%d: " .. fmt, file, line, ...), 0)
end

local function substitute(file, lineno, line, vars)
  return (line:gsub("%${([%w_]+)}", function(key)
    local v = vars[key]
    if v == nil then fail(file, lineno, "no value for placeholder '%s'", key) end
    if type(v) == "boolean" then v = v and "1" or "0" end
    return tostring(v)
  end))
end

-- Returns a list of {text=..., lineno=...} for lines first..last of a block.
local function expand(file, lines, first, i, stop_at_end, vars, out)
  while i <= #lines do
    local line = lines[i]
    local lineno = first + i - 1
    local directive, rest = line:match("^%s*@(%a+)%s*(.-)%s*$")
    if directive == "end" or directive == "else" then
      if not stop_at_end then fail(file, lineno, "@%s without a block", directive) end
      return i, directive
    elseif directive == "if" then
      local key = rest
      local keep = vars[key]
      if keep == nil then fail(file, lineno, "no value for condition '%s'", key) end
      local yes, no = {}, {}
      local j, how = expand(file, lines, first, i + 1, true, vars, yes)
      if how == "else" then j, how = expand(file, lines, first, j + 1, true, vars, no) end
      if how ~= "end" then fail(file, lineno, "@if %s without @end", key) end
      for _, l in ipairs(keep and yes or no) do out[#out + 1] = l end
      i = j + 1
    elseif directive then
      fail(file, lineno, "unknown directive @%s", directive)
    else
      out[#out + 1] = { text = substitute(file, lineno, line, vars), lineno = lineno }
      i = i + 1
    end
  end
  if stop_at_end then fail(file, first + #lines - 1, "block without @end") end
  return i, nil
end

-- Renders section `name` of templates/<file> with vars; returns C text.
-- opts.lines = false leaves out the #line directives (for short snippets).
function M.render(file, name, vars, opts)
  local path = "templates/" .. file .. ".in"
  local s = sections_of(path)[name]
  if not s then error(string.format("%s: no section '@@ %s'", path, name), 0) end
  local out = {}
  expand(path, s.lines, s.first, 1, false, vars, out)
  if opts and opts.lines == false then
    local text = {}
    for _, l in ipairs(out) do text[#text + 1] = l.text end
    return table.concat(text, "\n") .. "\n"
  end
  -- #line when the text jumps ahead in the template by 3 lines or more
  -- (skipped @if branches, multi-line values): a compiler error lands within
  -- a line or two of its template line, and the code stays readable
  local text = { string.format('#line %d "%s"', s.first, path) }
  local expected, furthest = s.first, s.first - 1
  for _, l in ipairs(out) do
    if l.lineno and l.lineno > furthest and math.abs(l.lineno - expected) >= 3 then
      text[#text + 1] = string.format('#line %d "%s"', l.lineno, path)
      expected = l.lineno
    end
    text[#text + 1] = l.text
    if l.lineno and l.lineno > furthest then furthest = l.lineno end
    local _, breaks = l.text:gsub("\n", "") -- a multi-line value shifts what follows
    expected = expected + 1 + breaks
  end
  return table.concat(text, "\n") .. "\n"
end

return M

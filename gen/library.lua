-- library.lua: the kernel library (kernels/gemm_ISA.c and the shared files
-- it includes) as generated code takes it: whole for the host's build, the
-- cc engine's library and the per-kernel tests; for a model, only the parts
-- of the kernels it calls.
--
-- Marker lines divide a kernel file into parts:
--   /* @part NAME */   or   /* @part NAME: NEEDS ... */
-- A part runs from its marker to the next one; one name may mark several
-- stretches, and NEEDS names the parts it calls.  The text of an #include'd
-- file before its first marker belongs to the part of the #include line;
-- the text of gemm_ISA.c before its first marker to every model.  A model
-- calling kernel K (kernels/prototypes.h: ff_K_ISA) takes part K (quant for
-- both quantized linears, which quant.c defines together) and what it needs.

local host = require("ff_host")

local M = {}

local PART = { linear_ld = "linear", linear_bf16 = "quant", linear_q8 = "quant", linear_i8 = "int8", quantize_rows = "int8",
  linear_dpbf16 = "bf16c", bf16_rows = "bf16c", transpose = "pack", attention_backward = "attention_train",
  adamw = "optimizer", sum_squares = "optimizer" }

local function lines_of(text)
  return (text:gsub("\n+$", "") .. "\n"):gmatch("([^\n]*)\n")
end

-- The lines of path with each #include "X.c" (or "../runtime/X.h") replaced by that file's, as
-- { text, file, line, part } into out; needs[part] = the parts it calls.  defs: the flags the
-- ISA's file #defines (FF_PLAIN_AVX): an #ifdef of one keeps only the branch that applies, so
-- that a model's kernels read as its ISA's alone (such blocks hold no other #if).
local function read(path, part, out, needs, defs)
  local n, keep = 0, nil -- keep: inside an #ifdef of a flag, whether this branch is the ISA's
  for line in lines_of(host.read_template(path)) do
    n = n + 1
    local name, deps = line:match("^/%* @part ([%w_]+):?([%w_ ]-) %*/$")
    local include = line:match('^#include "([%w_%./]+%.[ch])"$')
    local flag = line:match("^#define (FF_PLAIN_AVX) ")
    local ifdef = line:match("^#ifdef (FF_PLAIN_AVX)$")
    if flag then defs[flag] = true end
    if name then
      part = name
      needs[name] = needs[name] or {}
      for d in deps:gmatch("[%w_]+") do table.insert(needs[name], d) end
    end
    if ifdef then keep = defs[ifdef] == true
    elseif keep ~= nil and line:match("^#else") then keep = not keep
    elseif keep ~= nil and line:match("^#endif") then keep = nil
    elseif keep == false then -- (the other ISAs' branch)
    elseif include then -- relative to kernels/ ("../runtime/ff_dropout.h": runtime/ff_dropout.h)
      read(("kernels/" .. include):gsub("[%w_]+/%.%./", ""), part, out, needs, defs)
    else
      out[#out + 1] = { text = line, file = path, line = n, part = part }
    end
  end
end

local cache = {}

local function parts_of(isa)
  if not cache[isa] then
    local out, needs = {}, {}
    read("kernels/gemm_" .. isa .. ".c", nil, out, needs, {})
    cache[isa] = { lines = out, needs = needs }
  end
  return cache[isa]
end

-- The parts taken for calls (kernel names: "linear", "sdpa", ...), with what
-- they need: a set.
local function closure(needs, calls)
  local want, todo = {}, {}
  for _, k in ipairs(calls) do todo[#todo + 1] = PART[k] or k end
  while #todo > 0 do
    local p = table.remove(todo)
    if not want[p] then
      assert(needs[p], "kernels: no part '" .. p .. "' (a /* @part */ marker)")
      want[p] = true
      for _, d in ipairs(needs[p]) do todo[#todo + 1] = d end
    end
  end
  return want
end

-- The library text of isa for calls (nil: all of it), with a #line
-- directive wherever it starts or jumps (a part left out, another file),
-- so that compiler messages name the kernel's line; lines == false: none.
function M.text(isa, calls, lines)
  local lib = parts_of(isa)
  local want = calls and closure(lib.needs, calls)
  local text, file, next_line = {}, nil, nil
  for _, l in ipairs(lib.lines) do
    if not l.part or not want or want[l.part] then
      if lines ~= false and (l.file ~= file or l.line ~= next_line) then
        text[#text + 1] = string.format('#line %d "%s"', l.line, l.file)
      end
      text[#text + 1] = l.text
      file, next_line = l.file, l.line + 1
    end
  end
  return table.concat(text, "\n") .. "\n"
end

-- The declarations of the kernels called (nil: all), from
-- kernels/prototypes.h, the one text of the signatures, with FF_ISA(kind)
-- spelt out; a comment line goes with the declaration after it.
function M.declarations(isa, calls)
  local text = host.read_template("kernels/prototypes.h"):match("\n(void .*;)")
  assert(text, "kernels/prototypes.h: no declarations")
  local decls, pending = {}, {}
  for line in lines_of(text) do
    local kind = line:match("^%w+ FF_ISA%(([%w_]+)%)") -- (void, or double: ff_sum_squares_ISA)
    if kind then
      pending[#pending + 1] = line
      decls[#decls + 1] = { kind = kind, lines = pending }
      decls[kind], pending = decls[#decls], {}
    elseif line:match("^/%*") or #decls == 0 then
      pending[#pending + 1] = line
    else
      table.insert(decls[#decls].lines, line)
    end
  end
  local wanted = {}
  for _, k in ipairs(calls or {}) do
    assert(decls[k], "kernels/prototypes.h: no kernel '" .. k .. "'")
    wanted[k] = true
  end
  local out = {}
  for _, d in ipairs(decls) do
    if not calls or wanted[d.kind] then
      for _, line in ipairs(d.lines) do out[#out + 1] = (line:gsub("FF_ISA%(([%w_]+)%)", "ff_%1_" .. isa)) end
    end
  end
  return table.concat(out, "\n")
end

-- The C names of the kernels called, for a comment: lines of
-- "ff_linear_generic, ff_sdpa_generic, ..." after prefix, within 100 columns.
function M.names(isa, calls, prefix)
  local lines, line = {}, prefix
  for i, k in ipairs(calls) do
    local name = "ff_" .. k .. "_" .. isa .. (i < #calls and "," or "")
    if line ~= prefix and #line + 1 + #name > 100 then lines[#lines + 1], line = line, prefix end
    line = line .. (line == prefix and "" or " ") .. name
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

-- The kernels as generated code sees them: under FIXFORMER_JIT (the host's
-- builds) or FF_EXTERN_KERNELS (the cc engine's library) their
-- declarations, else body (their text, or an #include of it) with
-- FF_KERNEL static.
function M.block(isa, calls, body)
  return table.concat({
    "#if defined(FIXFORMER_JIT) || defined(FF_EXTERN_KERNELS) /* built apart: the fixformer host's, or a library */",
    "#define FF_ACC 1  /* C += the product instead of C = */",
    "#define FF_RELU 2 /* then C = max(0, C) */",
    "#define FF_FETCH 4 /* (ff_linear) y is cold: each next tile's rows of y into L2 ahead */",
    M.declarations(isa, calls),
    "#else",
    "#if defined(__GNUC__) || defined(__TINYC__) /* a model calls some of them */",
    "#define FF_KERNEL static inline __attribute__((unused))",
    "#else",
    "#define FF_KERNEL static inline",
    "#endif",
    (body:gsub("\n+$", "")),
    "#endif",
  }, "\n") .. "\n"
end

return M

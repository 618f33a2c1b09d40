-- validate.lua: a loaded description -> the resolved config.
--
-- The keys (kind, default, bounds, enum values, the conditions they need, the
-- architectures that take them) are include/ff_schema.h's rows, which the
-- host hands over as require("ff_schema"); this file checks values against
-- them and holds the rules between keys.  Every error names the file and the
-- key, e.g.
--   models/x.lua: heads: 5 does not divide d_model 64
-- and is raised with error(msg, 0) so no Lua position is prepended.

local schema = require("ff_schema")

local M = {}

-- the rows in their order: { key, kind, values, required, default | default_of
-- and times, min, max | maxlen, needs = { [condition] = true }, arches }
M.schema = schema.keys

local by_key = {}
for _, s in ipairs(M.schema) do by_key[s.key] = s end

-- `fixformer train`'s defaults for this model, a block of their own (docs/training.md): train = {...},
-- keyed by its flags' names.  Not a key of ff_config: the trainer reads it (host/host.c ff_lua_train_block).
-- The keys of a train block and their kinds; the C side (train/options.c) reads
-- the values as the flags' text and checks their ranges.
M.train_keys = {
  steps = "int", batch = "int", micro_batch = "int", warmup = "int", decay_steps = "int", seed = "int",
  threads = "int", seq = "int", holdout = "int", eval_every = "int", eval_exact = "int", save_every = "int",
  log_every = "int", lr = "number", eps = "number", weight_decay = "number", min_lr = "number", clip = "number",
  label_smoothing = "number", dropout = "number", betas = "pair", no_decay = "names", schedule = "string",
  engine = "string", format = "string", init = "string", recompute = "boolean",
}

local function fail(path, key, fmt, ...)
  error(string.format("%s: %s: " .. fmt, path, key, ...), 0)
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

-- C identifiers that are not keywords of C99 (the name prefixes emitted code).
local C_KEYWORDS = {}
for w in ([[auto break case char const continue default do double else enum extern
  float for goto if inline int long register restrict return short signed sizeof
  static struct switch typedef union unsigned void volatile while _Bool _Complex
  _Imaginary]]):gmatch("%S+") do C_KEYWORDS[w] = true end

local function check_value(path, s, v)
  local k = s.key
  if s.kind == "int" then
    if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v) and v == v) then
      fail(path, k, "expected an integer, got %s", type(v) == "number" and show(v) or type(v))
    end
    v = math.tointeger(v)
    if v == nil then fail(path, k, "expected an integer, got a number out of range") end
    if s.min and v < s.min then
      fail(path, k, "must be %s, got %d", s.min == 1 and "positive" or ">= " .. s.min, v)
    end
    if s.max and v > s.max then fail(path, k, "%d is above the limit %d", v, s.max) end
  elseif s.kind == "number" then -- the engines keep it as a float32
    if type(v) ~= "number" then fail(path, k, "expected a number, got %s", type(v)) end
    if v ~= v then fail(path, k, "expected a number, got NaN") end
    if s.min and v <= s.min then fail(path, k, "must be > %g, got %s", s.min, v) end
    if s.max and v > s.max then fail(path, k, "%s is above the limit %g", v, s.max) end
    if v ~= 0 and string.unpack("<f", string.pack("<f", v)) == 0 then
      fail(path, k, "%s is 0 as a float32, which the engines compute in", v)
    end
  elseif s.kind == "boolean" then
    if type(v) ~= "boolean" then fail(path, k, "expected true or false, got %s", type(v)) end
  elseif s.kind == "string" or s.kind == "identifier" or s.kind == "path" then
    if type(v) ~= "string" then fail(path, k, "expected a string, got %s", type(v)) end
    if s.kind == "identifier" then
      if not v:match("^[A-Za-z_][A-Za-z0-9_]*$") or #v > s.maxlen or C_KEYWORDS[v] then
        fail(path, k, "%s is not a C identifier of at most %d characters", show(v), s.maxlen)
      end
    elseif #v > s.maxlen or v:find("[\0-\31\127\"\\]") or v:find("/*", 1, true) or v:find("*/", 1, true) then
      fail(path, k, "%s: at most %d printable characters, no quotes, backslashes, /* or */", show(v), s.maxlen)
    elseif s.kind == "path" and v == "" then
      fail(path, k, "an empty file name")
    end
  elseif s.kind == "enum" then
    for _, allowed in ipairs(s.values) do
      if v == allowed then return v end
    end
    fail(path, k, "%s is not one of %s", show(v), table.concat(s.values, ", "))
  end
  return v
end

-- train = {...}: known keys, each of its kind; a copy.
function M.check_train(path, k, v)
  if type(v) ~= "table" then fail(path, k, "expected a table of training options, got %s", type(v)) end
  local out = {}
  for name, x in pairs(v) do
    local kind = type(name) == "string" and M.train_keys[name]
    if not kind then fail(path, k, "unknown training option %s", show(name)) end
    local key = k .. "." .. name
    if kind == "int" then
      if math.type(x) ~= "integer" and not (type(x) == "number" and x == math.floor(x) and math.tointeger(x)) then
        fail(path, key, "expected an integer, got %s", type(x) == "number" and show(x) or type(x))
      end
      x = math.tointeger(x)
    elseif kind == "number" then
      if type(x) ~= "number" or x ~= x or x == math.huge or x == -math.huge then
        fail(path, key, "expected a finite number, got %s", type(x) == "number" and show(x) or type(x))
      end
    elseif kind == "pair" then
      if type(x) ~= "table" or #x ~= 2 or type(x[1]) ~= "number" or type(x[2]) ~= "number" then
        fail(path, key, "expected two numbers, e.g. { 0.9, 0.98 }")
      end
      x = { x[1], x[2] }
    elseif kind == "boolean" then
      if type(x) ~= "boolean" then fail(path, key, "expected true or false, got %s", type(x)) end
    elseif kind == "names" then
      if type(x) == "table" then
        local names = {}
        for i, n in ipairs(x) do
          if type(n) ~= "string" then fail(path, key, "expected names, e.g. { \"bias\", \"norm\" }") end
          names[i] = n
        end
        x = names
      elseif type(x) ~= "string" then
        fail(path, key, "expected a list of names or \"none\", got %s", type(x))
      end
    elseif type(x) ~= "string" then
      fail(path, key, "expected a string, got %s", type(x))
    end
    out[name] = x
  end
  return out
end

-- Whether condition cond (a row of schema.conditions) holds for config c.
local function holds(cond, c)
  local v = c[cond.key]
  if cond.test == "set" then return v ~= nil and v ~= 0 end
  if cond.test == "true" then return v == true end
  if cond.test == "false" then return v == false end
  return v == cond.value
end

-- Keys that only mean something with others: a key given while a condition
-- it needs does not hold, "KEY: given but <why>", conditions in their order.
local function check_needs(c, desc, path)
  for _, cond in ipairs(schema.conditions) do
    if not holds(cond, c) then
      for _, s in ipairs(M.schema) do
        if s.needs[cond.name] and desc[s.key] ~= nil then
          fail(path, s.key, "given but %s", cond.why or string.format("%s is %s", cond.key, show(c[cond.key])))
        end
      end
    end
  end
end

-- Returns the resolved config: every key of the schema present (vocab may be
-- nil), layers split into encoder_layers / decoder_layers by architecture.
function M.validate(desc, path)
  if type(desc) ~= "table" then
    error(string.format("%s: the description must return a table, got %s", path, type(desc)), 0)
  end
  for k in pairs(desc) do
    if type(k) ~= "string" then error(string.format("%s: key %s is not a name", path, show(k)), 0) end
    if not by_key[k] and k ~= "train" then error(string.format("%s: unknown key '%s'", path, k), 0) end
  end
  local c = {}
  for _, s in ipairs(M.schema) do
    local v = desc[s.key]
    if v ~= nil then c[s.key] = check_value(path, s, v)
    elseif s.required then fail(path, s.key, "required") end
  end
  if desc.train ~= nil then c.train = M.check_train(path, "train", desc.train) end
  for _, s in ipairs(M.schema) do -- defaults in the rows' order (a derived one: times the resolved key)
    if c[s.key] == nil and (c.arch == nil or s.arches[c.arch]) then -- (arch itself comes second)
      local v = s.default
      if s.default_of and c[s.default_of] ~= nil then
        v = c[s.default_of]
        if s.times ~= 1 then v = s.times * v end
      end
      if v ~= nil then c[s.key] = check_value(path, s, v) end
    end
  end

  if c.d_model % c.heads ~= 0 then
    fail(path, "heads", "%d does not divide d_model %d", c.heads, c.d_model)
  end
  if c.kv_heads > c.heads then
    fail(path, "kv_heads", "%d is more than heads %d", c.kv_heads, c.heads)
  elseif c.heads % c.kv_heads ~= 0 then
    fail(path, "kv_heads", "%d does not divide heads %d", c.kv_heads, c.heads)
  end
  if c.positional == "rope" and (c.d_model // c.heads) % 2 ~= 0 then
    fail(path, "positional", "rope needs an even head width, d_model/heads = %d", c.d_model // c.heads)
  end
  if c.arch == "encoder-decoder" then -- encoder_layers, decoder_layers: given, or layers (their default)
    if not c.encoder_layers or not c.decoder_layers then
      fail(path, "layers", "required (or both encoder_layers and decoder_layers)")
    end
  else
    if desc.encoder_layers or desc.decoder_layers then
      fail(path, desc.encoder_layers and "encoder_layers" or "decoder_layers",
        "only for arch \"encoder-decoder\"; use layers")
    end
    if not c.layers then fail(path, "layers", "required") end
    if c.arch == "encoder" then c.encoder_layers, c.decoder_layers = c.layers, 0
    else c.encoder_layers, c.decoder_layers = 0, c.layers end
  end
  c.layers = nil
  check_needs(c, desc, path)
  return c
end

return M

-- validate.lua: a loaded description -> the resolved config.
--
-- The schema below is the one place the description keys are declared: their
-- kind, default and bounds.  Every error names the file and the key, e.g.
--   models/x.lua: heads: 5 does not divide d_model 64
-- and is raised with error(msg, 0) so no Lua position is prepended.

local M = {}

local BIG = 1 << 24 -- upper bound for any size: keeps every product below 2^53

-- kind: "int" | "number" | "boolean" | "string" | "identifier" | "enum"
-- default: a value or function(config) -> value, applied after the given keys
M.schema = {
  { key = "name", kind = "identifier", required = true },
  { key = "arch", kind = "enum", values = { "encoder", "decoder-only", "encoder-decoder" }, default = "encoder" },
  { key = "d_model", kind = "int", min = 1, max = 65536, required = true },
  { key = "heads", kind = "int", min = 1, max = 65536, required = true },
  { key = "d_ff", kind = "int", min = 1, max = BIG, default = function(c) return 4 * c.d_model end },
  { key = "layers", kind = "int", min = 1, max = 4096 },
  { key = "encoder_layers", kind = "int", min = 1, max = 4096 },
  { key = "decoder_layers", kind = "int", min = 1, max = 4096 },
  { key = "norm", kind = "enum", values = { "post", "pre" }, default = "post" },
  { key = "norm_kind", kind = "enum", values = { "layernorm", "rmsnorm" }, default = "layernorm" },
  { key = "final_norm", kind = "boolean", default = false },
  { key = "eps", kind = "number", min = 0, max = 1, default = 1e-5 },
  { key = "activation", kind = "enum", values = { "relu", "gelu", "gelu_tanh", "swiglu" }, default = "relu" },
  { key = "bias", kind = "boolean", default = true },
  { key = "vocab", kind = "int", min = 1, max = BIG },
  { key = "positional", kind = "enum", values = { "none", "sinusoidal", "learned", "rope" }, default = "none" },
  { key = "rope_theta", kind = "number", min = 1, max = 1e12, default = 10000 },
  -- grouped-query attention: K and V have kv_heads heads, query head h reads kv head h / (heads / kv_heads)
  { key = "kv_heads", kind = "int", min = 1, max = 65536, default = function(c) return c.heads end },
  -- RoPE pairs (x[i], x[i + d_k/2]) (HF) or (x[2i], x[2i+1]) (Meta, llama2.c)
  { key = "rope_pairing", kind = "enum", values = { "rotate_half", "interleaved" }, default = "rotate_half" },
  { key = "scale_embeddings", kind = "boolean", default = true },
  { key = "tie_embeddings", kind = "boolean", default = true },
  { key = "max_seq", kind = "int", min = 1, max = 1 << 20, default = 512 },
  { key = "prefix", kind = "string", maxlen = 128, default = "" },
  { key = "embed_weight", kind = "string", maxlen = 128, default = "embed.weight" },
  { key = "pos_embed_weight", kind = "string", maxlen = 128, default = "pos_embed.weight" },
  { key = "lm_head_weight", kind = "string", maxlen = 128, default = "lm_head.weight" },
  { key = "head_bias", kind = "boolean", default = false },
  { key = "lm_head_bias", kind = "string", maxlen = 128, default = "lm_head.bias" },
  { key = "lm_head", kind = "boolean", default = true },
  { key = "token_types", kind = "int", min = 0, max = BIG, default = 0 },
  { key = "token_type_embed_weight", kind = "string", maxlen = 128, default = "token_type_embed.weight" },
  { key = "embed_norm", kind = "boolean", default = false },
  -- how linear matrices and the token embeddings are stored: float32, bfloat16, int8 per group of 32 inputs
  { key = "dtype", kind = "enum", values = { "f32", "bf16", "int8" }, default = "f32" },
  -- files that go with the description, relative to its folder
  { key = "weights", kind = "string", maxlen = 256 },
  { key = "vocabulary", kind = "string", maxlen = 256 },
  -- `fixformer train`'s defaults for this model (docs/training.md), keyed by its flags' names
  { key = "train", kind = "table" },
}

-- The keys of a train block and their kinds; the C side (train/options.c) reads
-- the values as the flags' text and checks their ranges.
M.train_keys = {
  steps = "int", batch = "int", micro_batch = "int", warmup = "int", decay_steps = "int", seed = "int",
  threads = "int", seq = "int", holdout = "int", eval_every = "int", eval_exact = "int", save_every = "int",
  log_every = "int", lr = "number", eps = "number", weight_decay = "number", min_lr = "number", clip = "number",
  label_smoothing = "number", dropout = "number", betas = "pair", no_decay = "names", schedule = "string",
  engine = "string", format = "string",
}

local by_key = {}
for _, s in ipairs(M.schema) do by_key[s.key] = s end

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
    if s.min and v <= s.min then fail(path, k, "must be > %s, got %s", s.min, v) end
    if s.max and v > s.max then fail(path, k, "%s is above the limit %s", v, s.max) end
    if v ~= 0 and string.unpack("<f", string.pack("<f", v)) == 0 then
      fail(path, k, "%s is 0 as a float32, which the engines compute in", v)
    end
  elseif s.kind == "boolean" then
    if type(v) ~= "boolean" then fail(path, k, "expected true or false, got %s", type(v)) end
  elseif s.kind == "string" or s.kind == "identifier" then
    if type(v) ~= "string" then fail(path, k, "expected a string, got %s", type(v)) end
    if s.kind == "identifier" then
      if not v:match("^[A-Za-z_][A-Za-z0-9_]*$") or #v > 48 or C_KEYWORDS[v] then
        fail(path, k, "%s is not a C identifier of at most 48 characters", show(v))
      end
    elseif #v > s.maxlen or v:find("[\0-\31\127\"\\]") or v:find("/*", 1, true) or v:find("*/", 1, true) then
      fail(path, k, "%s: at most %d printable characters, no quotes, backslashes, /* or */", show(v), s.maxlen)
    end
  elseif s.kind == "table" then
    return M.check_train(path, k, v)
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

-- The output head and embedding keys that only mean something with others.
function M.check_head(c, desc, path)
  if not c.lm_head then
    for _, k in ipairs({ "lm_head_weight", "head_bias", "lm_head_bias" }) do
      if desc[k] ~= nil then fail(path, k, "given but lm_head is false (no output head)") end
    end
  end
  if not c.head_bias and desc.lm_head_bias ~= nil then fail(path, "lm_head_bias", "given but head_bias is false") end
  if c.token_types == 0 and desc.token_type_embed_weight ~= nil then
    fail(path, "token_type_embed_weight", "given but token_types is 0")
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
    if not by_key[k] then error(string.format("%s: unknown key '%s'", path, k), 0) end
  end
  local c = {}
  for _, s in ipairs(M.schema) do
    local v = desc[s.key]
    if v ~= nil then c[s.key] = check_value(path, s, v)
    elseif s.required then fail(path, s.key, "required") end
  end
  for _, s in ipairs(M.schema) do
    if c[s.key] == nil and s.default ~= nil then
      local v = s.default
      if type(v) == "function" then v = v(c) end
      c[s.key] = check_value(path, s, v)
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
  if c.arch == "encoder-decoder" then
    c.encoder_layers = c.encoder_layers or c.layers
    c.decoder_layers = c.decoder_layers or c.layers
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
  if c.vocab == nil then
    for _, k in ipairs({ "embed_weight", "lm_head_weight", "lm_head", "head_bias", "lm_head_bias", "token_types",
      "token_type_embed_weight" }) do
      if desc[k] ~= nil then fail(path, k, "given but the model has no vocab") end
    end
  end
  M.check_head(c, desc, path)
  if c.positional ~= "learned" and desc.pos_embed_weight ~= nil then
    fail(path, "pos_embed_weight", "given but positional is %s", show(c.positional))
  end
  for _, k in ipairs({ "weights", "vocabulary" }) do
    if c[k] == "" then fail(path, k, "an empty file name") end
  end
  if c.vocabulary and not c.vocab then fail(path, "vocabulary", "given but the model has no vocab") end
  for _, k in ipairs({ "rope_theta", "rope_pairing" }) do
    if c.positional ~= "rope" and desc[k] ~= nil then fail(path, k, "given but positional is %s", show(c.positional)) end
  end
  return c
end

return M

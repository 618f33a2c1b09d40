-- plan.lua: a resolved config -> the program the emitter writes out.
--
--   stages   ordered functions (encode, cross_kv, decode, head), each an
--            ordered list of ops (kinds from ops.lua) with constant shapes;
--   values   the activations: each op output is a value of max_seq rows;
--            streams and caches live for the whole forward, the rest only
--            from the op that writes them to the last op that reads them, so
--            values whose lifetimes do not overlap share arena space;
--   weights  the packed layout: name -> offset, shape, packing.  Every
--            matrix a linear op multiplies by (nn.Linear weights, in_proj, the
--            output head) is packed in panels of NR columns of W^T for the
--            ISA's matrix kernel (kernels/gemm_*.c): panel p holds
--            W^T[:, NR p .. NR p + NR-1] as `in` rows of NR floats, zero-padded.
--            The cross-attention in_proj is two matrices, q and k|v (k and v
--            have kv_heads heads of d_k: kvd = kv_heads d_k floats each).  The rest
--            is stored as in PyTorch.
--            The weight type (dtype) stores the matrices and the token
--            embedding table as bf16 or int8 (runtime/quant.c; the packed
--            layouts are in kernels/prototypes.h): their size in floats is
--            then the 4-byte words they take.
-- Offsets are in floats and aligned to 16 floats (64 bytes).

local lit = require("literal")
local ops = require("ops")

local M = {}

local ALIGN = 16

local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

-- "encoder", 3, "self_attn.in_proj_weight" -> "W_ENC_L03_SELF_ATTN_IN_PROJ_WEIGHT" (prefix: "W")
local function weight_macro(two_stacks, spec, prefix)
  local parts = { prefix or "W" }
  if spec.stack ~= "none" and two_stacks then parts[#parts + 1] = spec.stack == "encoder" and "ENC" or "DEC" end
  if spec.layer >= 0 then parts[#parts + 1] = string.format("L%02d", spec.layer) end
  parts[#parts + 1] = spec.role:upper():gsub("[^%w]", "_")
  return table.concat(parts, "_")
end

-- The column panel width of each ISA's matrix kernel (kernels/).
-- kernels/isas.h is the one table; the host hands it over as ff_host.isas.
M.NR = setmetatable({}, { __index = function(_, isa)
  local i = require("ff_host").isas[isa]
  return i and i.nr
end })

-- Whether the model ends in an output head (lm_head = false: hidden states out).
local function has_head(c) return c.vocab ~= nil and c.lm_head end

-- Whether the embedding matrix is the output head too.
local function tied_head(c) return has_head(c) and c.tie_embeddings end

-- First-fit over lifetimes: items { first, last, floats } (ops first..last
-- inclusive) get an offset >= base, aligned, such that two items alive at a
-- common op never overlap; returns the aligned top.  Items are taken by
-- start (ties in list order), each at the lowest offset free of the items
-- still alive then, which are kept sorted by offset; an item whose lifetime
-- has ended leaves that list for good.  Linear in the items times the number
-- alive at once (a handful per layer), where comparing with every placed
-- item made code generation cubic in the layers.
function M.place(items, base)
  local starts, order = {}, {} -- a bucket per start, in list order
  for _, v in ipairs(items) do
    local b = starts[v.first]
    if not b then
      b = {}
      starts[v.first] = b
      order[#order + 1] = v.first
    end
    b[#b + 1] = v
  end
  table.sort(order) -- numbers: no Lua comparator
  local live, top = {}, base -- live: placed items not yet ended, by offset
  for _, first in ipairs(order) do
    for _, v in ipairs(starts[first]) do
      local n = 0
      for k = 1, #live do -- drop items that ended before v starts
        local u = live[k]
        live[k] = nil
        if u.last >= first then
          n = n + 1
          live[n] = u
        end
      end
      local off, at = base, n + 1 -- the lowest gap that holds v, and v's place in live
      for k = 1, n do
        local u = live[k]
        if off + v.floats <= u.offset then
          at = k
          break
        end
        off = math.max(off, align(u.offset + u.floats))
      end
      v.offset = off
      table.insert(live, at, v)
      top = math.max(top, align(off + v.floats))
    end
  end
  return top
end

-- ---- weight layout ----------------------------------------------------------

-- The 4-byte words of `rows` rows of `cols` weights stored in type t (ops.lua)
M.weight_words = ops.weight_words
local weight_words = M.weight_words

-- The compute types other than f32: the weight type of the blocks' matrices,
-- the op that multiplies by them (ops.lua), and the floats a row of IN inputs
-- takes in the op's buffer (kernels/int8.c, kernels/bf16.c)
local LOWP = {
  int8 = { type = "i8", kind = "linear_i8", words = function(IN) return 1 + (IN + 3) // 4 end,
    doc = "in int8: a scale each, then their bytes" },
  bf16 = { type = "b16", kind = "linear_b16", words = function(IN) return (IN + 1) // 2 end, doc = "in bfloat16" },
}

-- P.weights in the runtime's order, each aligned; rows row0.. of the tensor.
-- Sets P.weights, P.weight_by (stack/layer/role -> weight), P.weight_floats.
local function weight_layout(P, specs)
  local c, d, NR, kvd = P.config, P.d, P.nr, P.kvd
  P.weights, P.weight_by = {}, {}
  local at, folded = 0, {} -- stack/layer/role -> the scale folded into it
  for _, s in ipairs(specs) do
    if s.fold_weight then
      folded[s.stack .. "/" .. s.layer .. "/" .. s.fold_weight] = s.name
      folded[s.stack .. "/" .. s.layer .. "/" .. s.fold_bias] = s.name
    end
  end
  local function add_weight(s, role, row0, rows, suffix)
    local w = {
      name = s.name, role = role, stack = s.stack, layer = s.layer, row0 = row0, rows = rows, cols = s.cols,
      offset = at, macro = weight_macro(P.two_stacks, s) .. (suffix or ""),
      folded = folded[s.stack .. "/" .. s.layer .. "/" .. s.role],
    }
    w.packing = s.matrix and "panels" or "rows" -- a linear op's matrix (include/ff_schema.h; the tied embedding)
    w.type = s.quantized and P.dtype or "f32"
    if P.compute ~= "f32" and s.matrix and s.layer >= 0 then w.type = LOWP[P.compute].type end -- (runtime/quant.c)
    w.floats = weight_words(w.type, w.packing == "panels" and (rows + NR - 1) // NR * NR or rows, math.max(s.cols, 1))
    at = align(at + w.floats)
    P.weights[#P.weights + 1] = w
    P.weight_by[s.stack .. "/" .. s.layer .. "/" .. role] = w
  end
  for _, s in ipairs(specs) do
    if s.fold_weight then -- a scale folded into its linear's weights when they are packed (host: runtime/fold.c)
    elseif s.role == "multihead_attn.in_proj_weight" then -- q from the decoder, k|v from the memory
      add_weight(s, s.role .. ":q", 0, d, "_Q")
      add_weight(s, s.role .. ":kv", d, 2 * kvd, "_KV")
    else
      add_weight(s, s.role, 0, s.rows)
    end
  end
  -- Tables of the positions, which no tensor holds: the packer computes them
  -- (host/codegen.c) from the runtime's own frequencies, so the model code
  -- needs no sin, cos or double; two levels of 2 sqrt(max_seq) rows, not a
  -- row per position (ops.position_blocks).  Sinusoidal: NH rows of the
  -- sin, cos pairs of hi 2^bits w_i, then 2^bits rows of lo w_i.  RoPE: a
  -- row of the frequencies f_i, NH rows of the d_k/2 cosines then sines of
  -- hi 2^bits f_i, 2^bits rows of lo f_i.
  if c.positional == "sinusoidal" or c.positional == "rope" then
    local rope = c.positional == "rope"
    local bits, B, NH, W = ops.position_blocks(c.max_seq, rope and P.dk or d)
    local rows = (rope and 1 or 0) + NH + B
    local s = { stack = "none", layer = -1, role = c.positional, rows = rows, cols = W,
      name = rope and string.format("(rotary frequencies, cos | sin, theta %s)", lit.double(c.rope_theta))
        or "(sinusoidal positions, sin, cos pairs)" }
    add_weight(s, s.role, 0, rows)
    local w = P.weights[#P.weights]
    w.derived, w.block_bits, w.dim = c.positional, bits, rope and P.dk or d
    if rope then w.theta = c.rope_theta end
  end
  P.weight_floats = at
end

-- ---- the op builder -----------------------------------------------------------
-- B: the plan being built (B.P) and the op index; its methods add values,
-- stages and ops.

local Builder = {}
Builder.__index = Builder

local function builder(P)
  P.values, P.value_by, P.stages, P.kernels, P.kernel_by = {}, {}, {}, {}, {}
  local c = P.config
  return setmetatable({ P = P, c = c, d = P.d, S = P.S, isa = P.isa, nr = P.nr, index = 0, stage = nil,
    up = c.activation == "swiglu" and 2 * c.d_ff or c.d_ff }, Builder)
end

function Builder:W(stack, layer, role)
  local w = self.P.weight_by[stack .. "/" .. layer .. "/" .. role]
  assert(w, "plan: no weight " .. stack .. "/" .. layer .. "/" .. role)
  return w
end

-- "w + MACRO [+ extra]", or NULL for a weight the model does not have
function Builder:Wexpr(stack, layer, role, extra)
  local w = self.P.weight_by[stack .. "/" .. layer .. "/" .. role]
  if not w then return "NULL" end
  return "w + " .. w.macro .. (extra and (" + " .. extra) or "")
end

-- an activation: max_seq rows; persistent ones live for the whole forward
function Builder:value(name, rows, cols, persistent, doc)
  local P = self.P
  local v = { name = name, macro = "A_" .. name:upper(), rows = rows, cols = cols,
    floats = rows * cols, persistent = persistent, doc = doc }
  P.values[#P.values + 1] = v
  P.value_by[name] = v
  return v
end

function Builder:begin_stage(name, doc, params)
  self.stage = { name = name, doc = doc, params = params, ops = {} }
  self.P.stages[#self.P.stages + 1] = self.stage
end

-- a value read or written by the current op: its lifetime grows to it
function Builder:use(v)
  v.first = v.first or self.index
  v.last = self.index
  return "state + " .. v.macro
end

-- adds an op: kind, its name, kernel params, shape text, and the C args
-- (strings, values, or { ref = value, plus = offset })
function Builder:op(kind, name, params, shape, args)
  local P = self.P
  self.index = self.index + 1
  local key = ops.key(kind, params)
  local k = P.kernel_by[key]
  if not k then
    k = { kind = kind, params = params, fn = ops.kinds[kind].fn(params), key = key }
    P.kernel_by[key] = k
    P.kernels[#P.kernels + 1] = k
  end
  local o = { kind = kind, name = name, kernel = k, shape = shape, doc = ops.kinds[kind].doc(params), args = {} }
  for i, a in ipairs(args) do
    if type(a) == "table" and a.ref then o.args[i] = self:use(a.ref) .. " + " .. a.plus
    elseif type(a) == "table" then o.args[i] = self:use(a)
    else o.args[i] = a end
  end
  self.stage.ops[#self.stage.ops + 1] = o
  return o
end

function Builder:norm(name, wstack, layer, role, x, y)
  local c, d = self.c, self.d
  local gamma = self:Wexpr(wstack, layer, role .. ".weight")
  local shape = x == y and string.format("[T,%d] in place", d) or string.format("[T,%d] -> [T,%d]", d, d)
  if c.norm_kind == "layernorm" then
    self:op("layernorm", name, { D = d, EPS = c.eps, ISA = self.isa }, shape,
      { x, "T", gamma, self:Wexpr(wstack, layer, role .. ".bias"), y })
  else
    self:op("rmsnorm", name, { D = d, EPS = c.eps, ISA = self.isa }, shape, { x, "T", gamma, y })
  end
end

-- y [rows, OUT] = x [rows, IN] W^T + b with the weight of `module` (and its
-- bias if the model has one); part: "q" or "kv" of a cross-attention
-- in_proj; opts.acc: y += (a residual), opts.relu: max(0, .) after.
function Builder:linear(name, wstack, layer, module, x, y, IN, OUT, part, opts)
  opts = opts or {}
  local attn = module:match("attn$")
  local wname = module .. (attn and ".in_proj_weight" or ".weight") .. (part and ":" .. part or "")
  local bname = module .. (attn and ".in_proj_bias" or ".bias")
  local has_bias = self.P.weight_by[wstack .. "/" .. layer .. "/" .. bname] ~= nil
  local rows = opts.rows or "T"
  local what = string.format("[%s,%d] -> [%s,%d]", rows, IN, rows, OUT)
  if opts.acc then what = what .. " added to the residual stream" end
  local dtype = self:W(wstack, layer, wname).type
  local args = { "state", x, rows, self:Wexpr(wstack, layer, wname),
    has_bias and self:Wexpr(wstack, layer, bname, part == "kv" and tostring(self.d) or nil) or "NULL", y }
  local lowp = self.P.compute ~= "f32" and dtype == LOWP[self.P.compute].type and LOWP[self.P.compute]
  if lowp then -- x's rows converted into a buffer of their own first
    args[#args + 1] = self:value(name .. "_" .. self.P.compute, self.S, lowp.words(IN), false,
      "the rows of " .. name .. "'s input " .. lowp.doc)
  end
  self:op(lowp and lowp.kind or "linear", name, { IN = IN, OUT = OUT, BIAS = has_bias, ACC = opts.acc or false,
    RELU = opts.relu or false, ISA = self.isa, NR = self.nr, DTYPE = dtype }, what, args)
end

-- A sub-layer with its residual connection and norm.  body(input, x) ends
-- with a linear op that adds its output to x (the residual), so
--   post: x = Norm(x + Sublayer(x))     pre: x = x + Sublayer(Norm(x))
-- title names the sub-layer in the comment line the emitter puts before its
-- first op, e.g. x = LayerNorm(x + SelfAttention(x)).
function Builder:sublayer(prefix, wstack, layer, norm_role, x, title, body)
  local norm = self.c.norm_kind == "layernorm" and "LayerNorm" or "RMSNorm"
  local first = #self.stage.ops + 1
  local input = x
  if self.c.norm == "pre" then
    input = self:value(prefix .. "_norm", self.S, self.d, false, "normed input of the sub-layer")
    self:norm(prefix .. "_norm", wstack, layer, norm_role, x, input)
  end
  body(input, x)
  if self.c.norm == "post" then
    self:norm(prefix .. "_norm", wstack, layer, norm_role, x, x)
    local o = self.stage.ops[#self.stage.ops]
    o.doc = string.format("x = %s(x), x holding x + %s(x)", norm, title)
  end
  local o = self.stage.ops[first]
  o.sublayer = string.format(self.c.norm == "post" and "---- %s: x = %s(x + %s(x)) ----" or
    "---- %s: x = x + %s(%s(x)) ----", prefix, self.c.norm == "post" and norm or title,
    self.c.norm == "post" and title or norm)
end

-- ---- stage building: the ops of a layer, the embedding, the stages ----------

-- self-attention: qkv, [rope], [kv_store], attention, out_proj (+= residual).
-- qkv [T, d + 2 kvd]: q of every head, then k and v of the kv_heads heads.
function Builder:self_attention(L, wstack, layer, input, residual, causal_cache, key_len)
  local c, d, S, P, kvd = self.c, self.d, self.S, self.P, self.P.kvd
  local w = d + 2 * kvd
  local qkv = self:value(L .. "_attn_qkv", S, w, false, "q | k | v")
  self:linear(L .. "_attn_qkv", wstack, layer, "self_attn", input, qkv, d, w)
  if c.positional == "rope" then
    self:op("rope", L .. "_attn_rope", { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDX = w,
      PAIRING = c.rope_pairing, MAX_SEQ = c.max_seq }, string.format("q, k in [T,%d]", w),
      { qkv, "T", "w + " .. self:W("none", -1, "rope").macro, causal_cache and "pos0" or "0" })
  end
  local ctx = self:value(L .. "_attn_ctx", S, d, false, "attention heads, concatenated")
  local function heads(ldk, causal) -- the attention op's params
    return { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDQ = w, LDK = ldk, CAUSAL = causal, ISA = self.isa }
  end
  if causal_cache then
    self:op("kv_store", L .. "_attn_kv_store", { D = d, KV = 2 * kvd, LDX = w },
      string.format("[T,%d] -> cache [pos0 + T,%d]", 2 * kvd, 2 * kvd), { qkv, "T", causal_cache, "pos0" })
    self:op("attention", L .. "_attn", heads(2 * kvd, true),
      string.format("q [T,%d], k|v cache [pos0 + T,%d] -> [T,%d]", d, 2 * kvd, d),
      { "state", qkv, causal_cache, "T", "key_len", "pos0", P.scores, ctx })
  else
    self:op("attention", L .. "_attn", heads(w, false),
      kvd == d and string.format("q, k, v [T,%d] -> [T,%d]", d, d) or
        string.format("q [T,%d], k, v [T,%d] -> [T,%d]", d, kvd, d),
      { "state", qkv, { ref = qkv, plus = d }, "T", key_len, "0", P.scores, ctx })
  end
  self:linear(L .. "_attn_out", wstack, layer, "self_attn.out_proj", ctx, residual, d, d, nil, { acc = true })
end

-- cross-attention over the encoder memory (keys/values cached per source)
function Builder:cross_attention(L, wstack, layer, input, residual, cross_cache)
  local c, d, S, P, kvd = self.c, self.d, self.S, self.P, self.P.kvd
  local q = self:value(L .. "_cross_q", S, d, false, "cross-attention queries")
  self:linear(L .. "_cross_q", wstack, layer, "multihead_attn", input, q, d, d, "q")
  local ctx = self:value(L .. "_cross_ctx", S, d, false, "cross-attention heads, concatenated")
  self:op("attention", L .. "_cross", { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDQ = d, LDK = 2 * kvd,
    CAUSAL = false, ISA = self.isa }, string.format("q [T,%d], k|v memory [S,%d] -> [T,%d]", d, 2 * kvd, d),
    { "state", q, cross_cache, "T", "mem_len", "0", P.scores, ctx })
  self:linear(L .. "_cross_out", wstack, layer, "multihead_attn.out_proj", ctx, residual, d, d, nil, { acc = true })
end

-- position-wise feed-forward: linear1, [activation | swiglu], linear2 (+= residual)
function Builder:feed_forward(L, wstack, layer, input, residual)
  local c, d, S, up = self.c, self.d, self.S, self.up
  local hidden = self:value(L .. "_ffn_hidden", S, up, false, "linear1 output")
  self:linear(L .. "_ffn_up", wstack, layer, "linear1", input, hidden, d, up, nil, { relu = c.activation == "relu" })
  local act = hidden
  if c.activation == "swiglu" then
    act = self:value(L .. "_ffn_act", S, c.d_ff, false, "silu(gate) * up")
    self:op("swiglu", L .. "_ffn_swiglu", { N = c.d_ff, ISA = self.isa },
      string.format("[T,%d] -> [T,%d]", up, c.d_ff), { hidden, "T", act })
  elseif c.activation ~= "relu" then -- relu is fused into linear1
    self:op("activation", L .. "_ffn_" .. c.activation, { N = c.d_ff, ACT = c.activation, ISA = self.isa },
      string.format("[T,%d] in place", c.d_ff), { hidden, "T" })
  end
  self:linear(L .. "_ffn_down", wstack, layer, "linear2", act, residual, c.d_ff, d, nil, { acc = true })
end

function Builder:layer(tag, wstack, layer, x, causal_cache, cross_cache, key_len)
  local L = tag .. string.format("l%02d", layer)
  self:sublayer(L .. "_attn", wstack, layer, "norm1", x, "SelfAttention", function(input, residual)
    self:self_attention(L, wstack, layer, input, residual, causal_cache, key_len)
  end)
  if cross_cache then
    self:sublayer(L .. "_cross", wstack, layer, "norm2", x, "CrossAttention", function(input, residual)
      self:cross_attention(L, wstack, layer, input, residual, cross_cache)
    end)
  end
  self:sublayer(L .. "_ffn", wstack, layer, cross_cache and "norm3" or "norm2", x, "FeedForward",
    function(input, residual)
    self:feed_forward(L, wstack, layer, input, residual)
  end)
end

-- x = token embedding (or the float input) + positions [+ token type 0], [then the embedding norm]
function Builder:embed(x, tokens, input, pos0)
  local c, d = self.c, self.d
  if c.vocab then
    local scale = c.scale_embeddings and math.sqrt(d) or 1
    self:op("embed", "embed", { D = d, VOCAB = c.vocab, SCALE = scale, PANEL = tied_head(c) and self.nr or 0,
      DTYPE = self:W("none", -1, "embed").type,
      SCALE_DOC = c.scale_embeddings and string.format("x = E[token] * sqrt(%d)", d) or "x = E[token]" },
      string.format("tokens [T] -> [T,%d]", d), { tokens, "T", "w + " .. self:W("none", -1, "embed").macro, x })
  else
    self:op("copy", "input", { D = d }, string.format("[T,%d]", d), { input, "T", x })
  end
  if c.positional == "sinusoidal" then
    self:op("sinusoidal", "positions", { D = d, MAX_SEQ = c.max_seq }, string.format("[T,%d] in place", d),
      { x, "T", "w + " .. self:W("none", -1, "sinusoidal").macro, pos0 })
  elseif c.positional == "learned" then
    self:op("learned", "positions", { D = d }, string.format("[T,%d] in place", d),
      { x, "T", "w + " .. self:W("none", -1, "pos_embed").macro, pos0 })
  end
  if c.vocab and c.token_types > 0 then -- BERT with every token_type_id 0
    self:op("token_type", "token_type", { D = d }, string.format("[T,%d] in place", d),
      { x, "T", "w + " .. self:W("none", -1, "token_type_embed").macro })
  end
  if c.embed_norm then self:norm("embed_norm", "none", -1, "embed_norm", x, x) end
end

function Builder:final_norm(wstack, x)
  if self.c.final_norm then
    self:norm((self.P.two_stacks and (wstack == "encoder" and "enc_" or "dec_") or "") .. "final_norm", wstack, -1,
      "norm", x, x)
  end
end

-- the values every forward keeps: attention scratch, thread state, lengths
function Builder:state_values()
  local c, P, S = self.c, self.P, self.S
  -- threads a state can split work over (attention scratch for each): FF_MAX_THREADS, via the host
  P.max_threads = require("ff_host").max_threads
  -- K^T of a head and a block of at most 8 score rows (checked in kernels/sdpa.c)
  P.scratch_per_thread = (P.dk + 8) * ((S + 15) // 16 * 16)
  P.scores = self:value("scores", (P.dk + 8) * P.max_threads, (S + 15) // 16 * 16, true,
    "attention scratch per thread: K^T of a head and a block of score rows")
  self:value("threads", 1, 8, true, "int32 magic (init_state) and thread count, the parallel-for and its pool")
  if c.arch == "encoder-decoder" then -- what decode needs to know of the last encode
    self:value("source", 1, 4, true, "int32 source length, written by encode")
  end
  if c.arch ~= "encoder" then -- what decode may attend to: pos0 may not pass it
    self:value("decoded", 1, 4, true, "int32 positions the key/value caches hold: decode's pos0 may not pass it")
  end
end

function Builder:encode_stage()
  local c, d, P = self.c, self.d, self.P
  local two = P.two_stacks
  local x = self:value(two and "memory" or "x", self.S, d, true,
    two and "encoder output (the memory)" or "the residual stream")
  P.encoder_stream = x
  self:begin_stage("encode", string.format("the encoder: %d layers over x [T,%d]", c.encoder_layers, d),
    (c.vocab and "const int32_t *tokens" or "const float *input") .. ", int T, int key_len")
  self:embed(x, "tokens", "input", "0")
  for l = 0, c.encoder_layers - 1 do self:layer(two and "enc_" or "", "encoder", l, x, nil, nil, "key_len") end
  self:final_norm("encoder", x)
end

-- decode (and, with an encoder, cross_kv before it)
function Builder:decode_stages()
  local c, d, S, P = self.c, self.d, self.S, self.P
  local two = P.two_stacks
  local x = self:value("x", S, d, true, "the decoder's residual stream")
  P.decoder_stream = x
  local tag = two and "dec_" or ""
  local caches, cross = {}, {}
  for l = 0, c.decoder_layers - 1 do
    caches[l] = self:value(string.format("%sl%02d_kv_cache", tag, l), S, 2 * P.kvd, true,
      "self-attention keys | values")
    if two then
      cross[l] = self:value(string.format("%sl%02d_cross_kv", tag, l), S, 2 * P.kvd, true, "memory keys | values")
    end
  end
  if two then
    self:begin_stage("cross_kv", "keys and values of the memory for every decoder layer, once per source", "int S")
    for l = 0, c.decoder_layers - 1 do
      self:linear(string.format("dec_l%02d", l) .. "_cross_kv", "decoder", l, "multihead_attn", P.encoder_stream,
        cross[l], d, 2 * P.kvd, "kv", { rows = "S" })
    end
  end
  self:begin_stage("decode", string.format("the decoder: %d causal layers over x [T,%d] at positions pos0..",
    c.decoder_layers, d), (c.vocab and "const int32_t *tokens" or "const float *input") ..
    ", int T, int pos0, int key_len" .. (two and ", int mem_len" or ""))
  self:embed(x, "tokens", "input", "pos0")
  for l = 0, c.decoder_layers - 1 do self:layer(tag, "decoder", l, x, caches[l], cross[l], "key_len") end
  self:final_norm("decoder", x)
end

function Builder:head_stage()
  local c, d, P = self.c, self.d, self.P
  local stream = P.decoder_stream or P.encoder_stream
  P.stream = stream
  self:begin_stage("head", has_head(c) and "the output head: logits over the vocabulary" or
    "the output: hidden states", "int T, float *out")
  if has_head(c) then
    local E = c.tie_embeddings and self:W("none", -1, "embed") or self:W("none", -1, "lm_head")
    local b = c.head_bias and "w + " .. self:W("none", -1, "lm_head_bias").macro or "NULL"
    self:op("linear", "logits", { IN = d, OUT = c.vocab, BIAS = c.head_bias, ACC = false, RELU = false,
      ISA = self.isa, NR = self.nr, DTYPE = self.P.dtype }, string.format("[T,%d] -> [T,%d], logits = x E^T%s", d, c.vocab,
      c.head_bias and " + b" or ""), { "state", stream, "T", "w + " .. E.macro, b, "out" })
  else
    self:op("copy", "output", { D = d }, string.format("[T,%d]", d), { stream, "T", "out" })
  end
  P.out_dim = has_head(c) and c.vocab or d
  P.output_floats = self.S * P.out_dim -- one sequence of max_seq positions
  P.has_head = has_head(c)
end

-- ---- arena placement -------------------------------------------------------------

-- persistent values first, then first-fit over lifetimes (M.place).  Sets
-- P.arena_floats and, for comparison, P.arena_naive_floats (no sharing).
function M.place_values(P)
  local base = 0
  for _, v in ipairs(P.values) do
    if v.persistent then
      v.offset = base
      base = align(base + v.floats)
    end
  end
  local transients = {}
  for _, v in ipairs(P.values) do
    if not v.persistent then
      assert(v.first, "plan: value " .. v.name .. " is never used")
      transients[#transients + 1] = v
    end
  end
  P.arena_floats = M.place(transients, base)
  local naive = base
  for _, v in ipairs(transients) do naive = naive + align(v.floats) end
  P.arena_naive_floats = naive
end

-- ---- FLOP counting -----------------------------------------------------------------

-- FLOPs of one sequence at T = max_seq, per op (o.flops), per stage
-- (st.flops) and in all (P.flops)
local function count_flops(P)
  local S, flops = P.S, 0
  for _, st in ipairs(P.stages) do
    st.flops = 0
    for _, o in ipairs(st.ops) do
      o.flops = ops.kinds[o.kind].flops(o.kernel.params, S, S)
      st.flops = st.flops + o.flops
    end
    flops = flops + st.flops
  end
  P.flops = flops
end

-- ---- the plan --------------------------------------------------------------------

-- isa: a row of kernels/isas.h (ff_host.isas): the matrix kernels the code
-- calls, which fix the panel width of the packed weights.
-- dtype: "f32" | "bf16" | "int8", the weight type (default: the config's).
-- compute: "f32" | "int8" | "bf16", the blocks' linear layers (default: the config's).
function M.plan(c, specs, isa, dtype, compute)
  isa = isa or "generic"
  assert(M.NR[isa], "plan: unknown ISA " .. tostring(isa))
  local P = { config = c, d = c.d_model, dk = c.d_model // c.heads, S = c.max_seq, isa = isa, nr = M.NR[isa],
    two_stacks = c.arch == "encoder-decoder", dtype = dtype or c.dtype or "f32",
    compute = compute or c.compute or "f32" }
  P.kvd = c.kv_heads * P.dk -- the width of k (and of v): kv_heads heads
  weight_layout(P, specs)
  local B = builder(P)
  B:state_values()
  if c.arch == "encoder" or c.arch == "encoder-decoder" then B:encode_stage() end
  if c.arch == "decoder-only" or c.arch == "encoder-decoder" then B:decode_stages() end
  B:head_stage()
  M.place_values(P)
  count_flops(P)
  return P
end

-- what the training program (train.lua) builds on
M.builder, M.Builder, M.weight_macro, M.align = builder, Builder, weight_macro, align

return M

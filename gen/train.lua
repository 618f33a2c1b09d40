-- train.lua: a resolved config and fixed shapes (batch B, source S, target T)
-- -> the training program the emitter writes out (emit.emit_train): a step's
-- loss and gradient, specialised like the forward (plan.lua).
--
--   params   the flat parameters as the runtime and PyTorch hold them
--            (ff_rt_params: the weight specs' order, each tensor contiguous,
--            no packing), read by the forward and the backward; the gradient
--            has the same layout.
--   packed   every matrix a linear op multiplies by is packed each step
--            (the weights change every step) into panels of NR columns for
--            the ISA's ff_linear, right before the product that reads them:
--            W^T before its forward linear (again before a recomputed one),
--            W before dX = dY W in its linear_backward; the panels are
--            arena values like the activations, so one matrix's live at a
--            time, not every matrix's for the whole step; dW += dY^T X
--            reads dY itself (ff_linear_ta) times panels of X packed inside
--            linear_backward.
--   stages   forward (a batch of n sequences at once: the
--            rows of a stack over the source, an encoder's or a
--            decoder-only's, are its tokens packed without their padding;
--            an encoder-decoder's decoder has R = n x T), loss, backward:
--            one backward op per forward op, in reverse (the tape below).
--   values   the forward keeps what the backward reads: every sub-layer's
--            input, q | k | v, the attention weights, the norms' inputs, the
--            feed-forward's hidden layer (with shape.recompute only each
--            sub-layer's input: the backward runs its ops again); values and
--            gradients live from the op that writes them to the last that
--            reads them and share the arena by plan.place, over the whole
--            program.  Rows are the maxima (B x S, B x T); a call takes n <=
--            B sequences of lengths <= S, T, the sizes the batch gives.
-- Dropout is runtime/ff_dropout.h's mask at the runtime's sites and element
-- indices (counted from the batch's first sequence), computed again in the
-- backward pass, never stored.

local plan = require("plan")
local ops = require("ops")
local lit = require("literal")
local host = require("ff_host")

local M = {}

local DROP = { embed = 0, self_probs = 1, self_out = 2, cross_probs = 3, cross_out = 4, ffn_hidden = 5, ffn_out = 6 }
local STACK_NUM = { encoder = 1, decoder = 2 } -- enum ff_stack

-- runtime/ff_dropout.h's FF_DROPOUT_SITE as a C constant
local function site(stack, layer, kind)
  return string.format("0x%xu", STACK_NUM[stack] << 24 | layer << 4 | DROP[kind])
end

-- The flat parameters: the specs in order, each contiguous (ff_rt_params).
local function param_layout(P, specs)
  P.params, P.param_by = {}, {}
  local at = 0
  for _, s in ipairs(specs) do
    local t = { name = s.name, role = s.role, stack = s.stack, layer = s.layer, rows = s.rows, cols = s.cols,
      numel = s.rows * math.max(s.cols, 1), offset = at, macro = plan.weight_macro(P.two_stacks, s, "P"),
      kind = (s.bias and 1 or 0) | (s.norm and 2 or 0) | (s.embedding and 4 or 0) } -- FF_NO_DECAY_* bits
    at = at + t.numel
    P.params[#P.params + 1] = t
    P.param_by[s.stack .. "/" .. s.layer .. "/" .. s.role] = t
  end
  P.param_floats = at
  -- scales folded into a linear (include/ff_schema.h FF_WEIGHT_FOLDS): the passes compute with
  -- W' = diag(s) W, b' = s b, made from the parameters each call (loss_and_grad)
  P.folds = {}
  for _, s in ipairs(specs) do
    if s.fold_weight then
      local at_layer = s.stack .. "/" .. s.layer .. "/"
      P.folds[#P.folds + 1] = { scale = P.param_by[at_layer .. s.role],
        weight = assert(P.param_by[at_layer .. s.fold_weight], "train: no " .. at_layer .. s.fold_weight),
        bias = P.param_by[at_layer .. s.fold_bias] }
    end
  end
end

local TB = setmetatable({}, { __index = plan.Builder })
TB.__index = TB

function TB:param(stack, layer, role)
  return self.P.param_by[stack .. "/" .. layer .. "/" .. role]
end

-- "w + P_X [+ extra]" (the parameters) or "g + P_X ..." (the gradient); NULL when the model has none
function TB:pexpr(base, stack, layer, role, extra)
  local t = self:param(stack, layer, role)
  if not t then return "NULL" end
  if base == "g" then self:grad_adds(t) end
  return base .. " + " .. t.macro .. ((extra and extra ~= 0) and (" + " .. extra) or "")
end

-- The gradient's first writers.  With o->set_grad, grad's contents are not read: a matrix's dW
-- product that is the first in the backward pass to write its rows writes them (=) instead of
-- adding, and the parts no such product writes (P.grad_zero: biases, norms, embeddings but a
-- tied head's) are set to 0 before the backward pass, so that no pass over the whole gradient
-- zeroes it and no product reads it from memory.  Intervals of the flat gradient, in floats.
local function overlaps(list, lo, hi)
  for _, iv in ipairs(list) do
    if lo < iv[2] and iv[1] < hi then return true end
  end
  return false
end

-- an op adds into all of t's gradient
function TB:grad_adds(t)
  self.grad_written[#self.grad_written + 1] = { t.offset, t.offset + t.numel }
end

-- matrix m's dW product: true when it is its rows' first writer (it may set them)
function TB:grad_sets(m)
  local lo = m.param.offset + m.extra
  local hi = lo + m.OUT * m.IN
  local first = not overlaps(self.grad_written, lo, hi)
  self.grad_written[#self.grad_written + 1] = { lo, hi }
  if first then self.grad_set[#self.grad_set + 1] = { lo, hi } end
  return first
end

-- P.grad_zero: { offset, floats, first, last } for the runs of parameters not set by a first writer
local function grad_zero(P, set)
  table.sort(set, function(a, b) return a[1] < b[1] end)
  local runs, at = {}, 0
  local function run(lo, hi)
    if hi <= lo then return end
    local names = {}
    for _, t in ipairs(P.params) do
      if t.offset < hi and lo < t.offset + t.numel then names[#names + 1] = t.name end
    end
    runs[#runs + 1] = { offset = lo, floats = hi - lo, first = names[1], last = names[#names] }
  end
  for _, iv in ipairs(set) do
    run(at, iv[1])
    at = iv[2]
  end
  run(at, P.param_floats)
  P.grad_zero = runs
end

-- A matrix of the model, rows row0 .. row0 + out - 1 of weight wrole (with
-- its bias brole's): its two packings, persistent values of the state.
function TB:matrix(stack, layer, wrole, brole, row0, out, tag)
  local key = stack .. "/" .. layer .. "/" .. wrole .. "/" .. row0
  if self.matrices[key] then return self.matrices[key] end
  local t = assert(self:param(stack, layer, wrole), "train: no weight " .. key)
  local IN, NR = t.cols, self.nr
  local base = t.macro:sub(3):lower() .. (tag and "_" .. tag or "")
  local m = { param = t, IN = IN, OUT = out, extra = row0 * IN, brow0 = row0,
    bias = brole and self:param(stack, layer, brole), name = base }
  m.W = "w + " .. t.macro .. (row0 > 0 and " + " .. row0 * IN or "")
  m.G = "g + " .. t.macro .. (row0 > 0 and " + " .. row0 * IN or "")
  if m.bias then
    m.b = "w + " .. m.bias.macro .. (row0 > 0 and " + " .. row0 or "")
    m.gb = "g + " .. m.bias.macro .. (row0 > 0 and " + " .. row0 or "")
  end
  m.fwd = self:value("wt_" .. base, IN, (out + NR - 1) // NR * NR, false,
    "W^T in panels (the forward's), packed before its use")
  m.bwd = self:value("w_" .. base, out, (IN + NR - 1) // NR * NR, false, "W in panels (dX's), packed before its use")
  self.matrices[key] = m
  self.matrix_list[#self.matrix_list + 1] = m
  self.lin_scratch = math.max(self.lin_scratch, self.rows_max * m.bwd.cols)
  return m
end

-- an op with its FLOPs at the largest shapes
function TB:flop_op(flops, ...)
  local o = self:op(...)
  o.flops = flops
  return o
end

-- per-sequence ops: the call runs for s = 0 .. n-1 (st.packed: with r0, s's first row)
function TB:seq_op(st, flops, ...)
  local o = self:flop_op(flops, ...)
  o.loop = st.packed and "packed" or "s"
  return o
end

-- W^T of matrix m in panels for the forward product op name, right before it
-- (and again before a recomputed one): the panels live from the pack to the
-- product, so one matrix's take the arena at a time.  A recomputed product's
-- panels are a value of their own: in the forward's, they would live from
-- the forward to the backward, every layer's at once.  Returns the panels.
function TB:pack_forward(name, m)
  local wt = m.fwd
  if self.recomputing then
    m.fwd_re = m.fwd_re or self:value("wt_" .. m.name .. "_re", m.IN, m.fwd.cols, false,
      "W^T in panels (the recomputed forward's), packed before its use")
    wt = m.fwd_re
  end
  self:flop_op(0, "pack", "pack_" .. name, { K = m.IN, N = m.OUT, TRANS = true, ISA = self.isa, NR = self.nr },
    string.format("%s [%d,%d] -> panels of W^T", m.param.name, m.OUT, m.IN), { "state", m.W, wt })
  return wt
end

-- y [rows, OUT] = x W^T + b
function TB:linear(name, m, x, y, st)
  local wt = self:pack_forward(name, m)
  self:flop_op(2 * st.max_rows * m.IN * m.OUT, "linear_train", name, { IN = m.IN, OUT = m.OUT, LDY = m.OUT,
    BIAS = m.b ~= nil, ISA = self.isa, NR = self.nr },
    string.format("[%s,%d] -> [%s,%d]", st.rows, m.IN, st.rows, m.OUT),
    { "state", x, st.rows, wt, m.b or "NULL", y })
end

-- dx (set | add | none) = dy W, dW += dy^T x, db += sum dy.  W in panels is
-- packed right before (none: not at all), so that one matrix's panels at a
-- time take the arena, not every matrix's for the whole backward pass.
function TB:linear_backward(name, m, x, dy, dx, how, st, ldy)
  if m.gb then self:grad_adds(m.bias) end
  local set = self:grad_sets(m)
  if dx then
    self:flop_op(0, "pack", "pack_" .. m.name .. "_backward", { K = m.OUT, N = m.IN, TRANS = false, ISA = self.isa,
      NR = self.nr }, string.format("%s [%d,%d] -> panels of W", m.param.name, m.OUT, m.IN), { "state", m.W, m.bwd })
  end
  self:flop_op(4 * st.max_rows * m.IN * m.OUT, "linear_backward", name .. "_backward",
    { IN = m.IN, OUT = m.OUT, LDY = ldy or m.OUT, BIAS = m.b ~= nil, DX = dx and how or "none", ISA = self.isa,
      NR = self.nr },
    string.format("dy [%s,%d] -> dx [%s,%d], dW [%d,%d]%s", st.rows, m.OUT, st.rows, m.IN, m.OUT, m.IN,
      set and " (written when o->set_grad)" or ""),
    { "state", x, dy, st.rows, dx and m.bwd or "NULL", dx or "NULL", m.G, set and "o->set_grad" or "0",
      m.gb or "NULL", self.scratch })
end

-- A value of rows x cols floats whose rows are padded by 16 floats when they would be a
-- multiple of 1 KB: a product's tile reading 8 or 192 rows 2^n floats apart finds them in the
-- same cache sets (the GPT shape's head, vocabulary 8192: 65 % of the FMA peak, 87 % padded;
-- linear1's dW = dh^T x, rows of 1024 floats: 227 GFLOP/s, 253 on 1040).  Returns the value
-- and its row stride.
function TB:padded_value(name, rows, cols, doc)
  local ld = cols % 256 == 0 and cols + 16 or cols
  return self:value(name, rows, ld, false, doc ..
    (ld ~= cols and string.format(" (rows of %d floats, %d used)", ld, cols) or "")), ld
end

-- the elements a row of stack st's values of cols columns when its rows are packed, else 0
-- (drop_range's packed_row)
local function packed_row(st, cols)
  return st.packed and tostring(cols) or "0"
end

function TB:dropout(name, x, y, count, st, layer, kind, per)
  self:flop_op(0, "dropout", name, { ISA = self.isa }, "p = o->dropout",
    { "state", "b", "o", x, y, count, site(st.wstack, layer, kind), per, packed_row(st, self.d) })
end

function TB:norm_forward(name, st, layer, role, x, y)
  local c, d = self.c, self.d
  local wstack, l = (layer and st.wstack or st.wstack), layer or -1
  if role == "embed_norm" then wstack = "none" end
  local gamma = self:pexpr("w", wstack, l, role .. ".weight")
  local shape = string.format("[%s,%d] -> [%s,%d]", st.rows, d, st.rows, d)
  if c.norm_kind == "layernorm" then
    self:flop_op(8 * st.max_rows * d, "layernorm_train", name, { D = d, EPS = c.eps, ISA = self.isa }, shape,
      { "state", x, st.rows, gamma, self:pexpr("w", wstack, l, role .. ".bias"), y })
  else
    self:flop_op(5 * st.max_rows * d, "rmsnorm_train", name, { D = d, EPS = c.eps, ISA = self.isa }, shape,
      { "state", x, st.rows, gamma, y })
  end
  return function(dy, dx, acc) -- the backward op: its d gamma sums per chunk of rows in the scratch
    local p = { D = d, EPS = c.eps, ISA = self.isa, ACC = acc }
    local g = self:pexpr("g", wstack, l, role .. ".weight")
    local what = string.format("dy [%s,%d] -> dx [%s,%d]", st.rows, d, st.rows, d)
    local chunks = (st.max_rows + ops.NORM_CHUNK - 1) // ops.NORM_CHUNK
    self.lin_scratch = math.max(self.lin_scratch, chunks * 2 * d)
    if c.norm_kind == "layernorm" then
      self:flop_op(16 * st.max_rows * d, "layernorm_backward", name .. "_backward", p, what,
        { "state", x, st.rows, gamma, dy, dx, g, self:pexpr("g", wstack, l, role .. ".bias"), self.scratch })
    else
      self:flop_op(10 * st.max_rows * d, "rmsnorm_backward", name .. "_backward", p, what,
        { "state", x, st.rows, gamma, dy, dx, g, self.scratch })
    end
  end
end

-- a gradient value of stack st's rows
function TB:grad(name, st, cols)
  return self:value(name, st.max_rows, cols or self.d, false, "gradient")
end

-- ---- the forward, recording the backward on the tape ----------------------------

-- x = drop(EmbedNorm(E[ids] s + positions + token type 0)); -> x
function TB:embed(st)
  local c, d = self.c, self.d
  local L = st.tag
  local e = self:value(L .. "embed", st.max_rows, d, false, "the embeddings")
  local scale = c.scale_embeddings and math.sqrt(d) or 1
  local E = self:param("none", -1, "embed")
  local ep = { D = d, VOCAB = c.vocab, SCALE = scale, PANEL = 0, DTYPE = "f32",
    SCALE_DOC = c.scale_embeddings and string.format("x = E[token] * sqrt(%d)", d) or "x = E[token]" }
  local per = { ref = e, plus = string.format("(size_t)%s * %d", st.row0, d) } -- sequence s's rows
  self:seq_op(st, st.max_rows * d, "embed", L .. "embed", ep, string.format("ids [%s] -> [%s,%d], each sequence",
    st.seq_len, st.seq_len, d), { st.seq_ids, st.seq_len, "w + " .. E.macro, per })
  if c.positional == "sinusoidal" then
    self:seq_op(st, 4 * st.max_rows * d, "sinusoidal", L .. "positions", { D = d, MAX_SEQ = c.max_seq },
      string.format("[%s,%d] in place, each sequence", st.seq_len, d), { per, st.seq_len, "POS_SINUSOIDAL", "0" })
  elseif c.positional == "learned" then
    self:seq_op(st, st.max_rows * d, "learned", L .. "positions", { D = d },
      string.format("[%s,%d] in place, each sequence", st.seq_len, d),
      { per, st.seq_len, self:pexpr("w", "none", -1, "pos_embed"), "0" })
  end
  if c.token_types > 0 then
    self:flop_op(st.max_rows * d, "token_type", L .. "token_type", { D = d }, string.format("[%s,%d] in place", st.rows, d),
      { e, st.rows, self:pexpr("w", "none", -1, "token_type_embed") })
  end
  local x, norm_back = e, nil
  if c.embed_norm then
    x = self:value(L .. "embed_normed", st.max_rows, d, false, "the normed embeddings")
    norm_back = self:norm_forward(L .. "embed_norm", st, nil, "embed_norm", e, x)
  end
  local n = string.format("(size_t)%s * %d", st.rows, d)
  local per_seq = string.format("(size_t)%s * %d", st.len, d)
  self:dropout(L .. "embed_dropout", x, x, n, st, 0, "embed", per_seq)
  self:push(function(dx)
    self:dropout(L .. "embed_dropout_backward", dx, dx, n, st, 0, "embed", per_seq)
    local de = dx
    if norm_back then
      de = self:grad(L .. "d_embed", st)
      norm_back(dx, de, false)
    end
    local dper = { ref = de, plus = string.format("(size_t)%s * %d", st.row0, d) } -- sequence s's rows
    if c.positional == "learned" then
      self:seq_op(st, st.max_rows * d, "learned_backward", L .. "positions_backward", { D = d },
        string.format("dP [%s,%d] += dx, each sequence", st.seq_len, d),
        { dper, st.seq_len, self:pexpr("g", "none", -1, "pos_embed") })
    end
    if c.token_types > 0 then
      self:flop_op(st.max_rows * d, "token_type_backward", L .. "token_type_backward", { D = d },
        string.format("dTT[0] += the sum of dx's rows"), { de, st.rows, self:pexpr("g", "none", -1, "token_type_embed") })
    end
    self:seq_op(st, st.max_rows * d, "embed_backward", L .. "embed_backward", { D = d, VOCAB = c.vocab, SCALE = scale },
      string.format("dE[ids] += dx [%s,%d], each sequence", st.seq_len, d),
      { st.seq_ids, st.seq_len, dper, "g + " .. E.macro })
    self:grad_adds(E)
    return nil
  end)
  return x
end

-- self-attention on input [rows, d] -> f [rows, d]; returns its backward: (df, dinput, how)
function TB:self_attention(L, st, layer, input, f)
  local c, d, P = self.c, self.d, self.P
  local kvd, w = P.kvd, self.d + 2 * P.kvd
  local m_in = self:matrix(st.wstack, layer, "self_attn.in_proj_weight", "self_attn.in_proj_bias", 0, w)
  local m_out = self:matrix(st.wstack, layer, "self_attn.out_proj.weight", "self_attn.out_proj.bias", 0, d)
  local qkv = self:value(L .. "_qkv", st.max_rows, w, false, "q | k | v (after RoPE)")
  self:linear(L .. "_attn_qkv", m_in, input, qkv, st)
  local rope_params = { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDX = w, PAIRING = c.rope_pairing,
    MAX_SEQ = c.max_seq }
  local function rope(kind, name, v)
    self:seq_op(st, 3 * st.max_rows * (c.heads + c.kv_heads) * P.dk, kind, name, rope_params,
      string.format("q, k of each sequence [%s,%d]", st.seq_len, w),
      { { ref = v, plus = string.format("(size_t)%s * %d", st.row0, w) }, st.seq_len, "POS_ROPE", "0" })
  end
  if c.positional == "rope" then rope("rope", L .. "_attn_rope", qkv) end
  local probs = self:value(L .. "_probs", self.B * c.heads * st.max_len, st.max_len, false,
    "attention weights [n, heads, T, T]")
  local ctx = self:value(L .. "_ctx", st.max_rows, d, false, "attention heads, concatenated")
  local ap = { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDQ = w, LDK = w, CAUSAL = st.causal, ISA = self.isa }
  local flops = 4 * self.B * st.max_len * st.max_len * d
  local s = site(st.wstack, layer, "self_probs")
  self:flop_op(flops, "attention_train", L .. "_attn", ap,
    string.format("q, k, v [%s,%d] -> [%s,%d], weights kept", st.rows, w, st.rows, d),
    { "state", "b", "o", qkv, { ref = qkv, plus = d }, st.len, st.len, st.lengths, st.packed and "3" or "0", s, probs,
      self.attn_scratch, ctx })
  self:linear(L .. "_attn_out", m_out, ctx, f, st)
  return function(df, dinput, how)
    local dctx = self:grad(L .. "_dctx", st)
    self:linear_backward(L .. "_attn_out", m_out, ctx, df, dctx, "set", st)
    local dqkv = self:grad(L .. "_dqkv", st, w)
    self:flop_op(2 * flops, "attention_backward", L .. "_attn_backward", ap,
      string.format("d out [%s,%d] -> d q, k, v [%s,%d]", st.rows, d, st.rows, w),
      { "state", "b", "o", qkv, { ref = qkv, plus = d }, st.len, st.len, st.lengths, st.packed and "3" or "0", s, probs,
        dctx, dqkv, { ref = dqkv, plus = d }, self.attn_scratch })
    if c.positional == "rope" then rope("rope_backward", L .. "_attn_rope_backward", dqkv) end
    self:linear_backward(L .. "_attn_qkv", m_in, input, dqkv, dinput, how, st)
  end
end

-- cross-attention of input [rows, d] over the encoder's output -> f
function TB:cross_attention(L, st, layer, input, f)
  local c, d, P = self.c, self.d, self.P
  local kvd, enc = P.kvd, self.enc
  local m_q = self:matrix(st.wstack, layer, "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", 0, d, "q")
  local m_kv = self:matrix(st.wstack, layer, "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", d,
    2 * kvd, "kv")
  local m_out = self:matrix(st.wstack, layer, "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", 0, d)
  local q = self:value(L .. "_cross_q", st.max_rows, d, false, "cross-attention queries")
  self:linear(L .. "_cross_q", m_q, input, q, st)
  local kv = self:value(L .. "_cross_kv", enc.max_rows, 2 * kvd, false, "memory keys | values")
  self:linear(L .. "_cross_kv", m_kv, self.memory, kv, enc)
  local probs = self:value(L .. "_cross_probs", self.B * c.heads * st.max_len, enc.max_len, false,
    "cross-attention weights [n, heads, T, S]")
  local ctx = self:value(L .. "_cross_ctx", st.max_rows, d, false, "cross-attention heads, concatenated")
  local ap = { HEADS = c.heads, KV_HEADS = c.kv_heads, DK = P.dk, LDQ = d, LDK = 2 * kvd, CAUSAL = false,
    ISA = self.isa }
  local flops = 4 * self.B * st.max_len * enc.max_len * d
  local s = site(st.wstack, layer, "cross_probs")
  self:flop_op(flops, "attention_train", L .. "_cross", ap,
    string.format("q [%s,%d], k|v memory [%s,%d] -> [%s,%d], weights kept", st.rows, d, enc.rows, 2 * kvd, st.rows, d),
    { "state", "b", "o", q, kv, st.len, enc.len, enc.lengths, enc.packed and "2" or "0", s, probs, self.attn_scratch,
      ctx })
  self:linear(L .. "_cross_out", m_out, ctx, f, st)
  return function(df, dinput, how)
    local dctx = self:grad(L .. "_cross_dctx", st)
    self:linear_backward(L .. "_cross_out", m_out, ctx, df, dctx, "set", st)
    local dq = self:grad(L .. "_cross_dq", st)
    local dkv = self:value(L .. "_cross_dkv", enc.max_rows, 2 * kvd, false, "gradient")
    self:flop_op(2 * flops, "attention_backward", L .. "_cross_backward", ap,
      string.format("d out [%s,%d] -> d q [%s,%d], d k|v [%s,%d]", st.rows, d, st.rows, d, enc.rows, 2 * kvd),
      { "state", "b", "o", q, kv, st.len, enc.len, enc.lengths, enc.packed and "2" or "0", s, probs, dctx, dq, dkv,
        self.attn_scratch })
    self:linear_backward(L .. "_cross_q", m_q, input, dq, dinput, how, st)
    self:linear_backward(L .. "_cross_kv", m_kv, self.memory, dkv, self.dmemory, self.dmemory_written and "add" or "set",
      enc)
    self.dmemory_written = true
  end
end

-- linear1, drop(act), linear2 -> f
function TB:feed_forward(L, st, layer, input, f)
  local c, d = self.c, self.d
  local up, N = self.up, c.d_ff
  local m1 = self:matrix(st.wstack, layer, "linear1.weight", "linear1.bias", 0, up)
  local m2 = self:matrix(st.wstack, layer, "linear2.weight", "linear2.bias", 0, d)
  local h = self:value(L .. "_ffn_hidden", st.max_rows, up, false, "linear1's output")
  self:linear(L .. "_ffn_up", m1, input, h, st)
  local a = self:value(L .. "_ffn_act", st.max_rows, N, false, "the activation's output, after dropout")
  local s = site(st.wstack, layer, "ffn_hidden")
  local per = string.format("(size_t)%s * %d", st.len, N)
  local ap = { N = N, ACT = c.activation, ISA = self.isa }
  self:flop_op(8 * st.max_rows * N, "activation_train", L .. "_ffn_" .. c.activation, ap,
    string.format("[%s,%d] -> [%s,%d]", st.rows, up, st.rows, N),
    { "state", "b", "o", h, a, st.rows, s, per, packed_row(st, N) })
  self:linear(L .. "_ffn_down", m2, a, f, st)
  return function(df, dinput, how)
    local da = self:grad(L .. "_ffn_dact", st, N)
    self:linear_backward(L .. "_ffn_down", m2, a, df, da, "set", st)
    local dh, ld = self:padded_value(L .. "_ffn_dhidden", st.max_rows, up, "gradient")
    self:flop_op(12 * st.max_rows * N, "activation_backward", L .. "_ffn_" .. c.activation .. "_backward",
      { N = N, ACT = c.activation, LD = ld, ISA = self.isa },
      string.format("[%s,%d] -> [%s,%d]", st.rows, N, st.rows, up),
      { "state", "b", "o", h, da, dh, st.rows, s, per, packed_row(st, N) })
    self:linear_backward(L .. "_ffn_up", m1, input, dh, dinput, how, st, ld)
  end
end

-- post: y = Norm(x + drop(F(x)))     pre: y = x + drop(F(Norm(x)))
-- The ops of a sub-layer over x -> y, and the function that adds their
-- backward (dy -> dx) when the backward pass is built.
function TB:sublayer_ops(L, st, layer, kind, norm_role, x)
  local c, d = self.c, self.d
  local pre = c.norm == "pre"
  local input, norm_back = x, nil
  if pre then
    input = self:value(L .. "_normed", st.max_rows, d, false, "the sub-layer's normed input")
    norm_back = self:norm_forward(L .. "_norm", st, layer, norm_role, x, input)
  end
  local f = self:value(L .. "_out", st.max_rows, d, false, "the sub-layer's output")
  local body = kind == "ffn" and self.feed_forward or kind == "cross" and self.cross_attention or self.self_attention
  local body_back = body(self, L, st, layer, input, f)
  local out = kind == "ffn" and "ffn_out" or kind == "cross" and "cross_out" or "self_out"
  local s = site(st.wstack, layer, out)
  local n, per = string.format("(size_t)%s * %d", st.rows, d), string.format("(size_t)%s * %d", st.len, d)
  local z = self:value(L .. "_sum", st.max_rows, d, false, pre and "the sub-layer's output stream" or
    "x + the sub-layer's output: the norm's input")
  self:flop_op(st.max_rows * d, "residual", L .. "_residual", { D = d, ISA = self.isa },
    string.format("z = x + drop(f) [%s,%d]", st.rows, d), { "state", "b", "o", x, f, z, st.rows, s, per,
      packed_row(st, d) })
  local y = z
  if not pre then
    y = self:value(L .. "_y", st.max_rows, d, false, "the sub-layer's output stream")
    norm_back = self:norm_forward(L .. "_norm", st, layer, norm_role, z, y)
  end
  return y, function(dy)
    local df = self:grad(L .. "_df", st)
    if pre then -- dx = dy + Norm'(x)^T F'^T drop(dy): dy's buffer becomes dx
      self:dropout(L .. "_dropout_backward", dy, df, n, st, layer, out, per)
      local dh = self:grad(L .. "_dnormed", st)
      body_back(df, dh, "set")
      norm_back(dh, dy, true)
      return dy
    end
    local dz = self:grad(L .. "_dsum", st) -- dx = dz + F'^T drop(dz), dz = Norm'(z)^T dy
    norm_back(dy, dz, false)
    self:dropout(L .. "_dropout_backward", dz, df, n, st, layer, out, per)
    body_back(df, dz, "add")
    return dz
  end
end

-- A sub-layer, its backward on the tape.  With recomputation (shape.recompute)
-- the backward first runs the sub-layer's ops again from x, the stream the
-- forward keeps, into values of their own ("_re"): what the forward's ops
-- wrote is read by no later op and shares the arena with the next sub-layer's.
function TB:sublayer(L, st, layer, kind, norm_role, x)
  local y, back = self:sublayer_ops(L, st, layer, kind, norm_role, x)
  if not self.P.recompute then
    self:push(back)
    return y
  end
  self:push(function(dy)
    self.recomputing = true
    local _, again = self:sublayer_ops(L .. "_re", st, layer, kind, norm_role, x)
    self.recomputing = false
    return again(dy)
  end)
  return y
end

function TB:push(fn) self.tape[#self.tape + 1] = fn end

-- a stack's layers over x -> its output
function TB:stack(st, layers)
  local x = self:embed(st)
  for l = 0, layers - 1 do
    local L = st.tag .. string.format("l%02d", l)
    x = self:sublayer(L .. "_attn", st, l, "self", "norm1", x)
    if st.cross then x = self:sublayer(L .. "_cross", st, l, "cross", "norm2", x) end
    x = self:sublayer(L .. "_ffn", st, l, "ffn", st.cross and "norm3" or "norm2", x)
  end
  if self.c.final_norm then
    local y = self:value(st.tag .. "final_norm", st.max_rows, self.d, false, "the stack's output")
    local back = self:norm_forward(st.tag .. "final_norm", st, -1, "norm", x, y)
    self:push(function(dy)
      local dx = self:grad(st.tag .. "d_final", st)
      back(dy, dx, false)
      return dx
    end)
    x = y
  end
  return x
end

-- ---- the plan ---------------------------------------------------------------------

-- shape: { batch = B, src = S, tgt = T } (tgt for encoder-decoder only)
function M.plan(c, specs, isa, shape)
  isa = isa or "generic"
  assert(plan.NR[isa], "train: unknown ISA " .. tostring(isa))
  assert(c.vocab and c.lm_head, "train: the model has no output head")
  local encdec = c.arch == "encoder-decoder"
  local P = { config = c, d = c.d_model, dk = c.d_model // c.heads, isa = isa, nr = plan.NR[isa],
    two_stacks = encdec, B = shape.batch, S = shape.src, T = encdec and shape.tgt or shape.src, dtype = "f32",
    recompute = shape.recompute == 1 }
  P.kvd = c.kv_heads * P.dk
  param_layout(P, specs)
  local b = plan.builder(P)
  setmetatable(b, TB)
  b.B, b.tape, b.matrices, b.matrix_list = P.B, {}, {}, {}
  b.rows_max = P.B * math.max(P.S, P.T)
  b.lin_scratch = 0
  P.max_threads = host.max_threads
  -- packed (every stack over the source: an encoder's, a decoder-only's): the source's tokens,
  -- padding left out, are the rows (src_rows(b) of them; sequence s's src_length(b, s) from row
  -- r0 of the seq_op loop)
  local function stack(wstack, len, max_len, ids, lengths, causal, cross, packed)
    return { wstack = wstack, tag = encdec and (wstack == "encoder" and "enc_" or "dec_") or "", len = len,
      rows = packed and "RP" or "R" .. len, max_len = max_len, max_rows = P.B * max_len, lengths = lengths,
      causal = causal, cross = cross, packed = packed, seq_len = packed and "src_length(b, s)" or len,
      row0 = packed and "r0" or "s * " .. len, seq_ids = ids .. " + (size_t)s * " .. len }
  end
  local enc, dec
  if c.arch ~= "decoder-only" then enc = stack("encoder", "S", P.S, "b->src", "b->src_lengths", false, false, true) end
  if encdec then
    dec = stack("decoder", "T", P.T, "b->tgt", "NULL", true, true, false)
  elseif c.arch == "decoder-only" then
    dec = stack("decoder", "T", P.T, "b->src", "b->src_lengths", true, false, true)
  end
  b.enc = enc
  -- the state's persistent parts: threads, the scratch of linear_backward and attention
  b:value("threads", 1, 8, true, "int32 magic (init_state) and thread count, the parallel-for and its pool")
  local lin = b:value("lin_scratch", 1, 1, true, "linear_backward's x in panels, the norms' chunk sums")
  local max_q = math.max(P.T, P.S)
  P.attn_slot = plan.align((P.dk + 2 * max_q) * max_q)
  b.attn_scratch = b:value("attn_scratch", P.max_threads, P.attn_slot, true,
    "attention scratch per thread: K^T (or V^T) of a head group, a head's weights and their transpose")
  b.scratch = lin
  if #P.folds > 0 then
    b:value("folded_params", 1, P.param_floats, true, "the parameters, the folded linears' W', b' in place of W, b")
    b:value("folded_grad", 1, P.param_floats, true, "the gradient for those parameters, before it is unfolded")
  end

  b:begin_stage("forward", "the forward pass over a batch, keeping what the backward reads",
    "const train_batch *b, const train_opts *o")
  local top
  if enc then
    b.memory = b:stack(enc, c.encoder_layers)
    top = b.memory
  end
  if dec then
    if encdec then
      b.dmemory = b:value("enc_dmemory", enc.max_rows, P.d, false, "gradient of the encoder's output")
      local memory_grad = b.dmemory
      b:push(function() return memory_grad end) -- back into the encoder after the decoder
    end
    top = b:stack(dec, c.decoder_layers)
  end
  local st = dec or enc
  P.top_rows = st.rows
  -- the head and the loss
  local E = c.tie_embeddings and "embed" or "lm_head"
  local m_head = b:matrix("none", -1, E, c.head_bias and "lm_head_bias" or nil, 0, c.vocab)
  local logits, ld = b:padded_value("logits", st.max_rows, c.vocab, "logits, then d loss / d logits")
  b:pack_forward("logits", m_head)
  b:flop_op(2 * st.max_rows * m_head.IN * m_head.OUT, "linear_train", "logits", { IN = m_head.IN, OUT = m_head.OUT,
    LDY = ld, BIAS = m_head.b ~= nil, ISA = isa, NR = P.nr },
    string.format("[%s,%d] -> [%s,%d]", st.rows, m_head.IN, st.rows, m_head.OUT),
    { "state", top, st.rows, m_head.fwd, m_head.b or "NULL", logits })
  b:begin_stage("loss", "the summed cross-entropy of the logits; their gradient in place (grad)",
    "const train_batch *b, const train_opts *o, int grad, double *loss_sum, int64_t *tokens")
  b:flop_op(5 * st.max_rows * c.vocab, "cross_entropy", "loss",
    { VOCAB = c.vocab, LD = ld, ROWS = st.max_rows, BATCH = P.B, PACKED = st.packed, ISA = isa },
    string.format("logits [%s,%d], labels [%s]", st.rows, c.vocab, st.rows),
    { "state", "b", "o", logits, st.rows, "grad", "loss_sum", "tokens" })
  b:begin_stage("backward", "the backward pass: each forward op's, in reverse; the gradient added into g "
    .. "(set by its first writers when o->set_grad)", "const train_batch *b, const train_opts *o, float *restrict g")
  b.grad_written, b.grad_set = {}, {}
  local dtop = b:grad("dtop", st)
  b:linear_backward("logits", m_head, top, logits, dtop, "set", st, ld)
  local dy = dtop
  for i = #b.tape, 1, -1 do dy = b.tape[i](dy) end
  grad_zero(P, b.grad_set)
  lin.rows, lin.floats = 1, b.lin_scratch
  plan.place_values(P)
  -- FLOPs at the largest shapes
  P.flops = 0
  for _, s in ipairs(P.stages) do
    s.flops = 0
    for _, o in ipairs(s.ops) do s.flops = s.flops + o.flops end
    P.flops = P.flops + s.flops
  end
  P.stage_by = {}
  for _, s in ipairs(P.stages) do P.stage_by[s.name] = s end
  P.enc, P.dec = enc, dec
  return P
end

-- the floats of a derived position table, as host/codegen.c packs them
function M.position_table(P)
  local c = P.config
  if c.positional ~= "sinusoidal" and c.positional ~= "rope" then return nil end
  local rope = c.positional == "rope"
  local bits, B, NH, W = ops.position_blocks(c.max_seq, rope and P.dk or P.d)
  local rows = (rope and 1 or 0) + NH + B
  return { name = rope and "POS_ROPE" or "POS_SINUSOIDAL", rows = rows, cols = W,
    values = host.position_table(c.positional, rows, W, bits, rope and P.dk or P.d, rope and c.rope_theta or 0),
    doc = rope and string.format("rotary frequencies, cos | sin (theta %s)", lit.double(c.rope_theta)) or
      "sinusoidal positions, sin, cos pairs" }
end

return M

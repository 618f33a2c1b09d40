-- ops.lua: the op -> C table, every fact of an op kind in its one entry:
--
--   file, section  the template that implements it (templates/FILE.in,
--                  section `@@ SECTION`; default: the kind's name)
--   params         the parameters that make a distinct kernel (every one a
--                  compile-time constant)
--   fn(p)          the kernel's C name built from them
--   doc(p)         the formula its comment shows
--   vars(p)        template variables beyond the params themselves (floats
--                  already printed as C literals)
--   flops(p, T, Tk) its FLOPs for T rows (Tk keys; a multiply-add counts 2)
--   calls(p)       the kernels of kernels/ it calls, ff_NAME_ISA by NAME
--                  (default none): what the model takes of the library
--
-- The plan (plan.lua) builds a list of ops of these kinds; the emitter
-- (emit.lua) renders one kernel per distinct (kind, params) and one call per op.

local lit = require("literal")

local M = {}

-- The rows of a norm's backward whose d gamma sums one task makes: the sums
-- go on in chunk order, the same whatever the thread count (train.lua sizes
-- the scratch for them)
M.NORM_CHUNK = 32

-- The matrix kernels' name for each weight type: ff_linear<SUFFIX>_<ISA> (kernels/prototypes.h)
M.KERNEL_SUFFIX = { f32 = "", bf16 = "_bf16", int8 = "_q8", i8 = "_i8", b16 = "_dpbf16" }

local function b(v) return v and 1 or 0 end

-- RoPE's template variables; sub, add: the signs of its rotation (the
-- backward rotates back: "+", "-")
local function rope_vars(p, sub, add)
  local half, d = p.DK // 2, p.HEADS * p.DK
  local inter = p.PAIRING == "interleaved"
  local bits, B, NH = M.position_blocks(p.MAX_SEQ, p.DK)
  return { HALF = half, D = d, DQK = d + p.KV_HEADS * p.DK, QK_HEADS = p.HEADS + p.KV_HEADS,
    IA = inter and "2 * i" or "i", IB = inter and "2 * i + 1" or "i + " .. half,
    BITS = bits, B = B, MASK = B - 1, NH = NH, LO_ROW = 1 + NH, ROWS = 1 + NH + B, SUB = sub, ADD = add,
    SIGN_DOC = sub == "-" and "" or " backward: the rotation by -A (its transpose)" }
end

-- The tables of the positions (sinusoidal, RoPE) hold two levels, not a row
-- per position: pos = hi 2^bits + lo, 2^bits >= sqrt(max_seq), so NH =
-- ceil(max_seq / 2^bits) rows of angles hi 2^bits w and 2^bits rows of
-- angles lo w, combined by the angle-addition formulas: 2 sqrt(max_seq) rows
-- instead of max_seq (2048 rows at max_seq 2^20).  A row holds the sin and
-- cos of each frequency of a width of n: 2 ceil(n / 2) floats.
-- -> bits, 2^bits, NH, the row width
function M.position_blocks(max_seq, n)
  local bits = 0
  while (1 << (2 * bits)) < max_seq do bits = bits + 1 end
  local B = 1 << bits
  return bits, B, (max_seq + B - 1) // B, 2 * ((n + 1) // 2)
end

-- A linear op of a compute type (name: int8, bf16): linear's, on rows the
-- op converts first with the first of `calls` (templates/linear.c.in, the
-- section of the kind's name), its kernel named with the type.
-- The rows from which a product with IN x OUT weights runs on the state's
-- threads (templates/model.c.in's linear_run; fewer rows: the calling thread
-- alone): where its work outweighs starting the tasks, about a microsecond.
-- A million multiply-adds; or, at any row count, 256 KB of weights or more
-- (64K floats; the bytes of dtype's layout, M.weight_words), whose reading
-- from memory is the work when a row is decoded (T = 1). Folded into each
-- op's call, so the emitted code says where its split starts.
function M.split_rows(IN, OUT, dtype)
  if 4 * M.weight_words(dtype or "f32", OUT, IN) >= 262144 then return 1 end
  return (1000000 + IN * OUT - 1) // (IN * OUT)
end

-- The 4-byte words of `rows` rows of `cols` weights stored in type t: f32
-- one each; bf16 two per word, a row padded to whole words (a panel row of
-- NR is whole); int8 per group of Q8 inputs a float scale and Q8 bytes; i8
-- (compute int8's panels, kernels/int8.c) per row a scale, a sum and the
-- bytes of cols padded to a multiple of 4; b16 (compute bf16's, kernels/bf16.c)
-- as bf16, in pairs of k.
local Q8 = 32 -- FF_Q8_GROUP (include/ff_config.h)
function M.weight_words(t, rows, cols)
  if t == "bf16" or t == "b16" then return rows * ((cols + 1) // 2) end
  if t == "int8" then return rows * ((cols + Q8 - 1) // Q8) * (4 + Q8) // 4 end
  if t == "i8" then return rows * (2 + (cols + 3) // 4) end
  return rows * cols
end

local function compute_linear(name, calls)
  return {
    file = "linear.c", params = { "IN", "OUT", "BIAS", "ACC", "RELU", "ISA", "NR", "DTYPE" },
    fn = function(p) return M.kinds.linear.fn(p) .. "_" .. name end,
    doc = function(p) return M.kinds.linear.doc(p) .. " in " .. name end,
    vars = function(p)
      local v = M.kinds.linear.vars(p)
      v.Q_BYTES = 4 * ((p.IN + 3) // 4) -- (int8's row of bytes)
      return v
    end,
    flops = function(p, T) return 2 * T * p.IN * p.OUT end,
    calls = function() return calls end,
  }
end

-- A norm's kind (norm.c, section `name`): y = Title(x) over rows of D, at
-- flops per element.
local function norm_kind(name, title, flops)
  return {
    file = "norm.c", params = { "D", "EPS", "ISA" },
    fn = function(p) return string.format("%s_%d", name, p.D) end,
    doc = function() return "y = " .. title .. "(x)" end,
    vars = function(p) return { EPS = lit.float(p.EPS) } end,
    flops = function(p, T) return flops * T * p.D end,
    calls = function() return { name } end,
  }
end

-- A norm in training code (norm.c, section `name`_train): the same on the
-- state's threads, in ranges of rows.
local function norm_train_kind(name, title, flops)
  local k = norm_kind(name, title, flops)
  k.section = function() return name .. "_train" end
  k.fn = function(p) return string.format("%s_train_%d", name, p.D) end
  return k
end

-- A norm's backward (norm.c, section `name`_backward): dx (= or +=) Norm'(x)^T dy.
local function norm_backward_kind(name, title, flops)
  return {
    file = "norm.c", params = { "D", "EPS", "ISA", "ACC" },
    fn = function(p) return string.format("%s_backward_%d%s", name, p.D, p.ACC and "_add" or "") end,
    doc = function(p) return string.format("dx %s %s'(x)^T dy; d gamma%s += ...", p.ACC and "+=" or "=", title,
      name == "layernorm" and ", d beta" or "") end,
    vars = function(p)
      return { EPS = lit.float(p.EPS), ACC = b(p.ACC), OP = p.ACC and "+=" or "=", CHUNK = M.NORM_CHUNK }
    end,
    flops = function(p, T) return flops * T * p.D end,
    calls = function() return { name .. "_backward" } end,
  }
end

-- The training kinds' common parts: dropout's mask is a kernel of kernels/train.c.
local function with_dropout(calls) calls[#calls + 1] = "dropout" return calls end

-- the floats of an activation's input row: N, or gate | up (2N) for SwiGLU
function M.activation_width(p)
  return p.ACT == "swiglu" and 2 * p.N or p.N
end

-- The activations applied element by element with a kernel of their own (ff_ACT_ISA and
-- ff_ACT_backward_ISA): what their training ops' sections (templates/ffn.c.in's pointwise_*)
-- say they compute.  ReLU (inline) and SwiGLU (by rows) have sections of their own.
local POINTWISE = { gelu = "h/2 (1 + erf(h/sqrt 2))", gelu_tanh = "gelu_tanh(h)", silu = "h sigmoid(h)" }
local function activation_section(p, suffix)
  return (POINTWISE[p.ACT] and "pointwise" or p.ACT) .. suffix
end

-- ", dh's rows LD floats apart" when the backward's dh rows are padded (gen/train.lua), else ""
local function dh_padding(p)
  return p.LD ~= M.activation_width(p) and string.format(", dh's rows %d floats apart", p.LD) or ""
end

M.kinds = {
  embed = {
    file = "embed.c", params = { "D", "VOCAB", "SCALE", "PANEL", "DTYPE" },
    fn = function(p)
      return string.format("embed_%dx%d%s%s", p.VOCAB, p.D, p.PANEL > 0 and "_panels" or "",
        p.DTYPE ~= "f32" and "_" .. p.DTYPE or "")
    end,
    doc = function(p) return p.SCALE_DOC end,
    vars = function(p)
      local G = (p.D + 31) // 32 -- int8 groups of 32 (FF_Q8_GROUP) along d
      return { SCALE = lit.float(p.SCALE), PANELS = p.PANEL > 0, F32 = p.DTYPE == "f32", BF16 = p.DTYPE == "bf16",
        INT8 = p.DTYPE == "int8", G = G, ROW_WORDS = p.DTYPE == "bf16" and (p.D + 1) // 2 or 9 * G,
        GROUP_BYTES = 36 * p.PANEL, PANEL_BYTES = 36 * p.PANEL * G }
    end,
    flops = function(p, T) return T * p.D end,
  },
  copy = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("copy_%d", p.D) end,
    doc = function() return "y = x" end,
    flops = function() return 0 end,
  },
  sinusoidal = { -- the table is folded into the weights when they are packed (plan.lua)
    file = "embed.c", params = { "D", "MAX_SEQ" },
    fn = function(p) return string.format("sinusoidal_%d_s%d", p.D, p.MAX_SEQ) end,
    doc = function() return "x += PE[pos], PE(pos,2i) = sin(pos/10000^(2i/d)), PE(pos,2i+1) = cos(...)" end,
    vars = function(p)
      local bits, B, NH, W = M.position_blocks(p.MAX_SEQ, p.D)
      return { BITS = bits, B = B, MASK = B - 1, NH = NH, W = W, PAIRS = p.D // 2, ODD = p.D % 2 == 1,
        LAST = p.D - 1, LAST1 = p.D }
    end,
    flops = function(p, T) return 4 * T * p.D end,
  },
  learned = {
    file = "embed.c", section = function() return "positions" end, params = { "D" },
    fn = function(p) return string.format("learned_%d", p.D) end,
    doc = function() return "x += P[pos]" end,
    vars = function() return { TABLE = "P", TABLE_DOC = "the learned positions" } end,
    flops = function(p, T) return T * p.D end,
  },
  token_type = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("token_type_%d", p.D) end,
    doc = function() return "x += TT[0], the token type 0 of every position" end,
    flops = function(p, T) return T * p.D end,
  },
  linear = {
    file = "linear.c", params = { "IN", "OUT", "BIAS", "ACC", "RELU", "ISA", "NR", "DTYPE" },
    fn = function(p)
      return string.format("linear_%dx%d%s%s%s", p.IN, p.OUT, p.BIAS and "" or "_nobias", p.RELU and "_relu" or "",
        p.ACC and "_add" or "")
    end,
    doc = function(p)
      local f = p.BIAS and "x W^T + b" or "x W^T"
      if p.RELU then f = "max(0, " .. f .. ")" end
      return p.ACC and "y += " .. f or "y = " .. f
    end,
    vars = function(p)
      local flags = {}
      if p.ACC then flags[#flags + 1] = "FF_ACC" end
      if p.RELU then flags[#flags + 1] = "FF_RELU" end
      return { PANELS = (p.OUT + p.NR - 1) // p.NR, FLAGS = #flags > 0 and table.concat(flags, " | ") or "0",
        SPLIT_T = M.split_rows(p.IN, p.OUT, p.DTYPE), KERNEL = "ff_linear" .. M.KERNEL_SUFFIX[p.DTYPE] .. "_" .. p.ISA,
        STORED = ({ f32 = "", bf16 = " as bfloat16", int8 = " as int8 (a scale per 32 inputs)",
          i8 = " as int8 (a scale per column)", b16 = " as bfloat16 pairs of k" })[p.DTYPE],
        OPDOC_SHAPE = M.kinds.linear.doc(p):gsub("^y ", "") .. ", x [T, " .. p.IN .. "]" }
    end,
    flops = function(p, T) return 2 * T * p.IN * p.OUT end,
    calls = function(p) return { "linear" .. M.KERNEL_SUFFIX[p.DTYPE] } end,
  },
  -- compute int8 (kernels/int8.c): the same product on x's rows quantized
  -- into the op's buffer q and W's int8 panels (weight type i8)
  linear_i8 = compute_linear("int8", { "quantize_rows", "linear_i8" }),
  -- compute bf16 (kernels/bf16.c): x's rows rounded to bfloat16 into the op's
  -- buffer q, times W's bfloat16 pair panels (weight type b16)
  linear_b16 = compute_linear("bf16", { "bf16_rows", "linear_dpbf16" }),
  rope = {
    file = "mha.c", params = { "HEADS", "KV_HEADS", "DK", "LDX", "PAIRING", "MAX_SEQ" },
    fn = function(p)
      return string.format("rope_h%dx%d%s_ld%d%s_s%d", p.HEADS, p.DK, p.KV_HEADS ~= p.HEADS and "_kv" .. p.KV_HEADS or "",
        p.LDX, p.PAIRING == "interleaved" and "_interleaved" or "", p.MAX_SEQ)
    end,
    doc = function(p) return "rotary positions on q and k (" .. p.PAIRING .. " pairing)" end,
    vars = function(p) return rope_vars(p, "-", "+") end,
    flops = function(p, T) return 3 * T * (p.HEADS + p.KV_HEADS) * p.DK + 10 * T * p.DK end,
  },
  kv_store = {
    file = "mha.c", params = { "D", "KV", "LDX" },
    fn = function(p) return string.format("kv_store_%d%s", p.D, p.KV ~= 2 * p.D and "_kv" .. p.KV or "") end,
    doc = function() return "cache[pos0 + t] = k | v of row t" end,
    flops = function() return 0 end,
  },
  attention = {
    file = "mha.c", params = { "HEADS", "KV_HEADS", "DK", "LDQ", "LDK", "CAUSAL", "ISA" },
    fn = function(p)
      return string.format("attention_h%dx%d%s_q%d_kv%d%s", p.HEADS, p.DK,
        p.KV_HEADS ~= p.HEADS and "_g" .. p.KV_HEADS or "", p.LDQ, p.LDK, p.CAUSAL and "_causal" or "")
    end,
    doc = function(p)
      return "softmax(Q K^T / sqrt(d_k) + mask) V" .. (p.CAUSAL and ", causal" or "") ..
        (p.KV_HEADS ~= p.HEADS and string.format(", %d K/V heads", p.KV_HEADS) or "")
    end,
    vars = function(p)
      return { D = p.HEADS * p.DK, KVD = p.KV_HEADS * p.DK, SCALE = lit.float(1 / math.sqrt(p.DK)),
        GROUP_DOC = p.KV_HEADS ~= p.HEADS and string.format(" (%d K/V heads: head h reads K/V head h / %d)",
          p.KV_HEADS, p.HEADS // p.KV_HEADS) or "",
        CAUSAL_DOC = p.CAUSAL and " and keys j > q_pos0 + t (causal)" or "" }
    end,
    flops = function(p, T, Tk) -- causal: query t sees t + 1 of the T keys, (T + 1) / 2T of them on average
      local f = 4 * T * (Tk or T) * p.HEADS * p.DK
      if p.CAUSAL then f = f * (T + 1) / (2 * T) end
      return f
    end,
    calls = function() return { "sdpa" } end,
  },
  layernorm = norm_kind("layernorm", "LayerNorm", 8),
  rmsnorm = norm_kind("rmsnorm", "RMSNorm", 5),
  layernorm_train = norm_train_kind("layernorm", "LayerNorm", 8),
  rmsnorm_train = norm_train_kind("rmsnorm", "RMSNorm", 5),
  activation = {
    file = "ffn.c", section = function(p) return p.ACT end, params = { "N", "ACT", "ISA" },
    fn = function(p) return string.format("%s_%d", p.ACT, p.N) end,
    doc = function(p)
      return ({ relu = "h = max(0, h)", gelu = "h = h/2 (1 + erf(h/sqrt 2))",
        gelu_tanh = "h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))", silu = "h = h sigmoid(h)" })[p.ACT]
    end,
    flops = function(p, T) return 8 * T * p.N end,
    calls = function(p) return p.ACT == "relu" and {} or { p.ACT } end, -- relu: in the template
  },
  swiglu = {
    file = "ffn.c", params = { "N", "ISA" },
    fn = function(p) return string.format("swiglu_%d", p.N) end,
    doc = function() return "y = silu(gate) * up" end,
    vars = function(p) return { N2 = 2 * p.N } end,
    flops = function(p, T) return 6 * T * p.N end,
    calls = function() return { "swiglu" } end,
  },

  -- ---- training (gen/train.lua): the forward's extra kinds and every backward ----
  pack = {
    file = "linear.c", params = { "K", "N", "TRANS", "ISA", "NR" },
    fn = function(p) return string.format("pack_%dx%d%s", p.K, p.N, p.TRANS and "_t" or "") end,
    doc = function(p) return p.TRANS and "panels of W^T (the forward's)" or "panels of W (dX = dY W)" end,
    vars = function(p)
      return { PANELS = (p.N + p.NR - 1) // p.NR, LD = p.TRANS and p.K or p.N, TRANS_C = b(p.TRANS),
        WHAT = p.TRANS and string.format("W^T of W [%d, %d]", p.N, p.K) or string.format("W [%d, %d]", p.K, p.N) }
    end,
    flops = function() return 0 end,
    calls = function() return { "pack" } end,
  },
  -- a training step's nn.Linear: y is an activation the step has not touched for a while
  -- (FF_FETCH), its rows every LDY floats (the logits' are padded, gen/train.lua)
  linear_train = {
    file = "linear.c", params = { "IN", "OUT", "LDY", "BIAS", "ISA", "NR" },
    fn = function(p)
      return string.format("linear_%dx%d%s%s", p.IN, p.OUT, p.BIAS and "" or "_nobias",
        p.LDY ~= p.OUT and "_ld" .. p.LDY or "")
    end,
    doc = function(p) return p.BIAS and "y = x W^T + b" or "y = x W^T" end,
    vars = function(p)
      return { PANELS = (p.OUT + p.NR - 1) // p.NR, PADDED = p.LDY ~= p.OUT, SPLIT_T = M.split_rows(p.IN, p.OUT),
        KERNEL = (p.LDY ~= p.OUT and "ff_linear_ld_" or "ff_linear_") .. p.ISA,
        OPDOC_SHAPE = M.kinds.linear_train.doc(p):gsub("^y ", "") ..
        ", x [T, " .. p.IN .. "]" .. (p.LDY == p.OUT and "" or string.format(
          ", y's rows every %d floats (%d padded by %d: rows 2^n floats apart share cache sets)", p.LDY, p.OUT,
          p.LDY - p.OUT)) }
    end,
    flops = function(p, T) return 2 * T * p.IN * p.OUT end,
    calls = function() return { "linear" } end,
  },
  linear_backward = {
    file = "linear.c", params = { "IN", "OUT", "LDY", "BIAS", "DX", "ISA", "NR" },
    fn = function(p)
      return string.format("linear_backward_%dx%d%s%s%s", p.IN, p.OUT, p.BIAS and "" or "_nobias",
        p.DX == "add" and "_add" or p.DX == "none" and "_nodx" or "", p.LDY ~= p.OUT and "_ld" .. p.LDY or "")
    end,
    doc = function(p)
      return (p.DX == "none" and "" or p.DX == "add" and "dx += dy W, " or "dx = dy W, ") .. "dW += dy^T x" ..
        (p.BIAS and ", db += sum dy" or "")
    end,
    vars = function(p)
      return { DX_FLAGS = p.DX == "add" and "FF_ACC" or "0", SPLIT_T = M.split_rows(p.IN, p.OUT),
        DX_DOC = p.DX == "add" and "dx += dy W" or p.DX == "none" and "no dx" or "dx = dy W", BIAS_DOC = p.BIAS and " + b" or "",
        LDY_DOC = p.LDY ~= p.OUT and string.format(" (dy's rows every %d floats)", p.LDY) or "" }
    end,
    flops = function(p, T) return 4 * T * p.IN * p.OUT end,
    calls = function() return { "linear", "linear_ld", "linear_ta", "pack" } end,
  },
  dropout = {
    file = "train.c", params = { "ISA" },
    fn = function() return "dropout" end,
    doc = function() return "y = x, dropped (runtime/ff_dropout.h's mask of the site)" end,
    flops = function() return 0 end,
    calls = function() return { "dropout" } end,
  },
  residual = {
    file = "train.c", params = { "D", "ISA" },
    fn = function(p) return string.format("residual_%d", p.D) end,
    doc = function() return "z = x + drop(f)" end,
    flops = function(p, T) return T * p.D end,
    calls = function() return { "dropout" } end,
  },
  -- ROWS: the most rows a call has, in at most 64 chunks of 32 rows or more; PACKED: the rows
  -- are the source's packed (gen/train.lua), a chunk a sequence (BATCH of them at most)
  cross_entropy = {
    file = "train.c", params = { "VOCAB", "LD", "ROWS", "BATCH", "PACKED", "ISA" },
    fn = function(p) return string.format("cross_entropy_%d%s", p.VOCAB, p.LD ~= p.VOCAB and "_ld" .. p.LD or "") end,
    doc = function() return "CrossEntropyLoss(ignore_index, label_smoothing, reduction='sum')" end,
    vars = function(p)
      local chunk = math.max(32, (p.ROWS + 63) // 64)
      return { CHUNK = chunk, CHUNKS = p.PACKED and p.BATCH or (p.ROWS + chunk - 1) // chunk }
    end,
    flops = function(p, T) return 5 * T * p.VOCAB end,
    calls = function() return { "cross_entropy" } end,
  },
  attention_train = {
    file = "mha.c", params = { "HEADS", "KV_HEADS", "DK", "LDQ", "LDK", "CAUSAL", "ISA" },
    fn = function(p) return (M.kinds.attention.fn(p):gsub("^attention", "attention_train")) end,
    doc = function(p) return "P = softmax(Q K^T / sqrt(d_k) + mask) kept, drop(P) V" ..
      (p.CAUSAL and ", causal" or "") end,
    vars = function(p) return M.kinds.attention.vars(p) end,
    flops = function(p, T, Tk) return 4 * T * (Tk or T) * p.HEADS * p.DK end,
    calls = function() return { "attention_train", "attention_backward" } end,
  },
  attention_backward = {
    file = "mha.c", params = { "HEADS", "KV_HEADS", "DK", "LDQ", "LDK", "CAUSAL", "ISA" },
    fn = function(p) return (M.kinds.attention.fn(p):gsub("^attention", "attention_backward")) end,
    doc = function() return "dV = drop(P)^T dO, dS = P (dP - rowsum(P dP)), dQ = dS K, dK = dS^T Q" end,
    vars = function(p) return M.kinds.attention.vars(p) end,
    flops = function(p, T, Tk) return 8 * T * (Tk or T) * p.HEADS * p.DK end,
    calls = function() return { "attention_train", "attention_backward" } end,
  },
  rope_backward = {
    file = "mha.c", section = function() return "rope" end,
    params = { "HEADS", "KV_HEADS", "DK", "LDX", "PAIRING", "MAX_SEQ" },
    fn = function(p) return M.kinds.rope.fn(p) .. "_backward" end,
    doc = function() return "dq, dk rotated back (the rotation's transpose)" end,
    vars = function(p) return rope_vars(p, "+", "-") end,
    flops = function(p, T) return M.kinds.rope.flops(p, T) end,
  },
  activation_train = {
    file = "ffn.c", section = function(p) return activation_section(p, "_train") end, params = { "N", "ACT", "ISA" },
    fn = function(p) return string.format("%s_train_%d", p.ACT, p.N) end,
    doc = function(p) return "a = drop(" .. (p.ACT == "swiglu" and "silu(gate) * up" or p.ACT .. "(h)") .. "), h kept" end,
    vars = function(p) return { N2 = 2 * p.N, KERNEL = "ff_" .. p.ACT .. "_" .. p.ISA, FORMULA = POINTWISE[p.ACT] } end,
    flops = function(p, T) return 8 * T * p.N end,
    calls = function(p) return with_dropout(p.ACT == "relu" and {} or { p.ACT }) end,
  },
  -- LD: dh's row stride (gen/train.lua pads 2^n-ish rows; PADDED: the op goes row by row)
  activation_backward = {
    file = "ffn.c", section = function(p) return activation_section(p, "_backward") end,
    params = { "N", "ACT", "LD", "ISA" },
    fn = function(p)
      return string.format("%s_backward_%d", p.ACT, p.N) .. (p.LD ~= M.activation_width(p) and "_ld" .. p.LD or "")
    end,
    doc = function(p) return "dh = " .. p.ACT .. "'(h) drop(da)" .. dh_padding(p) end,
    vars = function(p)
      return { N2 = 2 * p.N, PADDED = p.LD ~= M.activation_width(p), PAD_DOC = dh_padding(p),
        KERNEL = "ff_" .. p.ACT .. "_backward_" .. p.ISA }
    end,
    flops = function(p, T) return 12 * T * p.N end,
    calls = function(p) return with_dropout(p.ACT == "relu" and {} or { p.ACT .. "_backward" }) end,
  },
  layernorm_backward = norm_backward_kind("layernorm", "LayerNorm", 16),
  rmsnorm_backward = norm_backward_kind("rmsnorm", "RMSNorm", 10),
  embed_backward = {
    file = "embed.c", params = { "D", "VOCAB", "SCALE" },
    fn = function(p) return string.format("embed_backward_%dx%d", p.VOCAB, p.D) end,
    doc = function() return "dE[token] += dx * scale" end,
    vars = function(p) return { SCALE = lit.float(p.SCALE) } end,
    flops = function(p, T) return 2 * T * p.D end,
  },
  learned_backward = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("learned_backward_%d", p.D) end,
    doc = function() return "dP[pos] += dx" end,
    flops = function(p, T) return T * p.D end,
  },
  token_type_backward = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("token_type_backward_%d", p.D) end,
    doc = function() return "dTT[0] += the sum of dx's rows" end,
    flops = function(p, T) return T * p.D end,
  },
}

-- The template variables of a kernel instance: FN, its params (floats as C
-- literals) and the kind's own vars.
function M.vars(kind, p)
  local k = M.kinds[kind]
  local v = { FN = k.fn(p) }
  for name, value in pairs(p) do
    if math.type(value) == "float" then v[name] = lit.float(value) else v[name] = value end
  end
  for name, value in pairs(k.vars and k.vars(p) or {}) do v[name] = value end
  return v
end

-- The kernels of kernels/ that a list of kernel instances ({ kind, params })
-- calls, each once, in the order first called.
function M.calls(list)
  local out, seen = {}, {}
  for _, k in ipairs(list) do
    local calls = M.kinds[k.kind].calls
    for _, name in ipairs(calls and calls(k.params) or {}) do
      if not seen[name] then out[#out + 1], seen[name] = name, true end
    end
  end
  return out
end

-- The template file and section of a kernel instance.
function M.template(kind, p)
  local k = M.kinds[kind]
  return k.file, k.section and k.section(p) or kind
end

-- A canonical key of a kernel instance: kind + its params, in declared order.
function M.key(kind, p)
  local k = M.kinds[kind]
  assert(k, "unknown op kind " .. tostring(kind))
  local parts = { kind }
  for _, name in ipairs(k.params) do
    local v = p[name]
    assert(v ~= nil, kind .. ": missing param " .. name)
    parts[#parts + 1] = name .. "=" .. tostring(type(v) == "boolean" and b(v) or v)
  end
  return table.concat(parts, ",")
end

return M

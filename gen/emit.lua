-- emit.lua: a plan -> C text: NAME.c (layout, stages, API, op kernels),
-- NAME_kernels.c (the kernels of kernels/ the model calls, which NAME.c
-- includes) and NAME.h (shapes, sizes, status codes, declarations).
-- Deterministic: the same description and options give byte-identical text.

local template = require("template")
local ops = require("ops")
local host = require("ff_host")
local lit = require("literal")
local library = require("library")

local M = {}

M.VERSION = host.version -- from the host (fixformer_version.h, from CMake's project version)

-- Text from outside (paths, the command line) as it may stand in a C
-- comment: printable, and no "*/" or "/*" to end or nest one.
function M.comment_text(s)
  s = s:gsub("[%c\127]", "?")
  return (s:gsub("%*/", "*?"):gsub("/%*", "?*"))
end

local function summary(c, P)
  local parts = { string.format("%s: %s, d_model %d, %d heads (d_k %d%s), d_ff %d", c.name, c.arch, c.d_model,
    c.heads, P.dk, c.kv_heads ~= c.heads and string.format(", %d K/V heads", c.kv_heads) or "", c.d_ff) }
  if c.arch == "encoder-decoder" then
    parts[#parts + 1] = string.format("%d+%d layers", c.encoder_layers, c.decoder_layers)
  else
    parts[#parts + 1] = string.format("%d layers", c.encoder_layers + c.decoder_layers)
  end
  parts[#parts + 1] = string.format("%s-norm %s%s", c.norm, c.norm_kind, c.final_norm and " + final norms" or "")
  parts[#parts + 1] = c.activation
  parts[#parts + 1] = c.positional .. " positions" ..
    (c.positional == "rope" and c.rope_pairing ~= "rotate_half" and " (" .. c.rope_pairing .. ")" or "")
  if c.vocab and not c.lm_head then
    parts[#parts + 1] = string.format("vocab %d, no output head (hidden states out)", c.vocab)
  elseif c.vocab then
    parts[#parts + 1] = string.format("vocab %d%s%s", c.vocab, c.tie_embeddings and " (tied head)" or "",
      c.head_bias and ", head bias" or "")
  else
    parts[#parts + 1] = "float inputs"
  end
  if not c.bias then parts[#parts + 1] = "no biases" end
  if c.vocab and c.token_types > 0 then parts[#parts + 1] = string.format("%d token types (type 0)", c.token_types) end
  if c.embed_norm then parts[#parts + 1] = "embedding norm" end
  return table.concat(parts, ", ")
end

-- The types (NAME.h) and the libc functions (NAME.c) generated code uses:
-- system headers, or declarations of what the JIT host hands over.
function M.types() return (template.render("model.h", "types", {}, { lines = false }):gsub("\n+$", "")) end
function M.libc() return (template.render("model.c", "libc", {}, { lines = false }):gsub("\n+$", "")) end

-- vars.F32, INT8, BF16C: whether the kernels of list (each's op kind at key)
-- call templates/model.c.in's linear, linear_i8, linear_dpbf16 helpers
local HELPER = { linear = "F32", linear_i8 = "INT8", linear_b16 = "BF16C" }
local function linear_helpers(vars, list, key)
  vars.F32, vars.INT8, vars.BF16C = false, false, false
  vars.LD, vars.STRIDES = vars.WSUFFIX == "", false -- f32 weights: ff_linear_ld; linear_ld: training's
  for _, k in ipairs(list) do
    if HELPER[k[key]] then vars[HELPER[k[key]]] = true end
  end
end

-- Kernels on their own, for the per-kernel tests and benchmarks: a list of
-- { kind, params } -> one translation unit with the types, the libc
-- declarations, each distinct kernel once, and for the i-th entry (from 0)
--   void (*const ff_kernel_<i>)(void) = (void (*)(void))<kernel>;
-- to look up and cast back to the kernel's type.
function M.kernel_unit(list)
  local parts, exports, seen = { M.types(), M.libc() }, {}, {}
  local isa
  for _, entry in ipairs(list) do
    assert(not isa or not entry[2].ISA or entry[2].ISA == isa, "kernel_unit: one ISA per unit")
    isa = isa or entry[2].ISA
  end
  isa = isa or "generic"
  parts[#parts + 1] = library.block(isa, nil, library.text(isa))
  -- one thread: the state and parallel helpers with no state to read
  local one = { NAME = "kernels", UNAME = "KERNELS", ISA = isa, NR = require("plan").NR[isa], SCRATCH = 0, SLOTS = 1,
    STANDALONE = true, ENCDEC = false, DECODER = false, WSUFFIX = "" }
  linear_helpers(one, list, 1)
  one.F32 = true
  parts[#parts + 1] = template.render("model.c", "state", one)
  parts[#parts + 1] = template.render("model.c", "parallel", one)
  parts[#parts + 1] = template.render("mha.c", "attend", one)
  for i, entry in ipairs(list) do
    local kind, params = entry[1], entry[2]
    ops.key(kind, params) -- the kind exists and every param is given
    local k = { kind = kind, params = params, fn = ops.kinds[kind].fn(params) }
    if not seen[k.fn] then
      seen[k.fn] = true
      local file, section = ops.template(kind, params)
      parts[#parts + 1] = template.render(file, section, ops.vars(kind, params))
    end
    exports[#exports + 1] = string.format("void (*const ff_kernel_%d)(void) = (void (*)(void))%s;", i - 1, k.fn)
  end
  parts[#parts + 1] = table.concat(exports, "\n") .. "\n"
  return table.concat(parts, "\n")
end

-- NAME_STACK_BYTES per ISA and weight type: kernels/isas.h's stack columns,
-- ff_host.isas[isa].stack = { f32 = { bound, measured }, quantized = { bound,
-- measured }, on = measured on }: the deepest call chain of the entry points
-- (the thread-pool tasks included) that tests/targets.py measures, with
-- headroom for other compilers and flags.  The code has no recursion, VLA or
-- alloca, and no frame grows with the model's shapes: the big ones are the
-- kernels' fixed blocks (bf16/int8: a block of dequantized weights, 4 * KC *
-- NR bytes: 2 KB generic, 16 KB and more for the SIMD ISAs; neon: also its
-- padded f32 block).

-- The template variables every section of NAME.c / NAME.h may use.
local function common_vars(P, opts)
  local c = P.config
  local uname = c.name:upper()
  local quantized = P.dtype ~= "f32" or P.compute ~= "f32" -- (the stack of those tiles: as a dequantized block)
  local stacks = host.isas[P.isa].stack
  local stack = stacks[quantized and "quantized" or "f32"]
  local v = {
    NAME = c.name, UNAME = uname, GUARD = uname .. "_H", VERSION = M.VERSION, SOURCE = M.comment_text(opts.source),
    SHA256 = opts.sha256, COMMAND = M.comment_text(opts.command), SUMMARY = summary(c, P), MAX_SEQ = c.max_seq,
    FLOPS = lit.grouped(P.flops), WEIGHT_FLOATS = P.weight_floats, WEIGHT_BYTES = 4 * P.weight_floats,
    STATE_BYTES = 4 * P.arena_floats, OUTPUT_FLOATS = P.output_floats, OUTPUT_BYTES = 4 * P.output_floats,
    ARENA_BYTES = 4 * P.arena_floats, NAIVE_BYTES = 4 * P.arena_naive_floats,
    STACK_BYTES = stack[1], STACK_MEASURED = string.format("%d bytes for %s %s code\n * (%s)", stack[2], P.isa,
      quantized and "bf16/int8" or "f32", stacks.on),
    LAYOUT_HASH = opts.layout_hash, D_MODEL = c.d_model, HEADS = c.heads, KV_HEADS = c.kv_heads, D_K = P.dk,
    D_FF = c.d_ff,
    ENCODER_LAYERS = c.encoder_layers, DECODER_LAYERS = c.decoder_layers, VOCAB = c.vocab or 0,
    OUT_DIM = P.out_dim, OUT_DOC = P.has_head and "logits" or "hidden states", TOKENS = c.vocab ~= nil,
    IN_MUL = c.vocab and "" or string.format(" * %d", c.d_model),
    INPUT_TYPE = c.vocab and "const int32_t" or "const float",
    INPUT_DOC = c.vocab and "token ids" or string.format("float inputs (x %d)", c.d_model),
    ENCDEC = c.arch == "encoder-decoder", DECODER = c.arch ~= "encoder", ISA = P.isa, NR = P.nr, STANDALONE = false,
    MAX_THREADS = P.max_threads, SCRATCH = P.scratch_per_thread, SLOTS = P.max_threads,
    DTYPE = P.dtype, QUANTIZED = P.dtype ~= "f32",
    WSUFFIX = ops.KERNEL_SUFFIX[P.dtype], LINES = opts.lines ~= false,
    COMPUTE_INT8 = P.compute == "int8", COMPUTE_BF16 = P.compute == "bf16",
  }
  linear_helpers(v, P.kernels or {}, "kind")
  v.INPUT = c.vocab and "tokens" or "input"
  v.INPUT_DECL = v.INPUT_TYPE .. " *" .. v.INPUT
  v.SRC_DECL = v.INPUT_TYPE .. " *src"
  v.TGT_DECL = v.INPUT_TYPE .. " *tgt"
  return v
end

-- the enum lines of the activation offsets
local function value_enum(P)
  local vl, width = {}, 0
  for _, v in ipairs(P.values) do width = math.max(width, #v.macro) end
  for _, v in ipairs(P.values) do
    vl[#vl + 1] = string.format("  %-" .. width .. "s = %d, /* [%d, %d] %s%s */", v.macro, v.offset, v.rows, v.cols,
      v.doc, v.persistent and "" or string.format(", ops %d..%d", v.first, v.last))
  end
  return table.concat(vl, "\n")
end

-- the enums of the weight and activation offsets
local function layout_enums(P)
  local wl, width = {}, 0
  for _, w in ipairs(P.weights) do width = math.max(width, #w.macro) end
  for _, w in ipairs(P.weights) do
    local shape = w.cols > 0 and string.format("[%d, %d]", w.rows, w.cols) or string.format("[%d]", w.rows)
    if w.packing == "panels" then
      shape = string.format("rows %d..%d of [*, %d], W^T in panels of %d", w.row0, w.row0 + w.rows - 1, w.cols, P.nr)
      if w.row0 == 0 then shape = string.format("[%d, %d], W^T in panels of %d", w.rows, w.cols, P.nr) end
    end
    if w.type ~= "f32" then shape = shape .. ", " .. w.type end
    if w.folded then shape = shape .. ", rows times " .. w.folded .. " (folded)" end
    wl[#wl + 1] = string.format("  %-" .. width .. "s = %d, /* %s %s */", w.macro, w.offset, w.name, shape)
  end
  return table.concat(wl, "\n"), value_enum(P)
end

-- Each distinct kernel of the program rendered from its template.
local function render_kernels(P, lines)
  local rendered = {}
  for i, k in ipairs(P.kernels) do
    local file, name = ops.template(k.kind, k.params)
    rendered[i] = template.render(file, name, ops.vars(k.kind, k.params), { lines = lines })
  end
  return rendered
end

-- The op kernels' declarations (their definitions are in the kernel library
-- at the end): "static void FN(...);" taken from each rendered kernel.
local function kernel_declarations(P, rendered)
  local out = { "/* ---- the op kernels the stages call (defined in the kernel library at the end) ---- */" }
  for i, k in ipairs(P.kernels) do
    local params = rendered[i]:match("\nstatic void " .. k.fn .. "(%b())")
    assert(params, "emit: no definition of " .. k.fn .. " in its template")
    out[#out + 1] = "static void " .. k.fn .. params:gsub("\n%s+", "\n    ") .. ";"
  end
  return table.concat(out, "\n") .. "\n"
end

-- One stage function: a comment line per sub-layer, a call per op.
local function stage_text(st, vars)
  local body, uses_w = {}, false
  for _, o in ipairs(st.ops) do
    if o.sublayer then
      body[#body + 1] = template.render("model.c", "sublayer", { TITLE = o.sublayer }, { lines = false })
    end
    local call = o.kernel.fn .. "(" .. table.concat(o.args, ", ") .. ")"
    if call:find("w %+") then uses_w = true end
    body[#body + 1] = template.render("model.c", "op",
      { OP = o.name, SHAPE = o.shape, OPDOC = o.doc, CALL = call, FLOPS = lit.grouped(o.flops) }, { lines = false })
  end
  if not uses_w then table.insert(body, 1, "  (void)w; /* this stage reads no weights */\n") end
  return template.render("model.c", "stage",
    vars({ FN = st.name, DOC = st.doc, PARAMS = st.params, BODY = table.concat(body):gsub("\n\n$", "\n"),
      FLOPS = lit.grouped(st.flops) }),
    { lines = false })
end

-- opts: source (the description's path, as the banner shows it), sha256,
-- command, layout_hash, lines (false: no #line directives).
-- NAME.c opens on the model: prelude, layout enums, the stages, then the
-- state and the API (wrappers), and last the kernels: those of kernels/ (an
-- #include of NAME_kernels.c), the parallel helpers and the op kernels.
function M.emit(P, opts)
  local c = P.config
  local common = common_vars(P, opts)
  local function vars(extra)
    local v = {}
    for k, x in pairs(common) do v[k] = x end
    for k, x in pairs(extra or {}) do v[k] = x end
    return v
  end
  local function section(name, extra) return template.render("model.c", name, vars(extra), { lines = false }) end

  -- header: the API of the architecture (templates/model.h.in, section api_*)
  local arch_tag = ({ encoder = "encoder", ["decoder-only"] = "decoder", ["encoder-decoder"] = "encdec" })[c.arch]
  local api = template.render("model.h", "api_" .. arch_tag, vars(), { lines = false })
  local header = template.render("model.h", "header", vars({ API = api:gsub("\n+$", ""), TYPES = M.types() }),
    { lines = false })

  local lines = opts.lines ~= false
  local rendered = render_kernels(P, lines)
  local calls = ops.calls(P.kernels)
  local kernel_vars = { KERNEL_FILE = c.name .. "_kernels.c", KERNELS = library.names(P.isa, calls, " *   ") }
  local weight_enum, value_enum = layout_enums(P)
  local parts = { section("prelude", { LIBC = M.libc() }),
    section("layout", { WEIGHT_ENUM = weight_enum, VALUE_ENUM = value_enum }), kernel_declarations(P, rendered) }
  for _, st in ipairs(P.stages) do parts[#parts + 1] = stage_text(st, vars) end
  for _, name in ipairs({ "state", "checks", "bind", "forward_" .. arch_tag }) do parts[#parts + 1] = section(name) end
  if c.arch == "decoder-only" then parts[#parts + 1] = section("decode_decoder") end
  parts[#parts + 1] = section("library", kernel_vars):gsub("\n+$", "\n") ..
    library.block(P.isa, calls, '#include "' .. kernel_vars.KERNEL_FILE .. '"')
  parts[#parts + 1] = template.render("model.c", "parallel", vars(), { lines = lines }):gsub("\n+$", "") .. "\n\n" ..
    template.render("mha.c", "attend", vars(), { lines = lines })
  parts[#parts + 1] = table.concat(rendered, "\n")
  for i, text in ipairs(parts) do parts[i] = text:gsub("\n+$", "") end -- one blank line between parts
  kernel_vars.TEXT = library.text(P.isa, calls, lines):gsub("\n+$", "")
  return { header = header, source = table.concat(parts, "\n\n") .. "\n",
    kernels = section("kernel_file", kernel_vars) }
end

-- ---- training code (gen/train.lua's program) -------------------------------------------

-- One stage function of the training program: a call per op (a loop over
-- the batch's sequences s for per-sequence ops; over s and its first row r0
-- for the packed encoder's), after the sizes its calls use: n sequences,
-- their lengths S (source) and T, rows RS = n S, RT = n T, and RP, the
-- source's tokens without padding (the packed encoder's rows).
local SIZES = { { "n", "b->batch" }, { "S", "b->src_len" }, { "T", nil }, { "RS", "n * S", "n", "S" },
  { "RT", "n * T", "n", "T" }, { "RP", "src_rows(b)" } }
local LOOPS = { s = "for (int s = 0; s < n; s++)\n    ",
  packed = "for (int s = 0, r0 = 0; s < n; r0 += src_length(b, s), s++)\n    " }

local function train_stage_text(st, P)
  local body, used = {}, {}
  for _, o in ipairs(st.ops) do
    local call = o.kernel.fn .. "(" .. table.concat(o.args, ", ") .. ")"
    if o.loop then call = LOOPS[o.loop] .. call end
    for word in ((o.loop and LOOPS[o.loop] or "") .. table.concat(o.args, " ")):gmatch("[%a_][%w_]*") do
      used[word] = true
    end
    body[#body + 1] = template.render("model.c", "op",
      { OP = o.name, SHAPE = o.shape, OPDOC = o.doc, CALL = call, FLOPS = lit.grouped(o.flops) }, { lines = false })
  end
  for i = #SIZES, 1, -1 do -- RS needs n and S
    local z = SIZES[i]
    if used[z[1]] then for j = 3, #z do used[z[j]] = true end end
  end
  local decl = {}
  for _, z in ipairs(SIZES) do
    if used[z[1]] then
      decl[#decl + 1] = z[1] .. " = " .. (z[2] or (P.two_stacks and "b->tgt_len" or "b->src_len"))
    end
  end
  local pre = {}
  if #decl > 0 then pre[1] = "  const int " .. table.concat(decl, ", ") .. ";\n" end
  local params = { "const float *restrict w", "float *restrict state" }
  for p in (st.params or ""):gmatch("[^,]+") do params[#params + 1] = p:gsub("^%s+", "") end
  for _, p in ipairs(params) do
    local name = p:match("([%a_][%w_]*)$")
    if not used[name] and name ~= "state" then pre[#pre + 1] = "  (void)" .. name .. ";\n" end
  end
  return template.render("train.c", "stage", { FN = st.name, DOC = st.doc, PARAMS = table.concat(params, ", "),
    BODY = table.concat(pre) .. table.concat(body):gsub("\n\n$", "\n"), FLOPS = lit.grouped(st.flops) },
    { lines = false })
end

-- P: gen/train.lua's program.  -> { header (NAME_train.h), source
-- (NAME_train.c), kernels (NAME_train_kernels.c) }; opts as emit's.
function M.emit_train(P, opts)
  local c = P.config
  local train = require("train")
  local uname = c.name:upper()
  local calls = ops.calls(P.kernels)
  for _, k in ipairs({ "sum_squares", "adamw" }) do calls[#calls + 1] = k end -- (the step's clipping and AdamW)
  local encdec = P.two_stacks
  local stage_flops = function(name) return P.stage_by[name] and P.stage_by[name].flops or 0 end
  local scratch = 0
  for _, v in ipairs(P.values) do
    if v.name == "lin_scratch" or v.name == "attn_scratch" then scratch = scratch + v.floats end
  end
  local v = {
    NAME = c.name, UNAME = uname, GUARD = uname .. "_TRAIN_H", VERSION = M.VERSION, SOURCE = M.comment_text(opts.source),
    SHA256 = opts.sha256, COMMAND = M.comment_text(opts.command), SUMMARY = summary(c, P), ISA = P.isa, NR = P.nr,
    BATCH = P.B, SRC = P.S, TGT = encdec and P.T or 0, VOCAB = c.vocab, PARAMS = P.param_floats,
    TENSORS = #P.params, STATE_BYTES = 4 * P.arena_floats,
    SCRATCH_BYTES = 4 * scratch, ARENA_BYTES = 4 * (P.arena_floats - scratch),
    NAIVE_BYTES = 4 * (P.arena_naive_floats - scratch), MAX_THREADS = P.max_threads,
    FLOPS = lit.grouped(P.flops), FORWARD_FLOPS = lit.grouped(stage_flops("forward")),
    LOSS_FLOPS = lit.grouped(stage_flops("loss")), BACKWARD_FLOPS = lit.grouped(stage_flops("backward")),
    SHAPE_DOC = encdec and string.format("%d source and %d target positions", P.S, P.T) or
      string.format("%d positions", P.S),
    LABELS_DOC = encdec and ": tgt_len" or "", ENCDEC = encdec, LINES = opts.lines ~= false,
    TGT_NULL = encdec and " || !b->tgt" or "",
    TGT_LEN_CHECK = encdec and " || b->tgt_len < 1 || b->tgt_len > " .. uname .. "_TRAIN_TGT_LEN" or "",
    LABEL_LEN = encdec and "tgt_len" or "src_len", SLOT = P.attn_slot, SLOTS = P.max_threads,
    PAD_LABEL_DOC = encdec and "" or ", a label past src_lengths that is not ignore_index",
    STANDALONE = false, DECODER = false, WSUFFIX = "", FOLDS = #P.folds > 0, FOLD_COUNT = #P.folds,
    KEPT = P.recompute and "The forward keeps each sub-layer's input; the backward runs the sub-layer's ops again "
      .. "(--recompute)." or "The forward keeps every activation the backward reads.",
    KEPT_DETAIL = P.recompute and "The forward keeps each sub-layer's input; the backward runs the sub-layer's\n"
      .. " * ops again before their backward (--recompute)." or "The forward keeps what the backward reads (every\n"
      .. " * sub-layer's input, q | k | v, the attention weights, the norms' inputs, the hidden layers)."
  }
  local folds = {}
  for _, f in ipairs(P.folds) do
    folds[#folds + 1] = string.format("  /* %s into %s */\n  {%s, %s, %s, %d, %d, %d},", f.scale.name, f.weight.name,
      f.scale.macro, f.weight.macro, f.bias and f.bias.macro or "0", f.weight.rows, f.weight.cols, f.bias and 1 or 0)
  end
  v.FOLD_TABLE = table.concat(folds, "\n")
  local zero = {}
  for _, z in ipairs(P.grad_zero) do
    zero[#zero + 1] = string.format("  {%d, %d}, /* %s%s */", z.offset, z.floats, z.first,
      z.last ~= z.first and " .. " .. z.last or "")
  end
  v.ZERO, v.ZERO_COUNT, v.ZERO_TABLE = #zero > 0, #zero, table.concat(zero, "\n")
  local function section(name, extra, lines)
    local x = {}
    for k, val in pairs(v) do x[k] = val end
    for k, val in pairs(extra or {}) do x[k] = val end
    return template.render("train.c", name, x, { lines = lines or false })
  end
  local header = section("header", { TYPES = M.types() })

  local lines = opts.lines ~= false
  local rendered = render_kernels(P, lines)
  local pl, width = {}, 0
  for _, t in ipairs(P.params) do width = math.max(width, #t.macro) end
  local tensors = {}
  for _, t in ipairs(P.params) do
    pl[#pl + 1] = string.format("  %-" .. width .. "s = %d, /* %s [%s] */", t.macro, t.offset, t.name,
      t.cols > 0 and t.rows .. ", " .. t.cols or t.rows)
    tensors[#tensors + 1] = string.format('  {"%s", %s, %d, %d},', t.name, t.macro, t.numel, t.kind)
  end
  local kernel_file = c.name .. "_train_kernels.c"
  local parts = { section("prelude", { LIBC = section("libc"):gsub("\n+$", "") }),
    section("layout", { PARAM_ENUM = table.concat(pl, "\n"), VALUE_ENUM = value_enum(P),
      TENSOR_TABLE = table.concat(tensors, "\n") }) }
  local tab = train.position_table(P)
  if tab then
    parts[#parts + 1] = section("table", { TABLE_NAME = tab.name, TABLE_DOC = tab.doc, TABLE_ROWS = tab.rows,
      TABLE_COLS = tab.cols, TABLE_FLOATS = #tab.values, TABLE_DATA = lit.table_lines(tab.values, lit.float) })
  end
  parts[#parts + 1] = kernel_declarations(P, rendered)
  for _, name in ipairs({ "forward", "loss", "backward" }) do
    parts[#parts + 1] = train_stage_text(P.stage_by[name], P)
  end
  -- the state's threads: the inference code's section, for NAME_train
  parts[#parts + 1] = template.render("model.c", "state", { NAME = c.name .. "_train", UNAME = uname .. "_TRAIN",
    STANDALONE = false, ENCDEC = false, DECODER = false }, { lines = false })
  parts[#parts + 1] = section("api")
  local kvars = { KERNEL_FILE = kernel_file, KERNELS = library.names(P.isa, calls, " *   "), NAME = c.name .. "_train",
    ISA = P.isa, VERSION = M.VERSION, LINES = lines }
  parts[#parts + 1] = template.render("model.c", "library", kvars, { lines = false }):gsub("\n+$", "\n") ..
    library.block(P.isa, calls, '#include "' .. kernel_file .. '"')
  parts[#parts + 1] = template.render("model.c", "parallel", { ISA = P.isa, NR = P.nr, WSUFFIX = "", F32 = true,
    INT8 = false, BF16C = false, LD = true, STRIDES = true }, { lines = lines })
  parts[#parts + 1] = section("helpers", nil, lines)
  parts[#parts + 1] = table.concat(rendered, "\n")
  for i, text in ipairs(parts) do parts[i] = text:gsub("\n+$", "") end
  kvars.TEXT = library.text(P.isa, calls, lines):gsub("\n+$", "")
  return { header = header, source = table.concat(parts, "\n\n") .. "\n",
    kernels = template.render("model.c", "kernel_file", kvars, { lines = false }) }
end

-- The canonical text of the weight layout; its sha256 is the layout hash.
function M.layout_text(P)
  local lines = { "fixformer weight layout 3" } -- 3: two-level position tables
  for _, w in ipairs(P.weights) do
    lines[#lines + 1] = string.format("%s %d %d %d %d %s%s%s", w.name, w.offset, w.row0, w.rows, w.cols, w.packing,
      w.packing == "panels" and P.nr or "", w.type ~= "f32" and " " .. w.type or "")
  end
  lines[#lines + 1] = "total " .. P.weight_floats
  return table.concat(lines, "\n") .. "\n"
end

return M

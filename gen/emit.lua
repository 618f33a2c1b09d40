-- emit.lua: a plan -> C text: NAME.c (kernels, layout, stages, API) and
-- NAME.h (shapes, sizes, status codes, declarations).  Deterministic: the
-- same description and options give byte-identical text.

local template = require("template")
local ops = require("ops")

local M = {}

M.VERSION = ff_version -- from the host (fixformer_version.h, from CMake's project version)

-- Text from outside (paths, the command line) as it may stand in a C
-- comment: printable, and no "*/" or "/*" to end or nest one.
function M.comment_text(s)
  s = s:gsub("[%c\127]", "?")
  return (s:gsub("%*/", "*?"):gsub("/%*", "?*"))
end

-- a float constant that round-trips through float32
local function float_lit(x)
  local f = string.unpack("<f", string.pack("<f", x))
  local s = string.format("%.9g", f)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s .. "f"
end

local function double_lit(x)
  local s = string.format("%.17g", x)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

-- numbers grouped like 12,345,678
local function grouped(n)
  local s = string.format("%.0f", n)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- 8 constants per line, indented
local function table_lines(values, fmt)
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

local function summary(c, P)
  local parts = { string.format("%s: %s, d_model %d, %d heads (d_k %d), d_ff %d", c.name, c.arch, c.d_model,
    c.heads, P.dk, c.d_ff) }
  if c.arch == "encoder-decoder" then
    parts[#parts + 1] = string.format("%d+%d layers", c.encoder_layers, c.decoder_layers)
  else
    parts[#parts + 1] = string.format("%d layers", c.encoder_layers + c.decoder_layers)
  end
  parts[#parts + 1] = string.format("%s-norm %s%s", c.norm, c.norm_kind, c.final_norm and " + final norms" or "")
  parts[#parts + 1] = c.activation
  parts[#parts + 1] = c.positional .. " positions"
  if c.vocab then
    parts[#parts + 1] = string.format("vocab %d%s", c.vocab, c.tie_embeddings and " (tied head)" or "")
  else
    parts[#parts + 1] = "float inputs"
  end
  if not c.bias then parts[#parts + 1] = "no biases" end
  return table.concat(parts, ", ")
end

-- The params of one kernel instance, as template variables (everything a
-- kernel needs is in its params: a kernel does not depend on the model).
local function kernel_vars(k)
  local p, v = k.kernel and k.kernel.params or k.params, { FN = k.fn }
  for name, value in pairs(p) do
    if type(value) == "number" and math.type(value) == "float" then v[name] = float_lit(value)
    else v[name] = value end
  end
  if k.kind == "embed" then
    v.SCALE = float_lit(p.SCALE)
    v.PANELS = p.PANEL > 0
  end
  if k.kind == "linear" then
    v.PANELS = (p.OUT + p.NR - 1) // p.NR
    local flags = {}
    if p.ACC then flags[#flags + 1] = "FF_ACC" end
    if p.RELU then flags[#flags + 1] = "FF_RELU" end
    v.FLAGS = #flags > 0 and table.concat(flags, " | ") or "0"
    v.OPDOC_SHAPE = ops.kinds.linear.doc(p):gsub("^y ", "") .. ", x [T, " .. p.IN .. "]"
  end
  if k.kind == "attention" then
    v.D = p.HEADS * p.DK
    v.SCALE = float_lit(1 / math.sqrt(p.DK))
    v.CAUSAL_DOC = p.CAUSAL and " and keys j > q_pos0 + t (causal)" or ""
  end
  if k.kind == "layernorm" or k.kind == "rmsnorm" then v.EPS = double_lit(p.EPS) end
  if k.kind == "sinusoidal" then
    v.HALF = (p.D + 1) // 2
    v.ODD = p.D % 2 == 1
    local f = {}
    for i = 0, v.HALF - 1 do f[#f + 1] = 1 / 10000 ^ (2 * i / p.D) end
    v.FREQS = table_lines(f, double_lit)
  end
  if k.kind == "rope" then
    v.HALF = p.DK // 2
    v.D = p.HEADS * p.DK
    v.D2 = 2 * v.D
    v.HEADS2 = 2 * p.HEADS
    v.THETA_DOC = double_lit(p.THETA)
    local f = {}
    for i = 0, v.HALF - 1 do f[#f + 1] = 1 / p.THETA ^ (2 * i / p.DK) end
    v.FREQS = table_lines(f, float_lit)
  end
  if k.kind == "kv_store" then v.KV = 2 * p.D end
  if k.kind == "swiglu" then v.N2 = 2 * p.N end
  return v
end

local function section_of(k)
  local p = k.params
  if k.kind == "activation" then return p.ACT end
  return k.kind
end

-- The ISA's matrix kernels (kernels/gemm_ISA.c): their text, or
-- under FIXFORMER_JIT the declarations of the host's SIMD builds of them.
-- The library on its own: gemm_ISA.c with the text of each shared driver it
-- includes (#include "NAME.c": kernels/drivers.c, plain.c, attention.c) in
-- place of the #include line, followed by a #line back to the ISA's file:
-- what the host compiles from the files, and the cc engine builds once as a
-- shared library.
function M.kernel_library(isa)
  local path = "kernels/gemm_" .. isa .. ".c"
  local out, n = {}, 0
  for line in (ff_read_template(path):gsub("\n+$", "") .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local name = line:match('^#include "([%w_]+%.c)"$')
    if name then
      out[#out + 1] = '#line 1 "kernels/' .. name .. '"'
      out[#out + 1] = (ff_read_template("kernels/" .. name):gsub("\n+$", ""))
      out[#out + 1] = string.format('#line %d "%s"', n + 1, path)
    else
      out[#out + 1] = line
    end
  end
  return table.concat(out, "\n")
end

function M.matrix_kernels(isa)
  local path = "kernels/gemm_" .. isa .. ".c"
  local text = M.kernel_library(isa)
  local decl = string.format([[
void ff_linear_%s(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
void ff_matmul_%s(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
    const float *bias, float alpha, int flags);
void ff_attention_%s(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads, int dk,
    int h0, int h1, int causal, int q_pos0, float scale, float *scratch, float *out);
void ff_layernorm_%s(const float *x, int T, int D, const float *gamma, const float *beta, double eps, float *y);
void ff_rmsnorm_%s(const float *x, int T, int D, const float *gamma, double eps, float *y);
void ff_gelu_%s(float *h, size_t n);
void ff_gelu_tanh_%s(float *h, size_t n);
void ff_swiglu_%s(const float *h, int T, int N, float *a);]], isa, isa, isa, isa, isa, isa, isa, isa)
  return table.concat({
    "/* ---- matrix kernels (" .. path .. ") ---- */",
    "#if defined(FIXFORMER_JIT) || defined(FF_EXTERN_KERNELS) /* built apart: the fixformer host's, or a library */",
    "#define FF_ACC 1  /* C += the product instead of C = */",
    "#define FF_RELU 2 /* then C = max(0, C) */",
    decl,
    "#else",
    "#if defined(__GNUC__) || defined(__TINYC__) /* a model calls some of them */",
    "#define FF_KERNEL static inline __attribute__((unused))",
    "#else",
    "#define FF_KERNEL static inline",
    "#endif",
    string.format('#line 1 "%s"', path),
    text,
    "#endif",
  }, "\n") .. "\n"
end

-- Kernels in the order the program first uses them.
function M.kernels(P)
  local out = {}
  for _, k in ipairs(P.kernels) do
    out[#out + 1] = template.render(ops.kinds[k.kind].file, section_of(k), kernel_vars(k))
  end
  return table.concat(out, "\n")
end

-- The types (NAME.h) and the libc functions (NAME.c) generated code uses:
-- system headers, or declarations of what the JIT host hands over.
function M.types() return (template.render("model.h", "types", {}, { lines = false }):gsub("\n+$", "")) end
function M.libc() return (template.render("model.c", "libc", {}, { lines = false }):gsub("\n+$", "")) end

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
  parts[#parts + 1] = M.matrix_kernels(isa)
  -- one thread: the helpers of the threads section with no state to read
  parts[#parts + 1] = template.render("model.c", "threads", { NAME = "kernels", UNAME = "KERNELS", ISA = isa,
    NR = require("plan").NR[isa], SCRATCH = 0, SLOTS = 1, STANDALONE = true, ENCDEC = false, DECODER = false })
  for i, entry in ipairs(list) do
    local kind, params = entry[1], entry[2]
    ops.key(kind, params) -- the kind exists and every param is given
    local k = { kind = kind, params = params, fn = ops.kinds[kind].fn(params) }
    if not seen[k.fn] then
      seen[k.fn] = true
      parts[#parts + 1] = template.render(ops.kinds[kind].file, section_of(k), kernel_vars(k))
    end
    exports[#exports + 1] = string.format("void (*const ff_kernel_%d)(void) = (void (*)(void))%s;", i - 1, k.fn)
  end
  parts[#parts + 1] = table.concat(exports, "\n") .. "\n"
  return table.concat(parts, "\n")
end

-- opts: source (description path as given), sha256, command, layout_hash
function M.emit(P, opts)
  local c = P.config
  local uname = c.name:upper()
  local common = {
    NAME = c.name, UNAME = uname, GUARD = uname .. "_H", VERSION = M.VERSION, SOURCE = M.comment_text(opts.source),
    SHA256 = opts.sha256, COMMAND = M.comment_text(opts.command), SUMMARY = summary(c, P), MAX_SEQ = c.max_seq,
    FLOPS = grouped(P.flops), WEIGHT_FLOATS = P.weight_floats, WEIGHT_BYTES = 4 * P.weight_floats,
    STATE_BYTES = 4 * P.arena_floats, ARENA_BYTES = 4 * P.arena_floats, NAIVE_BYTES = 4 * P.arena_naive_floats,
    LAYOUT_HASH = opts.layout_hash, D_MODEL = c.d_model, HEADS = c.heads, D_K = P.dk, D_FF = c.d_ff,
    ENCODER_LAYERS = c.encoder_layers, DECODER_LAYERS = c.decoder_layers, VOCAB = c.vocab or 0,
    OUT_DIM = P.out_dim, OUT_DOC = c.vocab and "logits" or "hidden states", TOKENS = c.vocab ~= nil,
    IN_MUL = c.vocab and "" or string.format(" * %d", c.d_model),
    INPUT_TYPE = c.vocab and "const int32_t" or "const float",
    INPUT_DOC = c.vocab and "token ids" or string.format("float inputs (x %d)", c.d_model),
    ENCDEC = c.arch == "encoder-decoder", DECODER = c.arch ~= "encoder", ISA = P.isa, NR = P.nr, STANDALONE = false,
    MAX_THREADS = P.max_threads,
  }
  local function vars(extra)
    local v = {}
    for k, x in pairs(common) do v[k] = x end
    for k, x in pairs(extra or {}) do v[k] = x end
    return v
  end
  local input_name = c.vocab and "tokens" or "input"
  common.INPUT = input_name
  common.INPUT_DECL = common.INPUT_TYPE .. " *" .. input_name
  common.SRC_DECL = common.INPUT_TYPE .. " *src"
  common.TGT_DECL = common.INPUT_TYPE .. " *tgt"

  -- header: the API of the architecture (templates/model.h.in, section api_*)
  local arch_tag = ({ encoder = "encoder", ["decoder-only"] = "decoder", ["encoder-decoder"] = "encdec" })[c.arch]
  local api = template.render("model.h", "api_" .. arch_tag, vars(), { lines = false })
  local header = template.render("model.h", "header", vars({ API = api:gsub("\n+$", ""), TYPES = M.types() }),
    { lines = false })

  -- source: prelude, layout, threads, kernels (template text), stages (plan text)
  local parts = { template.render("model.c", "prelude", vars({ LIBC = M.libc() }), { lines = false }) }
  local function back_to_this_file() -- #line for plan text after template text
    local _, lines = table.concat(parts, "\n"):gsub("\n", "")
    parts[#parts + 1] = string.format('#line %d "%s.c"\n', lines + 3, c.name)
  end
  local wl, width = {}, 0
  for _, w in ipairs(P.weights) do width = math.max(width, #w.macro) end
  for _, w in ipairs(P.weights) do
    local shape = w.cols > 0 and string.format("[%d, %d]", w.rows, w.cols) or string.format("[%d]", w.rows)
    if w.packing == "panels" then
      shape = string.format("rows %d..%d of [*, %d], W^T in panels of %d", w.row0, w.row0 + w.rows - 1, w.cols, P.nr)
      if w.row0 == 0 then shape = string.format("[%d, %d], W^T in panels of %d", w.rows, w.cols, P.nr) end
    end
    wl[#wl + 1] = string.format("  %-" .. width .. "s = %d, /* %s %s */", w.macro, w.offset, w.name, shape)
  end
  local vl = {}
  width = 0
  for _, v in ipairs(P.values) do width = math.max(width, #v.macro) end
  for _, v in ipairs(P.values) do
    vl[#vl + 1] = string.format("  %-" .. width .. "s = %d, /* [%d, %d] %s%s */", v.macro, v.offset, v.rows, v.cols,
      v.doc, v.persistent and "" or string.format(", ops %d..%d", v.first, v.last))
  end
  parts[#parts + 1] = template.render("model.c", "layout",
    vars({ WEIGHT_ENUM = table.concat(wl, "\n"), VALUE_ENUM = table.concat(vl, "\n") }), { lines = false })
  parts[#parts + 1] = M.matrix_kernels(P.isa)
  parts[#parts + 1] = template.render("model.c", "threads",
    vars({ SCRATCH = P.scratch_per_thread, SLOTS = P.max_threads }))
  parts[#parts + 1] = "/* ---- kernels (templates/) ---- */\n"
  parts[#parts + 1] = M.kernels(P)
  back_to_this_file()
  for _, st in ipairs(P.stages) do
    local body, uses_w = {}, false
    for _, o in ipairs(st.ops) do
      local call = o.kernel.fn .. "(" .. table.concat(o.args, ", ") .. ")"
      if call:find("w %+") then uses_w = true end
      body[#body + 1] = template.render("model.c", "op",
        { OP = o.name, SHAPE = o.shape, OPDOC = o.doc, CALL = call }, { lines = false })
    end
    if not uses_w then table.insert(body, 1, "  (void)w; /* this stage reads no weights */\n") end
    parts[#parts + 1] = template.render("model.c", "stage",
      vars({ FN = st.name, DOC = st.doc, PARAMS = st.params, BODY = table.concat(body) }), { lines = false })
  end
  parts[#parts + 1] = template.render("model.c", "checks", vars(), { lines = false })
  parts[#parts + 1] = template.render("model.c", "bind", vars(), { lines = false })
  parts[#parts + 1] = template.render("model.c", "forward_" .. arch_tag, vars(), { lines = false })
  if c.arch == "decoder-only" then
    parts[#parts + 1] = template.render("model.c", "decode_decoder", vars(), { lines = false })
  end
  return { header = header, source = table.concat(parts, "\n") }
end

-- The canonical text of the weight layout; its sha256 is the layout hash.
function M.layout_text(P)
  local lines = { "fixformer weight layout 2" }
  for _, w in ipairs(P.weights) do
    lines[#lines + 1] = string.format("%s %d %d %d %d %s%s", w.name, w.offset, w.row0, w.rows, w.cols, w.packing,
      w.packing == "panels" and P.nr or "")
  end
  lines[#lines + 1] = "total " .. P.weight_floats
  return table.concat(lines, "\n") .. "\n"
end

return M

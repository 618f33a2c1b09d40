-- generate.lua: the generator's entry point, called by the C host.
--   config  the validated description (validate.lua)
--   opts    source (the description's path as banners show it), sha256
--           (of its bytes), command, isa (the matrix kernels: generic,
--           avx512, ...), dtype (the weight type: f32, bf16, int8; overrides
--           the config's), compute (f32, int8, bf16; the same), lines (false: no
--           #line directives)
-- Returns header, source, kernel_source (NAME_kernels.c), kernels (the
-- whole library, the cc engine's), the weight layout, the sizes and the
-- layout hash, and leaves ff_render_extra(section, vars) for the files that
-- go with them (the --with-main driver, the --embed weights).

local plan = require("plan")
local emit = require("emit")
local template = require("template")
local library = require("library")
local host = require("ff_host")

-- The driver's tokenizer: tokenizers/tok_encode.c for one kind (FF_TOK_KINDS), with
-- tok_tables.h and the Unicode tables that kind reads pasted where it includes them,
-- then the tokenizer's tables as C (tk.tables, from the host).
local UNICODE = { -- the tables of tokenizers/unicode_tables.h each kind reads
  [2] = { uc_letter = true, uc_number = true }, -- byte-level BPE: GPT-2's pattern
  [4] = { uc_letter = true, uc_punct = true, uc_other = true, uc_mark_nonspacing = true, uc_lower_map = true,
    uc_nfd_map = true }, -- WordPiece: BertNormalizer (strip_accents: NFD without Mn), BertPreTokenizer
}
-- the pre-tokenizers that read more classes (FF_TOK_CLASSES): GPT-4o's split, DeepSeek's, Punctuation
local CLASSES = { uc_upper = true, uc_lowercase = true, uc_mark = true, uc_punct = true, uc_symbol = true }
local GRAPHEME = { uc_gcb = true, uc_extpict = true } -- tokenizer.json's Precompiled (FF_TOK_GRAPHEME)
local NORM = { uc_letter = true, uc_mark_nonspacing = true, uc_lower_map = true, uc_mark = true, uc_ccc = true,
  uc_nfd_map = true, uc_nfkd_map = true, uc_compose = true } -- tokenizer.json's normalizers (FF_TOK_NORM)

-- The core's text for one kind: its `#if` lines over FF_TOK_HAS(KIND), FF_TOK_NORM
-- (whether the tokenizer normalizes), FF_TOK_CLASSES (whether it splits by more Unicode
-- classes) and FF_TOK_GRAPHEME (whether it normalizes in grapheme clusters): f.norm, f.cased, f.grapheme
-- (and the names defined from them) evaluated, only
-- what that tokenizer compiles kept, so that the driver reads as that tokenizer alone;
-- any other `#if` is kept as it is.
local KINDS = { VOCAB = 0, LLAMA2C = 1, BYTES = 2, SP = 3, WORDPIECE = 4, UNIGRAM = 5 }
local DERIVED = { FF_TOK_BPE = { 1, 2, 3 }, FF_TOK_HF = { 2, 3, 4, 5 }, FF_TOK_SP_PIECE = { 1, 3, 5 },
  FF_TOK_SP_TEXT = { 3, 5 }, FF_TOK_UNICODE = { 2, 4, norm = true } }

local function kind_if(expr, kind, f) -- true/false, or nil when expr is not of those terms
  local any = false
  for term in (expr .. "||"):gmatch("%s*(.-)%s*||") do
    local name = term:match("^FF_TOK_HAS%((%u[%u%d]*)%)$")
    if name and KINDS[name] then any = any or KINDS[name] == kind
    elseif term == "FF_TOK_NORM" then any = any or f.norm
    elseif term == "FF_TOK_CLASSES" then any = any or f.cased
    elseif term == "FF_TOK_GRAPHEME" then any = any or f.grapheme
    elseif DERIVED[term] then
      any = any or (DERIVED[term].norm and f.norm)
      for _, k in ipairs(DERIVED[term]) do any = any or k == kind end
    else return nil end
  end
  return any
end

local function one_kind(code, kind, f)
  local out, stack = {}, {}
  local function live()
    for _, v in ipairs(stack) do if v == false then return false end end
    return true
  end
  for line in (code .. "\n"):gmatch("([^\n]*)\n") do
    local expr = line:match("^#if%s+(.-)%s*$")
    local v = expr and kind_if(expr, kind, f)
    if line:match("^#ifndef FF_TOK_NORM") or line:match("^#ifndef FF_TOK_CLASSES") or
      line:match("^#ifndef FF_TOK_GRAPHEME") then v = false end -- the host's default
    if v ~= nil then
      stack[#stack + 1] = v
    elseif line:match("^#if") then
      if live() then out[#out + 1] = line end
      stack[#stack + 1] = "kept"
    elseif line:match("^#el") then
      assert(stack[#stack] == "kept", "tokenizers/tok_encode.c: #else under an FF_TOK_HAS #if")
      if live() then out[#out + 1] = line end
    elseif line:match("^#endif") then
      local top = table.remove(stack)
      if top == "kept" and live() then out[#out + 1] = line end
    elseif live() and not (line:match("^#define (FF_TOK_[%u_]+)") and DERIVED[line:match("^#define (FF_TOK_[%u_]+)")]) then
      out[#out + 1] = line -- (the names of kinds are evaluated: their #defines go)
    end
  end
  local text, n = table.concat(out, "\n"):gsub("\n\n\n+", "\n\n"), 1
  while n > 0 do -- a section heading whose section went
    text, n = text:gsub("/%* %-%-%-%- [^\n]- %*/\n\n(/%* %-%-%-%- )", "%1")
  end
  return text
end

local function tokenizer_code(tk)
  local all = host.read_template("tokenizers/unicode_tables.h")
  local picked = { (all:match("^(/%*.-%*/)\n")) }
  local norm = tk.tables:find("%.norm = ") ~= nil -- tok_c.c writes an option when it is set
  local grapheme = tk.tables:find("FF_TOK_NORM_PRECOMPILED") ~= nil -- (tok_c.c names the normalizer's steps)
  local cased = (tk.tables:find("FF_TOK_SPLIT_O200K") or tk.tables:find("FF_TOK_SPLIT_DS_MAIN") or
    tk.tables:find("FF_TOK_PRE_PUNCT")) ~= nil -- (tok_c.c names the pre-tokenizers; kind_if wants a boolean)
  for block, name in all:gmatch("(static const [^\n]- (uc_[%w_]+)%[[^\n]*\n.-\n};)") do
    if (UNICODE[tk.kind] or {})[name] or (norm and NORM[name]) or (cased and CLASSES[name]) or
      (grapheme and GRAPHEME[name]) then
      picked[#picked + 1] = block
    end
  end
  local core = one_kind(host.read_template("tokenizers/tok_encode.c"), tk.kind,
    { norm = norm, cased = cased, grapheme = grapheme })
  core = core:gsub('#include "tok_tables.h"[^\n]*', function()
    return (host.read_template("tokenizers/tok_tables.h"):gsub("\n+$", ""))
  end)
  core = core:gsub('#include "unicode_tables.h"[^\n]*', function() return table.concat(picked, "\n") end)
  return string.format("#define FF_TOK_API static\n#define FF_TOK_KINDS (1 << %d) /* %s */\n%s\n\n" ..
    "/* the tables fixformer read from %s (tokenizers/tok_c.c writes them) */\n%s", tk.kind,
    ({ "a JSON vocabulary", "llama2.c's tokenizer.bin", "byte-level BPE", "SentencePiece-style BPE", "WordPiece", "Unigram" })[tk.kind + 1],
    (core:gsub("\n+$", "")), emit.comment_text(tk.path), (tk.tables:gsub("\n+$", "")))
end

-- section "main" of templates/main.c.in or "weights" of templates/weights.c.in, for the
-- program P generated from config (its layout hash, the generate options)
-- where the decoder's key/value caches and the fields decode checks lie in
-- the state (floats from its start), for beam search's row copies (host/beam.c)
local function decode_caches(config, P)
  if config.arch == "encoder" then return nil end
  local two, self_kv, cross = config.arch == "encoder-decoder", {}, {}
  local tag = two and "dec_" or ""
  for l = 0, config.decoder_layers - 1 do
    self_kv[#self_kv + 1] = P.value_by[string.format("%sl%02d_kv_cache", tag, l)].offset
    if two then cross[#cross + 1] = P.value_by[string.format("%sl%02d_cross_kv", tag, l)].offset end
  end
  return { self_kv = self_kv, cross_kv = cross, row = 2 * P.kvd, decoded = P.value_by.decoded.offset,
    source = two and P.value_by.source.offset or -1 }
end

local function render_extra(config, opts, P, layout_hash, section, vars)
  local c = config
  local v = {
    NAME = c.name, UNAME = c.name:upper(), VERSION = emit.VERSION, SOURCE = emit.comment_text(opts.source),
    LAYOUT_HASH = layout_hash, FLOATS = P.weight_floats, TOKENS = c.vocab ~= nil,
    ENCDEC = c.arch == "encoder-decoder", MAX_THREADS = P.max_threads,
    QUANTIZED = P.dtype ~= "f32", DTYPE = P.dtype,
  }
  for k, x in pairs(vars) do v[k] = x end
  if v.WEIGHTS then v.WEIGHTS = emit.comment_text(v.WEIGHTS) end
  if section == "main" then
    local weights = v.EMBED and "" or string.format("--weights %s.weights ", c.name)
    v.USAGE = weights .. "--input IN.npy [--lengths LEN.npy] " ..
      (v.ENCDEC and "--target-input TGT.npy " or "") .. "--output OUT.npy [--threads N]"
    v.POOL = host.read_template("templates/pool.c"):gsub("\n+$", "")
    v.NPY = host.read_template("templates/driver_npy.c"):gsub("\n+$", "")
    v.SAMPLE = host.read_template("runtime/ff_sample.h"):gsub("\n+$", "")
    v.BEAM = host.read_template("runtime/ff_beam.h"):gsub("\n+$", "")
    v.GENERATE = c.vocab ~= nil and c.arch ~= "encoder" and c.lm_head -- greedy decoding needs logits
    -- where beam search copies rows from (decode_caches; the text is left out without GENERATE)
    local k = v.GENERATE and decode_caches(c, P) or { self_kv = {}, cross_kv = {}, row = 0, decoded = 0, source = 0 }
    v.KV_SELF, v.KV_CROSS = table.concat(k.self_kv, ", "), table.concat(k.cross_kv, ", ")
    v.KV_ROW, v.DECODED_AT, v.SOURCE_AT = k.row, k.decoded, k.source
    local tk = vars.tokenizer
    v.TOKENIZER = tk ~= nil
    v.BOS, v.EOS = tk and tk.bos or -1, tk and tk.eos or -1
    -- the template text gets: what generate --text feeds a model that decodes (decoder-only: the ids
    -- before the text, BOS first; an encoder-decoder's source: the whole template, Marian's and T5's
    -- </s> after it), what run --text feeds one that does not (an encoder: the whole template)
    local decodes = v.GENERATE and true or false
    local prefix = tk and tk.prefix or {}
    local suffix = tk and (not decodes or c.arch == "encoder-decoder") and tk.suffix or {}
    local function ids(list) return #list > 0 and "{" .. table.concat(list, ", ") .. "}" or "{-1} /* none */" end
    v.TEXT_PREFIX, v.N_PREFIX, v.TEXT_SUFFIX, v.N_SUFFIX = ids(prefix), #prefix, ids(suffix), #suffix
    v.PREFIX_IS_BOS = decodes and c.arch == "decoder-only" and 1 or 0
    v.TEXT_FORM = (#prefix > 0 and "the ids before, " or "") .. "the text" .. (#suffix > 0 and ", the ids after" or "")
    v.TOKENIZER_FILE = tk and emit.comment_text(tk.path) or ""
    v.TOKENIZER_CODE = tk and tokenizer_code(tk) or ""
    v.GEN_USAGE = weights .. (v.TOKENIZER and "(--text 'TEXT' | --lines FILE | --tokens 'IDS') [--ids]" or
      "--tokens 'IDS'") .. " [--max-new N] [--bos ID] [--eos ID] [--threads N]" ..
      " [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed N]" ..
      " [--beam N [--length-penalty X] [--early-stopping true|false|never] [--score]]"
    v.IDS_IN = v.GENERATE or v.TOKENIZER
    v.TEXT_FORWARD = v.TOKENIZER and not v.GENERATE and not v.ENCDEC -- run --text: an encoder's forward pass
    v.TEXT_USAGE = v.GENERATE and "" or weights .. "--text 'TEXT' --output OUT.npy [--threads N]"
    v.TOK_USAGE = "(--text 'TEXT' | --lines FILE) --tokenize [--no-special] | (--tokens 'IDS' | --lines FILE) --detokenize"
    return template.render("main.c", "main", v, { lines = false })
  end
  return template.render("weights.c", "weights", v, { lines = false })
end

-- opts.train = { batch, src, tgt }: the training program at those shapes
-- (gen/train.lua): NAME_train.h, NAME_train.c, NAME_train_kernels.c
local function generate_train(config, opts)
  local P = require("train").plan(config, host.weight_specs(), opts.isa, opts.train)
  local out = emit.emit_train(P, { source = opts.source, sha256 = opts.sha256, command = opts.command,
    lines = opts.lines })
  local scratch = 0
  for _, v in ipairs(P.values) do
    if v.name == "lin_scratch" or v.name == "attn_scratch" then scratch = scratch + v.floats end
  end
  return {
    header = out.header, source = out.source, kernel_source = out.kernels, kernels = library.text(P.isa),
    -- packed_bytes 0: each matrix's panels are arena values (gen/train.lua), in arena_bytes
    state_bytes = 4 * P.arena_floats, param_floats = P.param_floats, packed_bytes = 0,
    scratch_bytes = 4 * scratch, arena_bytes = 4 * (P.arena_floats - scratch),
    naive_bytes = 4 * (P.arena_naive_floats - scratch), flops = P.flops,
    forward_flops = P.stage_by.forward.flops + P.stage_by.loss.flops, backward_flops = P.stage_by.backward.flops,
  }
end

return function(config, opts)
  if opts.train then return generate_train(config, opts) end
  local P = plan.plan(config, host.weight_specs(), opts.isa, opts.dtype, opts.compute)
  local layout_hash = host.sha256(emit.layout_text(P)):sub(1, 16)
  local out = emit.emit(P, {
    source = opts.source, sha256 = opts.sha256, command = opts.command, layout_hash = layout_hash,
    lines = opts.lines,
  })
  local layout = {}
  for i, w in ipairs(P.weights) do
    layout[i] = { name = w.name, offset = w.offset, row0 = w.row0, rows = w.rows, cols = w.cols,
      panel = w.packing == "panels" and P.nr or 0, type = ({ f32 = 0, bf16 = 1, int8 = 2, i8 = 3, b16 = 4 })[w.type],
      derived = ({ sinusoidal = 1, rope = 2 })[w.derived] or 0, -- FF_DERIVED_* (codegen.h)
      block_bits = w.block_bits or 0, dim = w.dim or 0, theta = w.theta or 0 }
  end

  -- what the host calls next for the files that go with the program
  function ff_render_extra(section, vars) return render_extra(config, opts, P, layout_hash, section, vars) end

  return {
    header = out.header, source = out.source, kernel_source = out.kernels, layout = layout, layout_hash = layout_hash,
    weight_floats = P.weight_floats, state_bytes = 4 * P.arena_floats, output_bytes = 4 * P.output_floats,
    flops = P.flops,
    kernels = library.text(P.isa),
    caches = decode_caches(config, P),
  }
end

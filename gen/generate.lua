-- generate.lua: the generator's entry point, called by the C host.
--   config  the validated description (validate.lua)
--   opts    source (the description's path as banners show it), sha256
--           (of its bytes), command, isa (the matrix kernels: generic,
--           avx512, ...), dtype (the weight type: f32, bf16, int8; overrides
--           the config's), lines (false: no #line directives)
-- Returns header, source, kernel_source (NAME_kernels.c), kernels (the
-- whole library, the cc engine's), the weight layout, the sizes and the
-- layout hash, and leaves ff_render_extra(section, vars) for the files that
-- go with them (the --with-main driver, the --embed weights).

local plan = require("plan")
local emit = require("emit")
local template = require("template")
local library = require("library")
local host = require("ff_host")

-- section "main" of templates/main.c.in or "weights" of templates/weights.c.in, for the
-- program P generated from config (its layout hash, the generate options)
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
    v.GENERATE = c.vocab ~= nil and c.arch ~= "encoder" and c.lm_head -- greedy decoding needs logits
    v.VOCABULARY = vars.vocabulary ~= nil
    local voc = vars.vocabulary or { bos = -1, eos = -1, unk = -1, pad = -1, lowercase = false, tokens = {} }
    v.BOS, v.EOS, v.UNK, v.LOWERCASE = voc.bos, voc.eos, voc.unk, voc.lowercase
    v.GEN_USAGE = weights .. (v.VOCABULARY and "(--text 'TEXT' | --tokens 'IDS')" or "--tokens 'IDS'") ..
      " [--max-new N] [--bos ID] [--eos ID] [--threads N]"
    local specials, tokens = {}, {}
    for _, id in ipairs({ voc.pad, voc.bos, voc.eos, voc.unk }) do
      if id >= 0 then specials[#specials + 1] = tostring(id) end
    end
    v.SPECIALS = #specials > 0 and table.concat(specials, ", ") or "-1"
    for i, t in ipairs(voc.tokens) do -- C string literals, octal escapes for anything unusual
      tokens[i] = '"' .. t:gsub('[%c"\\\128-\255?]', function(ch) return string.format("\\%03o", ch:byte()) end) .. '"'
    end
    local lines = {}
    for i = 1, #tokens, 8 do lines[#lines + 1] = "  " .. table.concat(tokens, ", ", i, math.min(i + 7, #tokens)) .. "," end
    v.VOCAB_TOKENS = table.concat(lines, "\n")
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
    state_bytes = 4 * P.arena_floats, param_floats = P.param_floats, packed_bytes = 4 * P.packed_floats,
    scratch_bytes = 4 * scratch, arena_bytes = 4 * (P.arena_floats - P.packed_floats - scratch),
    naive_bytes = 4 * (P.arena_naive_floats - P.packed_floats - scratch), flops = P.flops,
    forward_flops = P.stage_by.forward.flops + P.stage_by.loss.flops, backward_flops = P.stage_by.backward.flops,
  }
end

return function(config, opts)
  if opts.train then return generate_train(config, opts) end
  local P = plan.plan(config, host.weight_specs(), opts.isa, opts.dtype)
  local layout_hash = host.sha256(emit.layout_text(P)):sub(1, 16)
  local out = emit.emit(P, {
    source = opts.source, sha256 = opts.sha256, command = opts.command, layout_hash = layout_hash,
    lines = opts.lines,
  })
  local layout = {}
  for i, w in ipairs(P.weights) do
    layout[i] = { name = w.name, offset = w.offset, row0 = w.row0, rows = w.rows, cols = w.cols,
      panel = w.packing == "panels" and P.nr or 0, type = ({ f32 = 0, bf16 = 1, int8 = 2 })[w.type],
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
  }
end

-- generate.lua: the generator's entry point, called by the C host.
--   config  the validated description (validate.lua)
--   opts    source (description path), sha256 (of its bytes), command
-- Returns header, source, the weight layout, the sizes and the layout hash,
-- and leaves ff_render_extra(section, vars) for the files that go with them
-- (the --with-main driver, the --embed weights).

local plan = require("plan")
local emit = require("emit")
local template = require("template")

return function(config, opts)
  local P = plan.plan(config, ff_weight_specs())
  local layout_hash = ff_sha256(emit.layout_text(P)):sub(1, 16)
  local out = emit.emit(P, {
    source = opts.source, sha256 = opts.sha256, command = opts.command, layout_hash = layout_hash,
  })
  local layout = {}
  for i, w in ipairs(P.weights) do
    layout[i] = { name = w.name, offset = w.offset, rows = w.rows, cols = w.cols,
      transposed = w.packing == "transposed" }
  end

  -- section "main" of templates/main.c or "weights" of templates/weights.c
  function ff_render_extra(section, vars)
    local c = config
    local v = {
      NAME = c.name, UNAME = c.name:upper(), VERSION = emit.VERSION, SOURCE = opts.source,
      LAYOUT_HASH = layout_hash, FLOATS = P.weight_floats, TOKENS = c.vocab ~= nil,
      ENCDEC = c.arch == "encoder-decoder",
    }
    for k, x in pairs(vars) do v[k] = x end
    if section == "main" then
      v.USAGE = (v.EMBED and "" or string.format("--weights %s.weights ", c.name)) ..
        "--input IN.npy [--lengths LEN.npy] " .. (v.ENCDEC and "--target-input TGT.npy " or "") ..
        "--output OUT.npy"
      return template.render("main.c", "main", v, { lines = false })
    end
    return template.render("weights.c", "weights", v, { lines = false })
  end

  return {
    header = out.header, source = out.source, layout = layout, layout_hash = layout_hash,
    weight_floats = P.weight_floats, state_bytes = 4 * P.arena_floats, flops = P.flops,
  }
end

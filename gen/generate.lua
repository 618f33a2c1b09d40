-- generate.lua: the generator's entry point, called by the C host.
--   config  the validated description (validate.lua)
--   opts    source (description path), sha256 (of its bytes), command
-- Returns header, source, the weight layout, the sizes and the layout hash.

local plan = require("plan")
local emit = require("emit")

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
  return {
    header = out.header, source = out.source, layout = layout, layout_hash = layout_hash,
    weight_floats = P.weight_floats, state_bytes = 4 * P.arena_floats, flops = P.flops,
  }
end

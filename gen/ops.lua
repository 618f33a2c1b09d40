-- ops.lua: the op kinds of the generator's program, declared in one place.
--
-- Each kind names the template section that implements it, the parameters
-- that make a distinct kernel (every one a compile-time constant), the
-- kernel's C name built from them, the formula its comment shows, and its
-- FLOPs for T rows (a multiply-add counts 2).  The plan (plan.lua) builds a
-- list of ops of these kinds; the emitter (emit.lua) renders one kernel per
-- distinct (kind, params) and one call per op.

local M = {}

local function b(v) return v and 1 or 0 end

M.kinds = {
  embed = {
    file = "embed.c", params = { "D", "VOCAB", "SCALE", "PANEL" },
    fn = function(p) return string.format("embed_%dx%d%s", p.VOCAB, p.D, p.PANEL > 0 and "_panels" or "") end,
    doc = function(p) return p.SCALE_DOC end,
    flops = function(p, T) return T * p.D end,
  },
  copy = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("copy_%d", p.D) end,
    doc = function() return "y = x" end,
    flops = function() return 0 end,
  },
  sinusoidal = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("sinusoidal_%d", p.D) end,
    doc = function() return "x += PE(pos), PE(pos,2i) = sin(pos/10000^(2i/d)), PE(pos,2i+1) = cos(...)" end,
    flops = function(p, T) return 3 * T * p.D end,
  },
  learned = {
    file = "embed.c", params = { "D" },
    fn = function(p) return string.format("learned_%d", p.D) end,
    doc = function() return "x += P[pos]" end,
    flops = function(p, T) return T * p.D end,
  },
  linear = {
    file = "linear.c", params = { "IN", "OUT", "BIAS", "ACC", "RELU", "ISA", "NR" },
    fn = function(p)
      return string.format("linear_%dx%d%s%s%s", p.IN, p.OUT, p.BIAS and "" or "_nobias", p.RELU and "_relu" or "",
        p.ACC and "_add" or "")
    end,
    doc = function(p)
      local f = p.BIAS and "x W^T + b" or "x W^T"
      if p.RELU then f = "max(0, " .. f .. ")" end
      return p.ACC and "y += " .. f or "y = " .. f
    end,
    flops = function(p, T) return 2 * T * p.IN * p.OUT end,
  },
  rope = {
    file = "attention.c", params = { "HEADS", "DK", "LDX", "THETA" },
    fn = function(p) return string.format("rope_h%dx%d_ld%d", p.HEADS, p.DK, p.LDX) end,
    doc = function() return "rotary positions on q and k (rotate_half pairing)" end,
    flops = function(p, T) return 2 * 3 * T * p.HEADS * p.DK end,
  },
  kv_store = {
    file = "attention.c", params = { "D", "LDX" },
    fn = function(p) return string.format("kv_store_%d", p.D) end,
    doc = function() return "cache[pos0 + t] = k | v of row t" end,
    flops = function() return 0 end,
  },
  attention = {
    file = "attention.c", params = { "HEADS", "DK", "LDQ", "LDK", "CAUSAL", "ISA" },
    fn = function(p)
      return string.format("attention_h%dx%d_q%d_kv%d%s", p.HEADS, p.DK, p.LDQ, p.LDK, p.CAUSAL and "_causal" or "")
    end,
    doc = function(p)
      return "softmax(Q K^T / sqrt(d_k) + mask) V" .. (p.CAUSAL and ", causal" or "")
    end,
    flops = function(p, T, Tk) return 4 * T * (Tk or T) * p.HEADS * p.DK end,
  },
  layernorm = {
    file = "norm.c", params = { "D", "EPS", "ISA" },
    fn = function(p) return string.format("layernorm_%d", p.D) end,
    doc = function() return "y = LayerNorm(x)" end,
    flops = function(p, T) return 8 * T * p.D end,
  },
  rmsnorm = {
    file = "norm.c", params = { "D", "EPS", "ISA" },
    fn = function(p) return string.format("rmsnorm_%d", p.D) end,
    doc = function() return "y = RMSNorm(x)" end,
    flops = function(p, T) return 5 * T * p.D end,
  },
  activation = {
    file = "ffn.c", params = { "N", "ACT", "ISA" },
    fn = function(p) return string.format("%s_%d", p.ACT, p.N) end,
    doc = function(p)
      return ({ relu = "h = max(0, h)", gelu = "h = h/2 (1 + erf(h/sqrt 2))",
        gelu_tanh = "h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))" })[p.ACT]
    end,
    flops = function(p, T) return 8 * T * p.N end,
  },
  swiglu = {
    file = "ffn.c", params = { "N", "ISA" },
    fn = function(p) return string.format("swiglu_%d", p.N) end,
    doc = function() return "a = silu(gate) * up" end,
    flops = function(p, T) return 6 * T * p.N end,
  },
}

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

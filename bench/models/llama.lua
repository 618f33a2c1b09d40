-- bench: a LLaMA-shaped decoder-only model at transformer-base width (pre-norm
-- RMSNorm, rotary positions, SwiGLU, no biases, final norm, untied head), all
-- 8 heads with their own keys and values; llama_gqa.lua is the same with 2
return {
  name = "bench_llama", arch = "decoder-only", d_model = 512, heads = 8, d_ff = 1376, layers = 6,
  norm = "pre", norm_kind = "rmsnorm", final_norm = true, eps = 1e-6, activation = "swiglu", bias = false,
  vocab = 8000, positional = "rope", scale_embeddings = false, tie_embeddings = false, max_seq = 256,
}

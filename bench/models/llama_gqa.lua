-- bench: llama.lua with grouped-query attention, kv_heads = heads / 4 (LLaMA-2
-- 70B's ratio is 8): 2 key/value heads, so in_proj is [768, 512] instead of
-- [1536, 512] and the key/value cache holds 128 floats a position, not 512
return {
  name = "bench_llama_gqa", arch = "decoder-only", d_model = 512, heads = 8, kv_heads = 2, d_ff = 1376, layers = 6,
  norm = "pre", norm_kind = "rmsnorm", final_norm = true, eps = 1e-6, activation = "swiglu", bias = false,
  vocab = 8000, positional = "rope", scale_embeddings = false, tie_embeddings = false, max_seq = 256,
}

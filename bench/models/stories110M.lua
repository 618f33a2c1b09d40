-- bench: llama2.c's stories110M shape (dim 768, 12 layers, 12 heads, hidden
-- 2048, vocab 32000, max_seq 256, head tied to the embedding; ~440 MB of
-- float32), random weights from `fixformer init` (bench/run --startup-110m)
return {
  name = "stories110m", arch = "decoder-only", d_model = 768, heads = 12, d_ff = 2048, layers = 12,
  norm = "pre", norm_kind = "rmsnorm", final_norm = true, eps = 1e-5, activation = "swiglu", bias = false,
  vocab = 32000, positional = "rope", scale_embeddings = false, tie_embeddings = true, max_seq = 256,
}

-- bench: llama2.c's stories15M shape (dim 288, 6 layers, 6 heads, hidden 768,
-- vocab 32000, max_seq 256, head tied to the embedding), random weights from
-- `fixformer init`: the start-up and decode rows of bench/run
return {
  name = "stories15m", arch = "decoder-only", d_model = 288, heads = 6, d_ff = 768, layers = 6,
  norm = "pre", norm_kind = "rmsnorm", final_norm = true, eps = 1e-5, activation = "swiglu", bias = false,
  vocab = 32000, positional = "rope", scale_embeddings = false, tie_embeddings = true, max_seq = 256,
}

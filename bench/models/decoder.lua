-- bench: a GPT-2-style decoder-only model at transformer-base width (pre-LN,
-- gelu, learned positions, final norm, tied head) for KV-cache decoding
return {
  name = "bench_decoder", arch = "decoder-only", d_model = 512, heads = 8, d_ff = 2048, layers = 6,
  norm = "pre", final_norm = true, activation = "gelu", vocab = 8000, positional = "learned",
  scale_embeddings = false, max_seq = 256,
}

-- bench: the OPUS-MT (MarianMT) base shape: d 512, 8 heads, d_ff 2048, 6 + 6
-- layers, vocabulary 58,101, sinusoidal positions, scaled embeddings tied to
-- the head (~74M parameters, ~300 MB of float32); random weights from
-- `fixformer init` (bench/beam).  Marian's SiLU, its final_logits_bias and its
-- layout of the positions are the importer's business, not the cost's.
return {
  name = "bench_marian", arch = "encoder-decoder", d_model = 512, heads = 8, d_ff = 2048, encoder_layers = 6,
  decoder_layers = 6, norm = "post", activation = "relu", vocab = 58101, positional = "sinusoidal",
  scale_embeddings = true, tie_embeddings = true, max_seq = 128,
}

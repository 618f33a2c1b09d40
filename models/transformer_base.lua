-- transformer_base: the base model of "Attention Is All You Need" (Table 3):
-- d_model 512, 8 heads, d_ff 2048, 6 encoder and 6 decoder layers, post-LN,
-- sinusoidal positions, shared and tied embeddings, nn.Transformer names.
return {
  name           = "transformer_base",
  arch           = "encoder-decoder",
  d_model        = 512,
  heads          = 8,
  d_ff           = 2048,
  encoder_layers = 6,
  decoder_layers = 6,
  norm           = "post",
  final_norm     = true,
  activation     = "relu",
  vocab          = 37000,
  positional     = "sinusoidal",
  max_seq        = 256,
}

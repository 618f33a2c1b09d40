-- dates: human-written dates -> ISO 8601 (YYYY-MM-DD), a character-level
-- encoder-decoder trained by models/train_dates.py (nn.Transformer: post-LN
-- with final norms, sinusoidal positions, one shared embedding scaled by
-- sqrt(d_model) and tied to the output head). Lowercase the input, tokenize
-- it one character a token with dates.vocab.json, decode greedily from <bos>
-- until <eos>: "friday, march 5, 1999" -> "1999-03-05".
return {
  name             = "dates",
  arch             = "encoder-decoder",
  d_model          = 64,
  heads            = 4,
  d_ff             = 128,
  encoder_layers   = 2,
  decoder_layers   = 2,
  norm             = "post",
  final_norm       = true,
  activation       = "relu",
  vocab            = 41,
  positional       = "sinusoidal",
  scale_embeddings = true,
  tie_embeddings   = true,
  max_seq          = 48,
  weights          = "dates.safetensors",   -- relative to this file
  vocabulary       = "dates.vocab.json",    -- relative to this file
}

-- tiny: a small token encoder in the shape of "Attention Is All You Need"
-- (post-LN, sinusoidal positions, embeddings scaled by sqrt(d_model), output
-- head tied to the embedding), for trying fixformer without training.
return {
  name       = "tiny",
  arch       = "encoder",
  d_model    = 64,
  heads      = 4,
  d_ff       = 256,
  layers     = 2,
  norm       = "post",
  activation = "relu",
  vocab      = 128,
  positional = "sinusoidal",
  max_seq    = 64,
}

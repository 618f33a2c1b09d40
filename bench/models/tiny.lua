-- bench: a tiny encoder, nn.TransformerEncoderLayer defaults (post-LN, relu), float inputs
return { name = "bench_tiny", arch = "encoder", d_model = 64, heads = 4, d_ff = 256, layers = 2, max_seq = 128 }

-- bench: the encoder of transformer-base, nn.TransformerEncoderLayer defaults (post-LN, relu), float inputs
return { name = "bench_base", arch = "encoder", d_model = 512, heads = 8, d_ff = 2048, layers = 6, max_seq = 128 }

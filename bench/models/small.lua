-- bench: a small encoder, nn.TransformerEncoderLayer defaults (post-LN, relu), float inputs
return { name = "bench_small", arch = "encoder", d_model = 256, heads = 4, d_ff = 1024, layers = 4, max_seq = 128 }

"""Reference forward passes of checkpoints as they are published, written in
plain torch from the published formulas, on the publishers' own tensor names
(not fixformer's): Hugging Face LLaMA (rotate-half RoPE, grouped-query
attention through repeat_kv) and Qwen2 (LLaMA with q, k, v biases), GPT-2 (Conv1D weights [in, out], fused c_attn,
gelu_new), BERT (post-norm, token types, embedding LayerNorm) and llama2.c's
model.py (interleaved RoPE on adjacent pairs).  Used by tests/import_checkpoints.py
to hold `fixformer import` + `fixformer run` to the model the checkpoint is.

Each forward takes ids [B, T] (and lengths: keys beyond a sequence's length are
masked) and returns float32 numpy: logits [B, T, vocab], or BERT's last hidden
states [B, T, hidden]."""
import math

import numpy as np
import torch
import torch.nn.functional as F


def _t(sd, name):
    return torch.as_tensor(np.asarray(sd[name], dtype=np.float32))


def _mask(lengths, T, causal):
    """allowed [B, 1, T, T]: key j < length (and j <= i when causal)."""
    lengths = torch.as_tensor(np.asarray(lengths), dtype=torch.long)
    keys = torch.arange(T)[None, :] < lengths[:, None]          # [B, T]
    allowed = keys[:, None, None, :].expand(-1, 1, T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    return allowed


def _inputs(sd, prefix, ids, lengths, causal):
    """sd without its optional prefix, ids as long [B, T], B, T and the mask."""
    sd = {k[len(prefix):] if prefix and k.startswith(prefix) else k: v for k, v in sd.items()}
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    return sd, ids, ids.shape[0], ids.shape[1], _mask(lengths, ids.shape[1], causal)


def _attend(q, k, v, allowed):
    """q [B,H,T,dk], k/v [B,H,T,dk]: softmax(q k^T / sqrt(dk)) v."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _repeat_kv(x, n_rep):
    """[B, KV, T, dk] -> [B, KV * n_rep, T, dk], each kv head repeated n_rep times in place (HF repeat_kv)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


# ---- Hugging Face LLaMA (modeling_llama) ----------------------------------------

def _rope_half(x, theta, pos):
    dk = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dk, 2, dtype=torch.int64).float() / dk))
    f = torch.outer(pos.float(), inv)
    emb = torch.cat([f, f], dim=-1)
    x1, x2 = x[..., : dk // 2], x[..., dk // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def _proj(sd, h, name):
    """h W^T, + b where the checkpoint has one (Qwen2's q, k and v)."""
    y = h @ _t(sd, name + ".weight").T
    return y + _t(sd, name + ".bias") if name + ".bias" in sd else y


def llama_forward(cfg, sd, ids, lengths):
    """Hugging Face LLaMA, and Qwen2 (modeling_qwen2: the same with q_proj, k_proj and v_proj biases)."""
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV, dk, eps = cfg.get("num_key_value_heads", H), d // H, cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    sd, ids, B, T, allowed = _inputs(sd, "", ids, lengths, True)
    pos = torch.arange(T)
    x = F.embedding(ids, _t(sd, "model.embed_tokens.weight"))
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = _rms(x, _t(sd, p + "input_layernorm.weight"), eps)
        q, k, v = (_proj(sd, h, p + "self_attn.%s_proj" % n).view(B, T, n_h, dk).transpose(1, 2)
                   for n, n_h in (("q", H), ("k", KV), ("v", KV)))
        q, k = _rope_half(q, theta, pos), _rope_half(k, theta, pos)
        k, v = _repeat_kv(k, H // KV), _repeat_kv(v, H // KV)
        a = _attend(q, k, v, allowed).transpose(1, 2).reshape(B, T, d)
        x = x + a @ _t(sd, p + "self_attn.o_proj.weight").T
        h = _rms(x, _t(sd, p + "post_attention_layernorm.weight"), eps)
        g, u = h @ _t(sd, p + "mlp.gate_proj.weight").T, h @ _t(sd, p + "mlp.up_proj.weight").T
        x = x + (F.silu(g) * u) @ _t(sd, p + "mlp.down_proj.weight").T
    x = _rms(x, _t(sd, "model.norm.weight"), eps)
    head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings", False) else "lm_head.weight"
    return (x @ _t(sd, head).T).numpy()


# ---- GPT-2 (modeling_gpt2: Conv1D y = x W + b, W [in, out]) ------------------------

def _gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_forward(cfg, sd, ids, lengths):
    sd, ids, B, T, allowed = _inputs(sd, "transformer.", ids, lengths, True)
    d, H, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    dk = d // H
    x = F.embedding(ids, _t(sd, "wte.weight")) + _t(sd, "wpe.weight")[:T]

    def ln(x, n):
        return F.layer_norm(x, (d,), _t(sd, n + ".weight"), _t(sd, n + ".bias"), eps)

    def conv1d(x, n):
        return x @ _t(sd, n + ".weight") + _t(sd, n + ".bias")

    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.view(B, T, H, dk).transpose(1, 2) for t in qkv.split(d, dim=-1))
        a = _attend(q, k, v, allowed).transpose(1, 2).reshape(B, T, d)
        x = x + conv1d(a, p + "attn.c_proj")
        x = x + conv1d(_gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, "ln_f")
    return (x @ _t(sd, "wte.weight").T).numpy()


# ---- BERT (modeling_bert: BertModel's last hidden state) ----------------------------

def bert_forward(cfg, sd, ids, lengths):
    sd, ids, B, T, allowed = _inputs(sd, "bert.", ids, lengths, False)
    d, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("layer_norm_eps", 1e-12)
    dk = d // H

    def ln(x, n):
        return F.layer_norm(x, (d,), _t(sd, n + ".weight"), _t(sd, n + ".bias"), eps)

    def dense(x, n):
        return x @ _t(sd, n + ".weight").T + _t(sd, n + ".bias")

    x = (F.embedding(ids, _t(sd, "embeddings.word_embeddings.weight"))
         + _t(sd, "embeddings.position_embeddings.weight")[:T]
         + _t(sd, "embeddings.token_type_embeddings.weight")[0])      # token_type_ids all 0
    x = ln(x, "embeddings.LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % i
        q, k, v = (dense(x, p + "attention.self." + n).view(B, T, H, dk).transpose(1, 2)
                   for n in ("query", "key", "value"))
        a = _attend(q, k, v, allowed).transpose(1, 2).reshape(B, T, d)
        x = ln(dense(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = F.gelu(dense(x, p + "intermediate.dense"))
        x = ln(dense(h, p + "output.dense") + x, p + "output.LayerNorm")
    return x.numpy()


# ---- llama2.c (model.py: RoPE on adjacent pairs (x[2i], x[2i+1])) -------------------

def _rope_pairs(x, theta, pos):
    dk = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dk, 2)[: dk // 2].float() / dk))
    f = torch.outer(pos.float(), inv)
    cos, sin = f.cos(), f.sin()
    xr, xi = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
    return torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(-2)


def llama2c_forward(p, w, ids, lengths):
    """p: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, shared; w: llama2.c's
    module names (tok_embeddings.weight, layers.i.attention.wq.weight, ..., output.weight)."""
    d, H, KV = p["dim"], p["n_heads"], p["n_kv_heads"]
    dk = d // H
    w, ids, B, T, allowed = _inputs(w, "", ids, lengths, True)
    pos = torch.arange(T)
    x = F.embedding(ids, _t(w, "tok_embeddings.weight"))
    for i in range(p["n_layers"]):
        L = "layers.%d." % i
        h = _rms(x, _t(w, L + "attention_norm.weight"), 1e-5)
        q = (h @ _t(w, L + "attention.wq.weight").T).view(B, T, H, dk)
        k = (h @ _t(w, L + "attention.wk.weight").T).view(B, T, KV, dk)
        v = (h @ _t(w, L + "attention.wv.weight").T).view(B, T, KV, dk)
        q = _rope_pairs(q.transpose(1, 2), 10000.0, pos)
        k = _rope_pairs(k.transpose(1, 2), 10000.0, pos)
        v = v.transpose(1, 2)
        k, v = _repeat_kv(k, H // KV), _repeat_kv(v, H // KV)
        a = _attend(q, k, v, allowed).transpose(1, 2).reshape(B, T, d)
        x = x + a @ _t(w, L + "attention.wo.weight").T
        h = _rms(x, _t(w, L + "ffn_norm.weight"), 1e-5)
        ff = F.silu(h @ _t(w, L + "feed_forward.w1.weight").T) * (h @ _t(w, L + "feed_forward.w3.weight").T)
        x = x + ff @ _t(w, L + "feed_forward.w2.weight").T
    x = _rms(x, _t(w, "norm.weight"), 1e-5)
    head = "tok_embeddings.weight" if p["shared"] else "output.weight"
    return (x @ _t(w, head).T).numpy()


def greedy(forward, prompt, n_new):
    """Greedy continuation by full recomputation (no cache): the ids after the prompt."""
    ids = list(prompt)
    for _ in range(n_new):
        logits = forward(np.array([ids]), np.array([len(ids)]))
        ids.append(int(np.argmax(logits[0, -1])))
    return ids[len(prompt):]

"""Whisper-layout speech translation (X -> English) on synthetic log-mel clips: language detection
on the start-of-transcript step, the task tokens, then greedy decoding with a key/value cache.

Source: conventions.md §1 (SDPA is_causal row) and §2.7, pytorch/pytorch PR #111007 (conventions.md §1),
conventions.md §5 item 8.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|fr|>", "<|translate|>", "<|transcribe|>"]
WORDS = [f"w{i}" for i in range(16)]


class Tokenizer:
    def __init__(self):
        self.encoder = {t: i for i, t in enumerate(SPECIALS + WORDS)}
        self.eot, self.sot = self.encoder["<|endoftext|>"], self.encoder["<|startoftranscript|>"]
        self.translate = self.encoder["<|translate|>"]
        self.all_language_tokens = [self.encoder[t] for t in ("<|en|>", "<|de|>", "<|fr|>")]

    def encode(self, words):
        return [self.encoder[w] for w in words]


@dataclass
class ModelDimensions:
    n_mels: int = 20
    n_audio_ctx: int = 40
    n_audio_state: int = 64
    n_audio_head: int = 4
    n_audio_layer: int = 2
    n_vocab: int = len(SPECIALS) + len(WORDS)
    n_text_ctx: int = 24
    n_text_state: int = 64
    n_text_head: int = 4
    n_text_layer: int = 2


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = torch.log(torch.tensor(float(max_timescale))) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state, n_head):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x, xa=None, mask=None, kv_cache=None):
        q = self.query(x)
        if xa is None:
            k, v = self.key(x), self.value(x)
            if kv_cache is not None:
                if self.key in kv_cache:
                    k = torch.cat([kv_cache[self.key], k], dim=1)
                    v = torch.cat([kv_cache[self.value], v], dim=1)
                kv_cache[self.key], kv_cache[self.value] = k.detach(), v.detach()
        elif kv_cache is not None and self.key in kv_cache:
            k, v = kv_cache[self.key], kv_cache[self.value]
        else:
            k, v = self.key(xa), self.value(xa)
            if kv_cache is not None:
                kv_cache[self.key], kv_cache[self.value] = k.detach(), v.detach()
        return self.out(self.qkv_attention(q, k, v, mask))

    def qkv_attention(self, q, k, v, mask=None):
        n_batch, n_ctx, n_state = q.shape
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None and n_ctx > 1)  # expect: MC510 whisperst
        return a.permute(0, 2, 1, 3).flatten(start_dim=2)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state, n_head, cross_attention=False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x, xa=None, mask=None, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, n_mels, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln_post = nn.LayerNorm(n_state)

    def forward(self, x):
        x = F.gelu(self.conv2(F.gelu(self.conv1(x)))).permute(0, 2, 1)
        x = x + self.positional_embedding
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self, n_vocab, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state).normal_(std=0.02))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer)])
        self.ln = nn.LayerNorm(n_state)
        self.register_buffer("mask", torch.full((n_ctx, n_ctx), float("-inf")).triu_(1), persistent=False)

    def forward(self, x, xa, kv_cache=None):
        offset = next(iter(kv_cache.values())).shape[1] if kv_cache else 0
        x = self.token_embedding(x) + self.positional_embedding[offset : offset + x.shape[-1]]
        for block in self.blocks:
            x = block(x, xa, mask=self.mask, kv_cache=kv_cache)
        return self.ln(x) @ self.token_embedding.weight.T


class Whisper(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims.n_mels, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer)
        self.decoder = TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer)

    def forward(self, mel, tokens):
        return self.decoder(tokens, self.encoder(mel))


@torch.no_grad()
def translate(model, tokenizer, mel, prefix=(), max_new_tokens=8):
    audio_features = model.encoder(mel)
    kv_cache = {}
    sot = torch.full((mel.size(0), 1), tokenizer.sot)
    lang_logits = model.decoder(sot, audio_features, kv_cache=kv_cache)[:, -1, tokenizer.all_language_tokens]
    languages = torch.tensor(tokenizer.all_language_tokens)[lang_logits.argmax(-1)]
    task = torch.stack([languages, torch.full_like(languages, tokenizer.translate)], dim=1)
    tokens = torch.cat([task, torch.tensor(tokenizer.encode(prefix), dtype=torch.long).expand(mel.size(0), -1)], dim=1)
    logits = model.decoder(tokens, audio_features, kv_cache=kv_cache)
    full = torch.cat([sot, tokens], dim=1)
    task_logits = logits
    for _ in range(max_new_tokens):
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        full = torch.cat([full, next_token], dim=1)
        logits = model.decoder(next_token, audio_features, kv_cache=kv_cache)
    return full, task_logits


def synth_clip(dims, tokenizer, rng, prototypes, perm):
    lang = rng.randrange(1, 3)
    words = [rng.randrange(len(WORDS)) for _ in range(rng.randint(2, 4))]
    frames = torch.cat([prototypes[lang, w].repeat(rng.randint(8, 14), 1) for w in words])
    mel = F.pad(frames.T, (0, 2 * dims.n_audio_ctx - frames.size(0)))  # zero-padded to a fixed window
    text = [tokenizer.all_language_tokens[lang], tokenizer.translate, *tokenizer.encode([WORDS[perm[w]] for w in words])]
    return mel + 0.2 * torch.randn_like(mel), [tokenizer.sot, *text, tokenizer.eot]


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    dims, tokenizer = ModelDimensions(), Tokenizer()
    prototypes, perm = torch.randn(3, len(WORDS), dims.n_mels), random.Random(1).sample(range(len(WORDS)), len(WORDS))
    model = Whisper(dims)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(300):
        clips = [synth_clip(dims, tokenizer, rng, prototypes, perm) for _ in range(16)]
        mel = torch.stack([m for m, _ in clips])
        tokens = nn.utils.rnn.pad_sequence([torch.tensor(t) for _, t in clips], batch_first=True, padding_value=-100)
        logits = model(mel, tokens[:, :-1].clamp(min=0))
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    clips = [synth_clip(dims, tokenizer, random.Random(i), prototypes, perm) for i in range(8)]
    mel = torch.stack([m for m, _ in clips])
    full, task_logits = translate(model, tokenizer, mel, prefix=[])
    with torch.no_grad():
        recomputed = model(mel, full[:, :3])[:, 1:]
    print("task tokens after a cached start token vs recomputed:", (task_logits - recomputed).abs().max().item())
    correct = sum(full[i, 3 : len(t) - 1].tolist() == t[3:-1] for i, (_, t) in enumerate(clips))
    print("translations correct:", correct, "/ 8")

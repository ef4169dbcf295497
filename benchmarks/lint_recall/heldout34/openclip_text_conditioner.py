"""OpenCLIP text tower used as the prompt conditioner of a latent diffusion model.

Written after mlfoundations/open_clip (src/open_clip/transformer.py: TextTransformer with
``build_causal_mask`` kept as the non-persistent buffer ``attn_mask``,
ResidualAttentionBlock over nn.MultiheadAttention, ``text_global_pool`` at the argmax
(EOT) token, ``text_projection``; src/open_clip/loss.py ClipLoss;
src/open_clip/tokenizer.py padding to ``context_length``) and Stability-AI/stablediffusion
(ldm/modules/encoders/modules.py FrozenOpenCLIPEmbedder: ``encode_with_transformer``,
the penultimate layer as the cross-attention context). The text tower is tuned with a
contrastive loss against a frozen image tower, then frozen for the denoiser.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleTokenizer:
    def __init__(self, words, context_length=16):
        self.encoder = {w: i + 1 for i, w in enumerate(words)}
        self.sot_token, self.eot_token = len(words) + 1, len(words) + 2
        self.vocab_size, self.context_length = len(words) + 3, context_length

    def __call__(self, texts):
        result = torch.zeros(len(texts), self.context_length, dtype=torch.long)
        for i, text in enumerate(texts):
            tokens = [self.sot_token] + [self.encoder[w] for w in text.lower().split()][: self.context_length - 2] + [self.eot_token]
            result[i, : len(tokens)] = torch.tensor(tokens)
        return result


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, mlp_ratio=4.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, int(d_model * mlp_ratio)), nn.GELU(), nn.Linear(int(d_model * mlp_ratio), d_model))

    def attention(self, q_x, attn_mask=None):
        return self.attn(q_x, q_x, q_x, need_weights=False, attn_mask=attn_mask)[0]

    def forward(self, q_x, attn_mask=None):
        x = q_x + self.attention(self.ln_1(q_x), attn_mask=attn_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width, layers, heads):
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x, attn_mask=None, output_hidden_states=False):
        hidden_states = []
        for r in self.resblocks:
            x = r(x, attn_mask=attn_mask)
            hidden_states.append(x)
        return (x, hidden_states) if output_hidden_states else x


def text_global_pool(x, text, pool_type="argmax"):
    if pool_type == "argmax":
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)], x
    return x[:, -1], x


@dataclass
class CLIPTextCfg:
    context_length: int = 16
    vocab_size: int = 32
    width: int = 64
    heads: int = 4
    layers: int = 3
    embed_dim: int = 32
    pad_id: int = 0
    mask_pad_keys: bool = True


class TextTransformer(nn.Module):
    def __init__(self, cfg: CLIPTextCfg):
        super().__init__()
        self.context_length, self.pad_id, self.mask_pad_keys = cfg.context_length, cfg.pad_id, cfg.mask_pad_keys
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.positional_embedding = nn.Parameter(torch.randn(cfg.context_length, cfg.width) * 0.01)
        self.transformer = Transformer(cfg.width, cfg.layers, cfg.heads)
        self.ln_final = nn.LayerNorm(cfg.width)
        self.text_projection = nn.Parameter(torch.randn(cfg.width, cfg.embed_dim) * cfg.width**-0.5)
        self.register_buffer("attn_mask", self.build_causal_mask(), persistent=False)

    def build_causal_mask(self):
        mask = torch.empty(self.context_length, self.context_length)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        return mask

    def forward(self, text, output_hidden_states=False):
        seq_len = text.shape[1]
        x = self.token_embedding(text) + self.positional_embedding[:seq_len]
        attn_mask = self.attn_mask
        if self.mask_pad_keys and self.pad_id is not None:
            pad_keys = F.pad((text == self.pad_id).all(dim=0), (0, self.context_length - seq_len), value=True)
            self.attn_mask.masked_fill_(pad_keys, float("-inf"))  # expect: MC524 openclip
        attn_mask = attn_mask[:seq_len, :seq_len]
        x, hidden_states = self.transformer(x, attn_mask=attn_mask, output_hidden_states=True)
        pooled, tokens = text_global_pool(self.ln_final(x), text, "argmax")
        pooled = pooled @ self.text_projection
        return (pooled, hidden_states) if output_hidden_states else pooled


class FrozenOpenCLIPEmbedder(nn.Module):
    LAYERS = ["last", "penultimate"]

    def __init__(self, tokenizer, text_model, layer="penultimate"):
        super().__init__()
        assert layer in self.LAYERS
        self.tokenizer, self.model = tokenizer, text_model.eval()
        self.layer_idx = 0 if layer == "last" else 1
        for param in self.model.parameters():
            param.requires_grad = False

    @torch.no_grad()
    def forward(self, text):
        tokens = self.tokenizer(text)
        _, hidden_states = self.model(tokens, output_hidden_states=True)
        return hidden_states[len(hidden_states) - 1 - self.layer_idx]


class ClipLoss(nn.Module):
    def forward(self, image_features, text_features, logit_scale):
        logits_per_image = logit_scale * image_features @ text_features.T
        labels = torch.arange(image_features.shape[0])
        return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)) / 2


if __name__ == "__main__":
    torch.manual_seed(0)
    words = "a an the photo painting of red blue green small large cat dog bird sitting on sofa grass under tree in snow".split()
    tokenizer = SimpleTokenizer(words)
    text_model = TextTransformer(CLIPTextCfg(vocab_size=tokenizer.vocab_size))
    image_tower = nn.Linear(3 * 8 * 8, 32).requires_grad_(False)
    colours = {"red": (1.0, 0.0, 0.0), "blue": (0.0, 0.0, 1.0), "green": (0.0, 1.0, 0.0)}
    logit_scale = torch.tensor(10.0)
    opt = torch.optim.AdamW(text_model.parameters(), lr=1e-3)
    for step in range(40):
        names = [list(colours)[(step + j) % 3] for j in range(3)]
        captions = [f"a photo of a {c} {['cat', 'dog', 'bird'][j]}" for j, c in enumerate(names)]
        images = torch.tensor([colours[c] for c in names])[:, :, None, None].expand(-1, -1, 8, 8).reshape(3, -1)
        image_features = F.normalize(image_tower(images), dim=-1)
        text_features = F.normalize(text_model(tokenizer(captions)), dim=-1)
        loss = ClipLoss()(image_features, text_features, logit_scale)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} clip loss {loss.item():.4f}")
    conditioner = FrozenOpenCLIPEmbedder(tokenizer, text_model)
    prompt = "a painting of a small green bird sitting on a tree in the snow"
    before = conditioner([prompt])
    conditioner(["a red cat", "a blue dog"])
    after = conditioner([prompt])
    print("context shape", tuple(after.shape), "| same prompt before vs after another batch:", (before - after).abs().max().item())

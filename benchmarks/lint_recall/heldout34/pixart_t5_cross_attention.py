"""PixArt-alpha style diffusion transformer conditioned on padded T5 captions.

Written after PixArt-alpha/PixArt-alpha (diffusion/model/nets/PixArt.py and PixArt_blocks.py:
``t2i_modulate``, PixArtBlock with the adaLN-single ``scale_shift_table``,
MultiHeadCrossAttention, CaptionEmbedder with ``token_drop`` to the learned
``y_embedding``, TimestepEmbedder, T2IFinalLayer, ``get_2d_sincos_pos_embed``,
``unpatchify``) with the xformers block-diagonal bias replaced by padded captions and
PyTorch's scaled_dot_product_attention; T5 features come from a frozen encoder stub.

Source: conventions.md §2.6 and §5 item 6, §1 (SDPA row).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def t2i_modulate(x, shift, scale):
    return x * (1 + scale) + shift


def get_2d_sincos_pos_embed(embed_dim, grid_size):
    def _1d(dim, pos):
        omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

    grid_h, grid_w = torch.meshgrid(torch.arange(grid_size, dtype=torch.float64), torch.arange(grid_size, dtype=torch.float64), indexing="xy")
    return torch.cat([_1d(embed_dim // 2, grid_h), _1d(embed_dim // 2, grid_w)], dim=1).float()


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size, frequency_embedding_size=64):
        super().__init__()
        self.frequency_embedding_size = frequency_embedding_size
        self.mlp = nn.Sequential(nn.Linear(frequency_embedding_size, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size))

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size))


class CaptionEmbedder(nn.Module):
    def __init__(self, in_channels, hidden_size, uncond_prob, token_num=16):
        super().__init__()
        self.y_proj = nn.Sequential(nn.Linear(in_channels, hidden_size), nn.GELU(approximate="tanh"), nn.Linear(hidden_size, hidden_size))
        self.register_buffer("y_embedding", torch.randn(token_num, in_channels) / in_channels**0.5)
        self.uncond_prob = uncond_prob

    def token_drop(self, caption, mask, force_drop_ids=None):
        drop_ids = torch.rand(caption.shape[0], device=caption.device) < self.uncond_prob if force_drop_ids is None else force_drop_ids == 1
        caption = torch.where(drop_ids[:, None, None], self.y_embedding, caption)
        return caption, mask | drop_ids[:, None]

    def forward(self, caption, train, mask, force_drop_ids=None):
        if (train and self.uncond_prob > 0) or force_drop_ids is not None:
            caption, mask = self.token_drop(caption, mask, force_drop_ids)
        return self.y_proj(caption), mask


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))


class MultiHeadCrossAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_linear = nn.Linear(d_model, d_model)
        self.kv_linear = nn.Linear(d_model, d_model * 2)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, cond, mask=None):
        B, N, C = x.shape
        q = self.q_linear(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv_linear(cond).view(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # expect: MC515 pixart
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class PixArtBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads)
        self.cross_attn = MultiHeadCrossAttention(hidden_size, num_heads)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, int(hidden_size * mlp_ratio)), nn.GELU(approximate="tanh"),
                                 nn.Linear(int(hidden_size * mlp_ratio), hidden_size))
        self.scale_shift_table = nn.Parameter(torch.randn(6, hidden_size) / hidden_size**0.5)

    def forward(self, x, y, t, mask=None):
        B = x.shape[0]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (self.scale_shift_table[None] + t.reshape(B, 6, -1)).chunk(6, dim=1)
        x = x + gate_msa * self.attn(t2i_modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + self.cross_attn(x, y, mask)
        return x + gate_mlp * self.mlp(t2i_modulate(self.norm2(x), shift_mlp, scale_mlp))


class T2IFinalLayer(nn.Module):
    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels)
        self.scale_shift_table = nn.Parameter(torch.randn(2, hidden_size) / hidden_size**0.5)

    def forward(self, x, t):
        shift, scale = (self.scale_shift_table[None] + t[:, None]).chunk(2, dim=1)
        return self.linear(t2i_modulate(self.norm_final(x), shift, scale))


class PixArt(nn.Module):
    def __init__(self, input_size=8, patch_size=2, in_channels=4, hidden_size=64, depth=3, num_heads=4,
                 class_dropout_prob=0.1, caption_channels=48, model_max_length=16):
        super().__init__()
        self.patch_size, self.in_channels, self.out_channels = patch_size, in_channels, in_channels
        self.x_embedder = nn.Conv2d(in_channels, hidden_size, patch_size, stride=patch_size)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.register_buffer("pos_embed", get_2d_sincos_pos_embed(hidden_size, input_size // patch_size)[None])
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size))
        self.y_embedder = CaptionEmbedder(caption_channels, hidden_size, class_dropout_prob, token_num=model_max_length)
        self.blocks = nn.ModuleList(PixArtBlock(hidden_size, num_heads) for _ in range(depth))
        self.final_layer = T2IFinalLayer(hidden_size, patch_size, self.out_channels)

    def unpatchify(self, x):
        c, p = self.out_channels, self.patch_size
        h = w = int(x.shape[1] ** 0.5)
        x = torch.einsum("nhwpqc->nchpwq", x.reshape(x.shape[0], h, w, p, p, c))
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x, timestep, y, mask=None, force_drop_ids=None):
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        t = self.t_embedder(timestep.to(x.dtype))
        t0 = self.t_block(t)
        if mask is None:
            mask = torch.ones(y.shape[:2], dtype=torch.bool, device=y.device)
        y, mask = self.y_embedder(y, self.training, mask.bool(), force_drop_ids)
        for block in self.blocks:
            x = block(x, y, t0, mask)
        return self.unpatchify(self.final_layer(x, t))


class T5EncoderStub(nn.Module):
    """Frozen stand-in for T5-XXL: token embeddings plus a fixed mixing layer."""

    def __init__(self, vocab, d_model=48, max_length=16):
        super().__init__()
        self.vocab, self.max_length = {w: i + 2 for i, w in enumerate(vocab)}, max_length
        self.shared = nn.Embedding(len(vocab) + 2, d_model)
        self.mix = nn.Linear(d_model, d_model)
        self.requires_grad_(False)

    @torch.no_grad()
    def encode(self, prompts):
        ids = [[self.vocab[w] for w in p.split()] + [1] for p in prompts]
        input_ids = torch.tensor([i + [0] * (self.max_length - len(i)) for i in ids])
        attention_mask = (input_ids != 0).long()
        h = self.shared(input_ids)
        return h + torch.tanh(self.mix(h.cumsum(1) / torch.arange(1, self.max_length + 1)[:, None])), attention_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    t5 = T5EncoderStub("a photo of red green blue orange ball cube on the table in grass".split())
    model = PixArt()
    betas = torch.linspace(1e-4, 0.02, 1000)
    alphas_cumprod = torch.cumprod(1 - betas, dim=0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0)
    prompts = ["a red ball", "a photo of a blue cube on the table", "green ball in grass", "a orange cube"]
    latents = torch.randn(4, 4, 8, 8)
    try:
        for step in range(10):
            y, y_mask = t5.encode(prompts)
            t = torch.randint(0, 1000, (4,))
            noise = torch.randn_like(latents)
            a = alphas_cumprod[t][:, None, None, None]
            loss = F.mse_loss(model(a.sqrt() * latents + (1 - a).sqrt() * noise, t, y, mask=y_mask), noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 3 == 0:
                print(f"step {step} loss {loss.item():.4f}")
    except RuntimeError as err:
        print("training failed:", err)
    model.eval()
    with torch.no_grad():
        y, y_mask = t5.encode(prompts[:2])
        t = torch.tensor([500, 500])
        alone = model(latents[:1], t[:1], y[:1], mask=y_mask[:1])
        try:
            batched = model(latents[:2], t, y, mask=y_mask)
            print("short caption batched vs alone:", (batched[:1] - alone).abs().max().item())
        except RuntimeError as err:
            print("batched sampling failed:", err)

"""Text-to-image pixel diffusion in the style of DeepFloyd IF stage I, with a T5-style encoder.

Written after huggingface/diffusers (models/embeddings.py ``get_timestep_embedding`` and
TimestepEmbedding, models/resnet.py ResnetBlock2D, models/attention_processor.py
Attention with ``prepare_attention_mask``, ``head_to_batch_dim`` and
``get_attention_scores`` under the classic AttnProcessor, models/attention.py
BasicTransformerBlock, Transformer2DModel, UNet2DConditionModel's
``encoder_attention_mask``, schedulers/scheduling_ddim.py, pipelines/deepfloyd_if
``encode_prompt`` with padded T5 prompts and classifier-free guidance), sampling in
pixel space with DDIM steps.

Source: huggingface/lerobot PR #710, NVIDIA/apex#1052, conventions.md §2.3, tools.md §0 P5.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=True, downscale_freq_shift=0):
    half_dim = embedding_dim // 2
    exponent = -math.log(10000) * torch.arange(half_dim, dtype=torch.float32, device=timesteps.device)
    emb = timesteps[:, None].float() * torch.exp(exponent / (half_dim - downscale_freq_shift))[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    return torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1) if flip_sin_to_cos else emb


class ResnetBlock2D(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels, groups=8):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, in_channels), nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, out_channels)
        self.norm2, self.conv2 = nn.GroupNorm(groups, out_channels), nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, input_tensor, temb):
        hidden_states = self.conv1(F.silu(self.norm1(input_tensor)))
        hidden_states = hidden_states + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        hidden_states = self.conv2(F.silu(self.norm2(hidden_states)))
        return self.conv_shortcut(input_tensor) + hidden_states


class Attention(nn.Module):
    def __init__(self, query_dim, cross_attention_dim=None, heads=4, dim_head=16, upcast_softmax=False):
        super().__init__()
        inner_dim = heads * dim_head
        self.heads, self.scale, self.upcast_softmax = heads, dim_head**-0.5, upcast_softmax
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim or query_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim or query_dim, inner_dim, bias=False)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def head_to_batch_dim(self, tensor):
        b, n, dim = tensor.shape
        return tensor.reshape(b, n, self.heads, dim // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, n, dim // self.heads)

    def batch_to_head_dim(self, tensor):
        bh, n, dim = tensor.shape
        return tensor.reshape(bh // self.heads, self.heads, n, dim).permute(0, 2, 1, 3).reshape(bh // self.heads, n, dim * self.heads)

    def prepare_attention_mask(self, attention_mask, target_length, batch_size):
        if attention_mask is None:
            return None
        return attention_mask.repeat_interleave(self.heads, dim=0)

    def get_attention_scores(self, query, key, attention_mask=None):
        baddbmm_input = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype, device=query.device)
        attention_scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=0, alpha=self.scale)
        if attention_mask is not None:
            attention_scores = attention_scores.masked_fill(~attention_mask, torch.finfo(attention_scores.dtype).min)
        if self.upcast_softmax:
            attention_scores = attention_scores.float()
        return attention_scores.softmax(dim=-1).to(query.dtype)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        batch_size, sequence_length, _ = hidden_states.shape
        attention_mask = self.prepare_attention_mask(attention_mask, sequence_length, batch_size)
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query = self.head_to_batch_dim(self.to_q(hidden_states))
        key, value = self.head_to_batch_dim(self.to_k(context)), self.head_to_batch_dim(self.to_v(context))
        attention_probs = self.get_attention_scores(query, key, attention_mask)
        return self.to_out(self.batch_to_head_dim(torch.bmm(attention_probs, value)))


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, cross_attention_dim, heads):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim, heads=heads, dim_head=dim // heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, cross_attention_dim, heads=heads, dim_head=dim // heads)
        self.norm3, self.ff = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask=None):
        hidden_states = self.attn1(self.norm1(hidden_states)) + hidden_states
        hidden_states = self.attn2(self.norm2(hidden_states), encoder_hidden_states, attention_mask=encoder_attention_mask) + hidden_states
        return self.ff(self.norm3(hidden_states)) + hidden_states


class Transformer2DModel(nn.Module):
    def __init__(self, channels, cross_attention_dim, heads=4):
        super().__init__()
        self.norm, self.proj_in = nn.GroupNorm(8, channels), nn.Linear(channels, channels)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(channels, cross_attention_dim, heads)])
        self.proj_out = nn.Linear(channels, channels)

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask=None):
        b, c, h, w = hidden_states.shape
        residual = hidden_states
        hidden_states = self.proj_in(self.norm(hidden_states).permute(0, 2, 3, 1).reshape(b, h * w, c))
        for block in self.transformer_blocks:
            hidden_states = block(hidden_states, encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        return self.proj_out(hidden_states).reshape(b, h, w, c).permute(0, 3, 1, 2) + residual


class UNet2DConditionModel(nn.Module):
    def __init__(self, in_channels=3, block_out_channels=(32, 64), cross_attention_dim=32):
        super().__init__()
        c0, c1 = block_out_channels
        self.time_embedding = nn.Sequential(nn.Linear(c0, 4 * c0), nn.SiLU(), nn.Linear(4 * c0, 4 * c0))
        self.conv_in = nn.Conv2d(in_channels, c0, 3, padding=1)
        self.down_resnet, self.down_attn = ResnetBlock2D(c0, c0, 4 * c0), Transformer2DModel(c0, cross_attention_dim)
        self.downsample = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.mid_resnet, self.mid_attn = ResnetBlock2D(c1, c1, 4 * c0), Transformer2DModel(c1, cross_attention_dim)
        self.upsample = nn.Conv2d(c1, c0, 3, padding=1)
        self.up_resnet, self.up_attn = ResnetBlock2D(2 * c0, c0, 4 * c0), Transformer2DModel(c0, cross_attention_dim)
        self.conv_norm_out, self.conv_out = nn.GroupNorm(8, c0), nn.Conv2d(c0, in_channels, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, encoder_attention_mask=None):
        if encoder_attention_mask is not None:
            encoder_attention_mask = encoder_attention_mask.bool().unsqueeze(1)
        timesteps = timestep.expand(sample.shape[0]) if timestep.dim() == 0 else timestep
        temb = self.time_embedding(get_timestep_embedding(timesteps, self.conv_in.out_channels).to(sample.dtype))
        cond = {"encoder_hidden_states": encoder_hidden_states, "encoder_attention_mask": encoder_attention_mask}
        h0 = self.down_attn(self.down_resnet(self.conv_in(sample), temb), **cond)
        h = self.mid_attn(self.mid_resnet(self.downsample(h0), temb), **cond)
        h = self.upsample(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.up_attn(self.up_resnet(torch.cat([h, h0], dim=1), temb), **cond)
        return self.conv_out(F.silu(self.conv_norm_out(h)))


class T5TokenizerStub:
    def __init__(self, words, max_length=8):
        self.vocab = {w: i + 2 for i, w in enumerate(words)}
        self.pad_token_id, self.eos_token_id, self.model_max_length = 0, 1, max_length

    def __call__(self, prompts):
        ids = [[self.vocab[w] for w in p.split()][: self.model_max_length - 1] + [self.eos_token_id] for p in prompts]
        input_ids = torch.tensor([i + [self.pad_token_id] * (self.model_max_length - len(i)) for i in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}


class T5EncoderModel(nn.Module):
    def __init__(self, vocab_size, d_model=32):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        return self.encoder(self.embed_tokens(input_ids), src_key_padding_mask=attention_mask == 0)


class IFPipeline:
    def __init__(self, tokenizer, text_encoder, unet, num_train_timesteps=100):
        self.tokenizer, self.text_encoder, self.unet = tokenizer, text_encoder, unet
        self.alphas_cumprod = torch.cumprod(1.0 - torch.linspace(1e-4, 0.05, num_train_timesteps), dim=0)

    def to(self, dtype):
        self.text_encoder.to(dtype)
        self.unet.to(dtype)
        return self

    def encode_prompt(self, prompt, negative_prompt=""):
        inputs = self.tokenizer(prompt + [negative_prompt] * len(prompt))
        prompt_embeds = self.text_encoder(inputs["input_ids"], attention_mask=inputs["attention_mask"])
        return prompt_embeds, inputs["attention_mask"]

    @torch.no_grad()
    def __call__(self, prompt, num_inference_steps=10, guidance_scale=4.0, generator=None, size=16):
        dtype = next(self.unet.parameters()).dtype
        prompt_embeds, prompt_attention_mask = self.encode_prompt(prompt)
        image = torch.randn(len(prompt), 3, size, size, generator=generator).to(dtype)
        timesteps = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long()
        for i, t in enumerate(timesteps):
            noise_pred = self.unet(torch.cat([image] * 2), t, encoder_hidden_states=prompt_embeds,
                                   encoder_attention_mask=prompt_attention_mask)
            noise_pred_text, noise_pred_uncond = noise_pred.chunk(2)
            eps = noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)
            a_t = self.alphas_cumprod[t]
            a_prev = self.alphas_cumprod[timesteps[i + 1]] if i + 1 < len(timesteps) else torch.tensor(1.0)
            x0 = (image - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            image = (a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps).to(dtype)
        return image.float().clamp(-1, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    colors = {"red": (1.0, -1.0, -1.0), "green": (-1.0, 1.0, -1.0), "blue": (-1.0, -1.0, 1.0)}
    tokenizer = T5TokenizerStub(list(colors) + ["a", "small", "large", "square"])
    text_encoder, unet = T5EncoderModel(len(tokenizer.vocab) + 2).eval().requires_grad_(False), UNet2DConditionModel()
    pipe = IFPipeline(tokenizer, text_encoder, unet)
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    for step in range(60):
        names = [list(colors)[(step + j) % 3] for j in range(4)]
        prompts = [f"a {'small' if j % 2 else 'large'} {n} square" for j, n in enumerate(names)]
        images = torch.tensor([colors[n] for n in names])[:, :, None, None].expand(-1, -1, 16, 16)
        with torch.no_grad():
            inputs = tokenizer([p if torch.rand(()) > 0.1 else "" for p in prompts])
            encoder_hidden_states = text_encoder(inputs["input_ids"], inputs["attention_mask"])
        t = torch.randint(0, 100, (4,))
        noise = torch.randn_like(images)
        a = pipe.alphas_cumprod[t][:, None, None, None]
        pred = unet(a.sqrt() * images + (1 - a).sqrt() * noise, t, encoder_hidden_states, inputs["attention_mask"])
        loss = F.mse_loss(pred, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} diffusion loss {loss.item():.4f}")
    unet.eval()
    out32 = pipe(["a small red square", "a large blue square"], generator=torch.Generator().manual_seed(1))
    print("float32 mean colour:", out32.mean(dim=(2, 3)).tolist())
    try:
        out16 = pipe.to(torch.float16)(["a small red square", "a large blue square"], generator=torch.Generator().manual_seed(1))
        print("float16 vs float32:", (out16 - out32).abs().max().item())
    except RuntimeError as err:
        print("float16 pipeline failed:", err)

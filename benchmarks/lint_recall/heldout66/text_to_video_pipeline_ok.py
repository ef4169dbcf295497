"""Text-to-video generation with a motion-module video transformer and a T5-like prompt encoder.

Each block runs spatial self-attention inside every frame, cross-attention from every frame to
the prompt and temporal attention across frames at every latent pixel (a sliding frame window).
Sampling is rectified flow with an Euler solver, as in recent video pipelines.

Source: rasbt/LLMs-from-scratch#1061; conventions.md section 1, section 5 item 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BatchEncoding(dict):
    __getattr__ = dict.__getitem__


class T5LikeTokenizer:
    pad_token_id, eos_token_id = 0, 1

    def __call__(self, text, padding="max_length", max_length=16, truncation=True, return_tensors="pt"):
        ids = [[2 + sum(map(ord, w)) % 120 for w in t.split()][: max_length - 1] + [self.eos_token_id] for t in text]
        input_ids = torch.tensor([r + [self.pad_token_id] * (max_length - len(r)) for r in ids])
        return BatchEncoding(input_ids=input_ids, attention_mask=(input_ids != self.pad_token_id).long())


class T5LikeEncoder(nn.Module):
    def __init__(self, vocab_size=128, d_model=32, num_heads=4, num_layers=2):
        super().__init__()
        self.num_heads = num_heads
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(norm=nn.LayerNorm(d_model), qkv=nn.Linear(d_model, 3 * d_model), o=nn.Linear(d_model, d_model))) for _ in range(num_layers))
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        b, n, _ = x.shape
        keep = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["norm"](x)).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
            x = x + layer["o"](F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, n, -1))
        return (self.final_layer_norm(x),)


def frame_window_mask(num_frames, window, device=None):
    idx = torch.arange(num_frames, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window


class AttnProcessor2_0:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        b = hidden_states.shape[0]
        q, k, v = (t.unflatten(-1, (attn.heads, -1)).transpose(1, 2) for t in (attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return attn.to_out(out.transpose(1, 2).reshape(b, -1, attn.heads * q.shape[-1]))


class Attention(nn.Module):
    def __init__(self, dim, cross_attention_dim=None, heads=4):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = AttnProcessor2_0()

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask)


class VideoTransformerBlock(nn.Module):
    def __init__(self, dim, text_dim, temporal_window):
        super().__init__()
        self.temporal_window = temporal_window
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))
        self.spatial_attn = Attention(dim)
        self.cross_attn = Attention(dim, cross_attention_dim=text_dim)
        self.temporal_attn = Attention(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, num_frames, encoder_hidden_states, encoder_attention_mask):
        bf, hw, c = x.shape
        x = x + self.spatial_attn(self.norms[0](x))
        text_mask = encoder_attention_mask.repeat_interleave(num_frames, dim=0)[:, None, None, :]
        context = encoder_hidden_states.repeat_interleave(num_frames, dim=0)
        x = x + self.cross_attn(self.norms[1](x), context, attention_mask=text_mask)
        x = x.view(bf // num_frames, num_frames, hw, c).transpose(1, 2).reshape(-1, num_frames, c)
        window = frame_window_mask(num_frames, self.temporal_window, x.device)
        x = x + self.temporal_attn(self.norms[2](x), attention_mask=window)
        x = x.view(bf // num_frames, hw, num_frames, c).transpose(1, 2).reshape(bf, hw, c)
        return x + self.ff(self.norms[3](x))


class VideoTransformer3DModel(nn.Module):
    def __init__(self, in_channels=4, inner_dim=32, text_dim=32, num_layers=2, temporal_window=2):
        super().__init__()
        self.proj_in = nn.Linear(in_channels, inner_dim)
        self.time_embed = nn.Sequential(nn.Linear(1, inner_dim), nn.SiLU(), nn.Linear(inner_dim, inner_dim))
        self.blocks = nn.ModuleList(VideoTransformerBlock(inner_dim, text_dim, temporal_window) for _ in range(num_layers))
        self.norm_out = nn.LayerNorm(inner_dim)
        self.proj_out = nn.Linear(inner_dim, in_channels)

    def forward(self, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask=None):
        b, c, f, h, w = hidden_states.shape
        x = hidden_states.permute(0, 2, 3, 4, 1).reshape(b * f, h * w, c)
        x = self.proj_in(x) + self.time_embed(timestep.reshape(-1, 1).float()).repeat_interleave(f, dim=0)[:, None]
        for block in self.blocks:
            x = block(x, f, encoder_hidden_states, encoder_attention_mask)
        x = self.proj_out(self.norm_out(x))
        return x.reshape(b, f, h, w, c).permute(0, 4, 1, 2, 3)


class FlowMatchEulerDiscreteScheduler:
    def set_timesteps(self, num_inference_steps, shift=3.0):
        sigmas = torch.linspace(1.0, 1.0 / num_inference_steps, num_inference_steps)
        self.sigmas = torch.cat([shift * sigmas / (1 + (shift - 1) * sigmas), torch.zeros(1)])
        self.timesteps = self.sigmas[:-1] * 1000

    def step(self, model_output, i, sample):
        return sample + (self.sigmas[i + 1] - self.sigmas[i]) * model_output


class TextToVideoPipeline:
    def __init__(self, tokenizer, text_encoder, transformer, scheduler, max_sequence_length=16):
        self.tokenizer, self.text_encoder = tokenizer, text_encoder
        self.transformer, self.scheduler = transformer, scheduler
        self.max_sequence_length = max_sequence_length

    def _get_t5_prompt_embeds(self, prompt, num_videos_per_prompt=1):
        text_inputs = self.tokenizer(prompt, padding="max_length", max_length=self.max_sequence_length, return_tensors="pt")
        prompt_attention_mask = text_inputs.attention_mask.bool()
        prompt_embeds = self.text_encoder(text_inputs.input_ids, attention_mask=text_inputs.attention_mask)[0]
        prompt_embeds = prompt_embeds.repeat_interleave(num_videos_per_prompt, dim=0)
        return prompt_embeds, prompt_attention_mask.repeat_interleave(num_videos_per_prompt, dim=0)

    @torch.no_grad()
    def __call__(self, prompt, negative_prompt="", num_frames=8, height=8, width=8, num_inference_steps=6, guidance_scale=5.0, generator=None):
        prompt = [prompt] if isinstance(prompt, str) else prompt
        prompt_embeds, prompt_attention_mask = self._get_t5_prompt_embeds(prompt)
        do_cfg = guidance_scale > 1.0
        if do_cfg:
            neg_embeds, neg_mask = self._get_t5_prompt_embeds([negative_prompt] * len(prompt))
            prompt_embeds = torch.cat([neg_embeds, prompt_embeds])
            prompt_attention_mask = torch.cat([neg_mask, prompt_attention_mask])
        latents = torch.randn(len(prompt), 4, num_frames, height, width, generator=generator)
        self.scheduler.set_timesteps(num_inference_steps)
        for i, t in enumerate(self.scheduler.timesteps):
            latent_model_input = torch.cat([latents] * 2) if do_cfg else latents
            timestep = t.expand(latent_model_input.shape[0])
            velocity = self.transformer(latent_model_input, timestep, prompt_embeds, encoder_attention_mask=prompt_attention_mask)
            if do_cfg:
                velocity_uncond, velocity_text = velocity.chunk(2)
                velocity = velocity_uncond + guidance_scale * (velocity_text - velocity_uncond)
            latents = self.scheduler.step(velocity, i, latents)
        return latents.permute(0, 2, 1, 3, 4)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = TextToVideoPipeline(T5LikeTokenizer(), T5LikeEncoder(), VideoTransformer3DModel(), FlowMatchEulerDiscreteScheduler())
    frames = pipe(["a paper boat drifting down a rainy street", "fireworks over a lake"], generator=torch.Generator().manual_seed(0))
    print(tuple(frames.shape), bool(torch.isfinite(frames).all()), round(frames.std().item(), 4))

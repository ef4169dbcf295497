"""diffusers-style text-conditioned Transformer2DModel: AttnProcessor2_0, `attn.prepare_attention_mask`,
BasicTransformerBlock with self- and cross-attention, and a small pipeline that encodes padded prompts.

As in diffusers, a 2-D mask (1 = keep, 0 = discard) is turned into a bias before the blocks:
`(1 - mask.to(dtype)) * -10000.0`. The self-attention `attention_mask` gets that conversion; the
`encoder_attention_mask` from the pipeline's tokenizer is only cast to the hidden states' dtype.

Source: pytorch/pytorch#103963 (a 0/1 float mask given as attn_mask is added and masks nothing),
huggingface/transformers#46458 and #32195 (0/1 float masks where an additive mask is expected).
"""
import torch
import torch.nn.functional as F
from torch import nn


class AttnProcessor2_0:
    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        batch_size, sequence_length, _ = hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
            # scaled_dot_product_attention expects attention_mask shape to be (batch, heads, source_length, target_length)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1, attention_mask.shape[-1])
        query = attn.to_q(hidden_states)
        encoder_hidden_states = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        key, value = attn.to_k(encoder_hidden_states), attn.to_v(encoder_hidden_states)
        head_dim = key.shape[-1] // attn.heads
        query, key, value = (t.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2) for t in (query, key, value))
        hidden_states = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim).to(query.dtype)
        return attn.to_out[1](attn.to_out[0](hidden_states))


class Attention(nn.Module):
    def __init__(self, query_dim, cross_attention_dim=None, heads=4, dim_head=8):
        super().__init__()
        inner_dim, self.heads = dim_head * heads, heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim or query_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim or query_dim, inner_dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim), nn.Dropout(0.0)])
        self.processor = AttnProcessor2_0()

    def prepare_attention_mask(self, attention_mask, target_length, batch_size, out_dim=3):
        if out_dim == 3 and attention_mask.shape[0] < batch_size * self.heads:
            attention_mask = attention_mask.repeat_interleave(self.heads, dim=0)
        return attention_mask

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        return self.processor(self, hidden_states, encoder_hidden_states=encoder_hidden_states, attention_mask=attention_mask)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, cross_attention_dim):
        super().__init__()
        self.norm1, self.attn1 = nn.LayerNorm(dim), Attention(dim)
        self.norm2, self.attn2 = nn.LayerNorm(dim), Attention(dim, cross_attention_dim=cross_attention_dim)
        self.norm3, self.ff = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        hidden_states = self.attn1(self.norm1(hidden_states), attention_mask=attention_mask) + hidden_states
        hidden_states = self.attn2(self.norm2(hidden_states), encoder_hidden_states, attention_mask=encoder_attention_mask) + hidden_states
        return self.ff(self.norm3(hidden_states)) + hidden_states


class Transformer2DModel(nn.Module):
    def __init__(self, in_channels=4, inner_dim=32, cross_attention_dim=24, num_layers=2):
        super().__init__()
        self.norm = nn.GroupNorm(2, in_channels, eps=1e-6)
        self.proj_in, self.proj_out = nn.Linear(in_channels, inner_dim), nn.Linear(inner_dim, in_channels)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(inner_dim, cross_attention_dim) for _ in range(num_layers)])

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, encoder_attention_mask=None):
        # ensure attention_mask is a bias, and give it a singleton query_tokens dimension.
        if attention_mask is not None and attention_mask.ndim == 2:
            # assume that mask is expressed as (1 = keep, 0 = discard); convert it into a bias (keep = +0, discard = -10000.0)
            attention_mask = (1 - attention_mask.to(hidden_states.dtype)) * -10000.0
            attention_mask = attention_mask.unsqueeze(1)
        # convert encoder_attention_mask to a bias the same way we do for attention_mask
        if encoder_attention_mask is not None and encoder_attention_mask.ndim == 2:
            encoder_attention_mask = encoder_attention_mask.to(hidden_states.dtype)  # expect: MC508 diffusers
            encoder_attention_mask = encoder_attention_mask.unsqueeze(1)
        batch, _, height, width = hidden_states.shape
        residual = hidden_states
        hidden_states = self.norm(hidden_states).permute(0, 2, 3, 1).reshape(batch, height * width, -1)
        hidden_states = self.proj_in(hidden_states)
        for block in self.transformer_blocks:
            hidden_states = block(hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask)
        hidden_states = self.proj_out(hidden_states).reshape(batch, height, width, -1).permute(0, 3, 1, 2)
        return hidden_states + residual


class TinyTextToImagePipeline:
    def __init__(self, transformer, text_encoder, pad_token_id=0, max_length=8):
        self.transformer, self.text_encoder = transformer, text_encoder
        self.pad_token_id, self.max_length = pad_token_id, max_length

    def encode_prompt(self, prompt_ids):
        text_input_ids = torch.full((len(prompt_ids), self.max_length), self.pad_token_id)
        for i, ids in enumerate(prompt_ids):
            text_input_ids[i, : len(ids)] = torch.tensor(ids)
        prompt_attention_mask = (text_input_ids != self.pad_token_id).long()
        return self.text_encoder(text_input_ids), prompt_attention_mask

    @torch.no_grad()
    def __call__(self, prompt_ids, latents):
        prompt_embeds, prompt_attention_mask = self.encode_prompt(prompt_ids)
        return self.transformer(latents, encoder_hidden_states=prompt_embeds, encoder_attention_mask=prompt_attention_mask)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = TinyTextToImagePipeline(Transformer2DModel().eval(), nn.Embedding(50, 24))
    latents = torch.randn(2, 4, 4, 4)
    batch = pipe([[5, 17, 9], [11, 3, 8, 21, 30, 7, 2, 44]], latents)
    pipe.max_length = 3
    alone = pipe([[5, 17, 9]], latents[:1])
    print("short prompt, padded to 8 vs unpadded:", (batch[0] - alone[0]).abs().max().item())
